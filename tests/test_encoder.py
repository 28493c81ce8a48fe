"""The encoder's batching: identical texts encoded once, batches of similar length, bulk calls spread over workers,
all giving the vectors one-by-one encoding gives, in the caller's order; and the precision it runs, chosen from the
CPU's instructions and the bundle's measured overlap, or forced."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from metricsearch.core.bundle import Agreement, ReducedEncoder, load_bundle, write_manifest
from metricsearch.core.errors import BundleError
from metricsearch.encoder import Encoder, choose_precision, cpu_flags
from metricsearch.service.config import Settings
from tests.tiny_model import CORPUS

# Very different lengths (one word to past the tiny model's 64-token truncation), shuffled, with repeats.
LONG = " ".join(CORPUS[:6])
TEXTS = ["kettle", LONG, CORPUS[0], "kettle", CORPUS[5] + " " + CORPUS[6], LONG, "mat", CORPUS[0], "x", *CORPUS[10:20]]


@pytest.fixture(scope="module")
def encoder(tiny_bundle) -> Encoder:
    return Encoder(load_bundle(tiny_bundle), intra_op_threads=1, bulk_workers=2)


def test_batched_deduplicated_encoding_matches_one_by_one(encoder):
    """ONNX Runtime's results depend in the last bit on the batch's shape (its GEMM kernels block and sum by the
    number of rows, and padding changes the softmax's and pooling's reduction lengths): measured on
    all-MiniLM-L6-v2, 457 of 582 texts differ by up to 2.4e-7 between a batch of one and any batch, padded or
    not. So batched encoding is compared with one-by-one encoding to a tolerance far below any ranking
    difference, and byte-for-byte where the batches are the same (below)."""
    alone = np.concatenate([encoder.encode([t]) for t in TEXTS])
    for encode in (encoder.encode, encoder.encode_bulk):
        batched = encode(TEXTS, batch_size=3)
        assert batched.shape == alone.shape and batched.dtype == np.float32
        np.testing.assert_allclose(batched, alone, rtol=0, atol=1e-6)


def test_identical_texts_are_encoded_once_and_scattered_back_byte_identical(encoder, monkeypatch):
    calls: list[int] = []
    run = encoder._run
    monkeypatch.setattr(encoder, "_run", lambda encodings: calls.append(len(encodings)) or run(encodings))
    unique = list(dict.fromkeys(TEXTS))
    once = encoder.encode(unique, batch_size=3)
    calls.clear()
    repeated = encoder.encode(TEXTS, batch_size=3)
    assert sum(calls) == len(unique) < len(TEXTS)
    assert np.array_equal(repeated, once[[unique.index(t) for t in TEXTS]])


def test_bulk_encoding_is_byte_identical_to_sequential_encoding(encoder):
    """Same batches, so the same bits: spreading them over workers changes nothing but the time."""
    texts = TEXTS * 3 + [f"{t} {n}" for n, t in enumerate(CORPUS)]
    assert np.array_equal(encoder.encode_bulk(texts, batch_size=4), encoder.encode(texts, batch_size=4))


def test_openvino_runs_a_stream_per_bulk_worker_with_the_same_vectors(tiny_bundle):
    """A stream runs one call at a time: with one, the bulk workers took turns (encoder._OpenVino has the figures).
    OpenVINO runs no more streams than the process has cores."""
    encoder = Encoder(load_bundle(tiny_bundle), intra_op_threads=1, bulk_workers=2, backend="openvino")
    compiled = encoder.runtime.compiled
    streams = min(2, len(os.sched_getaffinity(0)))
    assert (compiled.get_property("NUM_STREAMS"), compiled.get_property("INFERENCE_NUM_THREADS")) == (streams, streams)
    texts = TEXTS * 3 + [f"{t} {n}" for n, t in enumerate(CORPUS)]  # 3 texts of 64 tokens fit the token budget
    assert np.array_equal(encoder.encode_bulk(texts, batch_size=3), encoder.encode(texts, batch_size=3))


@pytest.mark.parametrize(("backend", "budget"), [("onnxruntime", 384), ("openvino", 192)])
def test_bulk_calls_keep_within_their_runtimes_token_budget(tiny_bundle, monkeypatch, backend, budget):
    """On OpenVINO a query waits for a bulk call's stream, so its calls are shorter (OPENVINO_BULK_BATCH_TOKENS)."""
    encoder = Encoder(load_bundle(tiny_bundle), intra_op_threads=1, bulk_workers=2, backend=backend)
    padded: list[int] = []
    run = encoder._run
    monkeypatch.setattr(encoder, "_run", lambda e: padded.append(len(e) * max(len(x.ids) for x in e)) or run(e))
    texts = [f"{LONG} {n}" for n in range(40)] + [f"{t} {n}" for n, t in enumerate(CORPUS)]  # 64 tokens, and short
    encoder.encode_bulk(texts)
    assert len(padded) > 1 and budget / 2 < max(padded) <= budget


