"""The encoder's batching: identical texts encoded once, batches of similar length, bulk calls spread over workers,
all giving the vectors one-by-one encoding gives, in the caller's order."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from metricsearch.core.bundle import load_bundle
from metricsearch.encoder import Encoder
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
