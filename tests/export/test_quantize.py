"""Reduced-precision export: int8/bf16/fp16 bundles record their measured agreement with fp32, load in the service,
and a bundle below MS_MIN_NEIGHBOUR_OVERLAP is refused; a bundle may carry fp32 and int8 side by side, which give
near neighbours; ONNX Runtime runs on the CPU when no GPU is there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from metricsearch.core.bundle import MANIFEST_FILE, check_agreement, load_bundle
from metricsearch.core.errors import BundleError
from metricsearch.encoder import Encoder, choose_backend, choose_providers
from metricsearch.export.onnx_export import ExportError, export_bundle
from metricsearch.export.quantize import INT8_FILE, LISTINGS, neighbour_overlap
from tests.tiny_model import CORPUS, build_tiny_model


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-quantize") / "model")


@pytest.fixture(scope="module")
def catalog(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("catalog") / "catalog.jsonl"
    lines = [
        {"id": str(i), "title": title, "description": CORPUS[(i * 7 + 3) % len(CORPUS)] if i % 4 else ""}
        for i, title in enumerate(CORPUS)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture(scope="module")
def int8_bundle(tiny_model, catalog, tmp_path_factory) -> Path:
    return export_bundle(tiny_model, tmp_path_factory.mktemp("int8") / "bundle", precision="int8", catalog=catalog)


@pytest.fixture(scope="module")
def fp32_and_int8(tiny_model, tmp_path_factory) -> Path:
    """What the default export writes: int8 beside fp32, calibrated and measured on generic listings."""
    return export_bundle(tiny_model, tmp_path_factory.mktemp("both") / "bundle", int8=True)


def _ops(bundle: Path, file: str | None = None) -> set[str]:
    return {n.op_type for n in onnx.load(str(bundle / (file or load_bundle(bundle).manifest.encoder.file))).graph.node}


def test_fp32_export_with_int8_beside_it(fp32_and_int8):
    bundle = load_bundle(fp32_and_int8)
    encoder = bundle.manifest.encoder
    assert (bundle.manifest.schema_version, encoder.precision, encoder.agreement) == (2, "fp32", None)
    (int8,) = encoder.reduced
    assert (int8.file, int8.precision, int8.backend) == (INT8_FILE, "int8", "openvino")
    assert {"QuantizeLinear", "DequantizeLinear"} <= _ops(fp32_and_int8, INT8_FILE)
    assert "QuantizeLinear" not in _ops(fp32_and_int8)
    assert int8.agreement.dataset == LISTINGS and int8.agreement.texts > 700
    assert sorted(p.name for p in fp32_and_int8.iterdir()) == [
        "bundle.json",
        "encoder-int8.onnx",
        "encoder.onnx",
        "tokenizer.json",
    ]


def test_int8_and_fp32_of_one_bundle_give_near_neighbours(fp32_and_int8):
    bundle = load_bundle(fp32_and_int8)
    fp32 = Encoder(bundle, precision="fp32").encode(CORPUS)
    int8 = Encoder(bundle, precision="int8", min_overlap=0).encode(CORPUS)
    assert np.sum(fp32 * int8, axis=1).min() > 0.99
    assert neighbour_overlap(fp32, int8, k=5).mean() >= 0.8


def test_only_the_packaged_model_gets_int8_by_default(tiny_model, tiny_bundle, tmp_path):
    assert load_bundle(tiny_bundle).manifest.encoder.reduced == []
    with pytest.raises(ExportError, match="beside an fp32 one"):
        export_bundle(tiny_model, tmp_path / "a", precision="fp16", int8=True)


def test_int8_export_is_quantized_and_records_its_agreement(int8_bundle, catalog):
    encoder = load_bundle(int8_bundle).manifest.encoder
    assert (encoder.precision, encoder.backend, encoder.file) == ("int8", "openvino", "encoder.onnx")
    assert {"QuantizeLinear", "DequantizeLinear"} <= _ops(int8_bundle)
    assert not list(int8_bundle.glob("encoder-*.onnx")), "the fp32 graph and temporaries must not stay in the bundle"
    agreement = encoder.agreement
    titles, descriptions = len(CORPUS), sum(1 for i in range(len(CORPUS)) if i % 4)
    assert agreement.dataset == catalog.name and agreement.texts == titles + descriptions
    assert 0.9 < agreement.mean_cosine <= 1.0001 and agreement.min_cosine <= agreement.mean_cosine
    assert 0.0 <= agreement.neighbour_overlap <= 1.0
    assert agreement.backend.startswith("openvino CPU")


def test_int8_bundle_runs_on_both_runtimes_alike(int8_bundle):
    bundle = load_bundle(int8_bundle)
    openvino = Encoder(bundle, backend="auto").encode(CORPUS)
    onnxruntime = Encoder(bundle, "CPUExecutionProvider", backend="onnxruntime").encode(CORPUS)
    assert openvino.shape == onnxruntime.shape == (len(CORPUS), bundle.manifest.encoder.dim)
    assert np.allclose(np.linalg.norm(openvino, axis=1), 1.0, atol=1e-5)
    assert np.sum(openvino * onnxruntime, axis=1).min() > 0.99


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_bf16_and_fp16_exports(tiny_model, catalog, tmp_path, precision):
    bundle = export_bundle(tiny_model, tmp_path / precision, precision=precision, catalog=catalog)
    encoder = load_bundle(bundle).manifest.encoder
    assert encoder.precision == precision and encoder.agreement.neighbour_overlap > 0.5
    graph = onnx.load(str(bundle / encoder.file)).graph
    float16 = {i.name for i in graph.initializer if i.data_type == onnx.TensorProto.FLOAT16}
    assert bool(float16) == (precision == "fp16")  # bf16 keeps the fp32 graph; OpenVINO runs it in bf16
    assert [o.type.tensor_type.elem_type for o in graph.output] == [onnx.TensorProto.FLOAT]


def test_fp32_export_has_no_agreement_record(tiny_bundle):
    encoder = load_bundle(tiny_bundle).manifest.encoder
    assert (encoder.precision, encoder.backend, encoder.agreement) == ("fp32", "onnxruntime", None)
    check_agreement(load_bundle(tiny_bundle), 1.0)  # nothing recorded, nothing refused


def test_bad_precision_requests_fail_before_exporting(tiny_model, tmp_path):
    with pytest.raises(ExportError, match="needs --catalog"):
        export_bundle(tiny_model, tmp_path / "a", precision="int8")
    with pytest.raises(ExportError, match="must be one of"):
        export_bundle(tiny_model, tmp_path / "b", precision="int4", catalog=tmp_path / "x.csv")
    with pytest.raises(ExportError, match="no such file"):
        export_bundle(tiny_model, tmp_path / "c", precision="bf16", catalog=tmp_path / "missing.csv")
    assert not any(tmp_path.iterdir())


def _with_overlap(bundle: Path, overlap: float, target: Path) -> Path:
    shutil.copytree(bundle, target)
    manifest = json.loads((target / MANIFEST_FILE).read_text())
    manifest["encoder"]["agreement"]["neighbour_overlap"] = overlap
    (target / MANIFEST_FILE).write_text(json.dumps(manifest))
    return target


def test_floor_refuses_a_bundle_below_it(int8_bundle, tmp_path):
    low = load_bundle(_with_overlap(int8_bundle, 0.9, tmp_path / "low"))
    with pytest.raises(BundleError, match=r"0.900 of fp32's top-10 neighbours.*MS_MIN_NEIGHBOUR_OVERLAP=0.95"):
        check_agreement(low, 0.95)
    check_agreement(low, 0.9)  # at the floor is fine


@pytest.mark.slow
def test_service_serves_an_int8_bundle_and_refuses_one_below_the_floor(int8_bundle, start_service, tmp_path):
    service = start_service(int8_bundle)
    with service.client() as client:
        items = [{"id": str(i), "title": t, "description": ""} for i, t in enumerate(CORPUS[:8])]
        assert client.post("/index", json={"items": items}).json()["indexed"] == 8
        answer = client.post("/similar", json={"text": CORPUS[0], "k": 3}).json()
        assert len(answer["results"]) == 3
        assert client.get("/model").json()["encoder"]["agreement"]["neighbour_overlap"] >= 0.0

    low = _with_overlap(int8_bundle, 0.5, tmp_path / "low")
    env = {"MS_BUNDLE_DIR": str(low), "MS_DATA_DIR": str(tmp_path / "data"), "MS_PORT": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "metricsearch.cli", "serve"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "MS_MIN_NEIGHBOUR_OVERLAP" in result.stderr and "0.500" in result.stderr


def test_providers_fall_back_to_cpu_and_io_binding_matches_a_plain_run(tiny_bundle):
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        assert choose_providers("auto") == ["CPUExecutionProvider"]
        with pytest.raises(BundleError, match=r"CUDAExecutionProvider.*not available here"):
            choose_providers("CUDAExecutionProvider")
    bundle = load_bundle(tiny_bundle)
    encoder = Encoder(bundle, "auto", backend="onnxruntime")
    assert encoder.runtime.device == ("cuda" if choose_providers("auto")[0] == "CUDAExecutionProvider" else "cpu")
    feed = encoder.batch_inputs(encoder.tokenizer.encode_batch(CORPUS[:5]))
    plain = ort.InferenceSession(str(bundle.encoder_path), providers=["CPUExecutionProvider"])
    expected = plain.run([bundle.manifest.encoder.output], feed)[0]
    assert np.allclose(encoder.runtime(feed), expected, atol=1e-5)


def test_backend_choice():
    assert choose_backend("onnxruntime", "auto") == "onnxruntime"
    assert choose_backend("openvino", "onnxruntime") == "onnxruntime"
    assert choose_backend("openvino", "auto") == "openvino"  # installed with the service extra
    assert choose_backend("onnxruntime", "openvino") == "openvino"


def test_neighbour_overlap_counts_shared_neighbours():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(40, 8))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    assert neighbour_overlap(vectors, vectors).tolist() == [1.0] * 40
    shuffled = vectors[rng.permutation(40)]  # another text set: neighbours by index no longer match
    assert neighbour_overlap(vectors, shuffled).mean() < 0.5
    # brute force on one row
    top = set(np.argsort(-(vectors @ vectors[3]))[1:11])
    other = set(np.argsort(-(shuffled @ shuffled[3]))[1:11])
    assert neighbour_overlap(vectors, shuffled)[3] == len(top & other) / 10