def test_batches_group_similar_lengths_within_a_token_budget():
    lengths = [40, 3, 38, 5, 39, 4, 2, 300]
    assert Encoder._batches(lengths, 3) == [[6, 1, 5], [3, 2, 4], [0, 7]]
    # 80 padded tokens at most: [2, 3, 4] pads to 12 but [5, 38] to 76 and [38, 39, 40] to 120; 300 alone.
    assert Encoder._batches(lengths, 3, 80) == [[6, 1, 5], [3, 2], [4, 0], [7]]


def test_bulk_calls_run_one_at_a_time_while_a_query_is_encoded(encoder, monkeypatch):
    """Bulk calls use every worker while no query is encoded, and leave a core to a query that is."""
    running, most = [0], [0]
    lock = threading.Lock()
    query_started, query_may_end = threading.Event(), threading.Event()
    run = encoder._run

    def observed(encodings):
        if not threading.current_thread().name.startswith("bulk-encoder"):  # the query: held until released
            query_started.set()
            query_may_end.wait(30)
            return run(encodings)
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return run(encodings)

    monkeypatch.setattr(encoder, "_run", observed)
    encoder.encode_bulk(TEXTS, batch_size=2)
    assert most[0] == 2  # both workers at once

    most[0] = 0
    query = threading.Thread(target=encoder.encode, args=(["a query"],))
    query.start()
    assert query_started.wait(30)
    try:
        bulk = encoder.encode_bulk(TEXTS, batch_size=2)  # finishes while the query is still in progress
    finally:
        query_may_end.set()
        query.join(30)
    assert most[0] == 1 and bulk.shape == (len(TEXTS), encoder.width)


def test_a_small_bulk_call_is_not_queued_behind_a_running_load(encoder, monkeypatch):
    """A write of a few items during a bulk load (another client's, or a rollout's copy) is encoded at once."""
    run = encoder._run
    load_done = threading.Event()

    def slow_in_workers(encodings):
        if threading.current_thread().name.startswith("bulk-encoder"):
            time.sleep(0.1)
        return run(encodings)

    monkeypatch.setattr(encoder, "_run", slow_in_workers)
    load_texts = [f"{t} {n}" for n, t in enumerate(CORPUS * 2)]  # batches of 2: >= 0.1 s x batches / 2 workers

    def bulk_load():
        encoder.encode_bulk(load_texts, batch_size=2)
        load_done.set()

    load = threading.Thread(target=bulk_load)
    load.start()
    time.sleep(0.2)  # the load's batches are queued in the workers
    small = encoder.encode_bulk(["kettle", "mat"], batch_size=2)
    assert not load_done.is_set()
    load.join(60)
    assert load_done.is_set()
    np.testing.assert_allclose(small, encoder.encode(["kettle", "mat"]), rtol=0, atol=1e-6)


VNNI = frozenset({"avx2", "avx512f", "avx512_vnni"})
AMX = frozenset({"avx2", "amx_tile", "amx_int8"})
AVX2 = frozenset({"avx", "avx2", "fma"})
BOTH = {"fp32": None, "int8": 0.961}


def test_cpu_flags_come_from_the_flags_line(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu avx2 avx512_vnni amx_int8\n"
        "bugs\t\t: spectre_v1\n\nprocessor\t: 1\nflags\t\t: fpu\n"
    )
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512_vnni", "amx_int8"}
    assert cpu_flags(tmp_path / "missing") == frozenset()  # another OS: nothing known, fp32 kept
    assert "flags" not in cpu_flags()  # this machine's, whatever it has


@pytest.mark.parametrize(
    ("carried", "flags", "options", "expected", "reason"),
    [
        (BOTH, VNNI, {}, "int8", "avx512_vnni"),
        (BOTH, AMX, {}, "int8", "amx_int8"),
        (BOTH, AVX2, {}, "fp32", "no AVX-512 VNNI or AMX"),
        ({"fp32": None, "int8": 0.94}, VNNI, {}, "fp32", "0.940 of fp32's top-10 neighbours, below"),
        (BOTH, VNNI, {"gpu": True}, "fp32", "GPU"),
        (BOTH, VNNI, {"int8_runtime": False}, "fp32", "OpenVINO"),
        ({"fp32": None}, VNNI, {}, "fp32", "only encoder"),
        ({"int8": 0.96}, AVX2, {}, "int8", "only encoder"),  # an int8-only bundle runs as it is
    ],
)
def test_auto_runs_int8_only_where_the_cpu_and_the_measured_overlap_allow(carried, flags, options, expected, reason):
    choice = choose_precision("auto", carried, flags, 0.95, **options)
    assert choice.precision == expected and reason in choice.reason


@pytest.mark.parametrize(("requested", "flags"), [("fp32", VNNI), ("int8", AVX2)])
def test_a_requested_precision_is_run_whatever_the_cpu(requested, flags):
    assert choose_precision(requested, BOTH, flags, 0.95).precision == requested


def test_a_requested_precision_the_bundle_lacks_is_refused():
    with pytest.raises(BundleError, match=r"MS_ENCODER_PRECISION=int8.*carries fp32"):
        choose_precision("int8", {"fp32": None}, VNNI, 0.95)


def test_the_setting_takes_auto_fp32_or_int8(monkeypatch):
    assert Settings().encoder_precision == "auto"
    monkeypatch.setenv("MS_ENCODER_PRECISION", "int8")
    assert Settings().encoder_precision == "int8"
    monkeypatch.setenv("MS_ENCODER_PRECISION", "int4")
    with pytest.raises(ValueError, match="encoder_precision"):
        Settings()


@pytest.fixture(scope="module")
def two_precisions(tiny_bundle, tmp_path_factory) -> Path:
    """The tiny bundle carrying its graph twice, the copy labelled int8 on ONNX Runtime: which file runs is what is
    tested here (tests/export/test_quantize.py runs a real int8 graph)."""
    folder = tmp_path_factory.mktemp("two") / "bundle"
    shutil.copytree(tiny_bundle, folder)
    shutil.copy(folder / "encoder.onnx", folder / "encoder-int8.onnx")
    manifest = load_bundle(folder).manifest
    agreement = Agreement(dataset="d", texts=20, mean_cosine=1, min_cosine=1, neighbour_overlap=0.96, backend="ort")
    int8 = ReducedEncoder(file="encoder-int8.onnx", precision="int8", backend="onnxruntime", agreement=agreement)
    write_manifest(
        manifest.model_copy(update={"encoder": manifest.encoder.model_copy(update={"reduced": [int8]})}), folder
    )
    return folder


@pytest.mark.parametrize(
    ("flags", "requested", "floor", "expected"),
    [
        (VNNI, "auto", 0.95, "int8"),
        (AVX2, "auto", 0.95, "fp32"),
        (VNNI, "auto", 0.97, "fp32"),
        (VNNI, "fp32", 0.95, "fp32"),
        (AVX2, "int8", 0.95, "int8"),
    ],
)
def test_the_encoder_runs_the_chosen_precision_and_logs_why(
    two_precisions, monkeypatch, caplog, flags, requested, floor, expected
):
    monkeypatch.setattr("metricsearch.encoder.cpu_flags", lambda: flags)
    with caplog.at_level(logging.INFO, logger="metricsearch.encoder"):
        encoder = Encoder(load_bundle(two_precisions), precision=requested, min_overlap=floor)
    assert encoder.precision == expected
    assert encoder.bundle.encoder_path.name == ("encoder-int8.onnx" if expected == "int8" else "encoder.onnx")
    (record,) = [r for r in caplog.records if r.getMessage() == "encoder precision chosen"]
    assert record.precision == expected and record.reason and record.carried == {"fp32": None, "int8": 0.96}


def test_forcing_int8_below_the_floor_is_refused(two_precisions):
    with pytest.raises(BundleError, match=r"0\.960 of fp32.*MS_MIN_NEIGHBOUR_OVERLAP=0\.97"):
        Encoder(load_bundle(two_precisions), precision="int8", min_overlap=0.97)
