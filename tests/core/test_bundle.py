"""Manifest validation: a bad bundle is refused at load with a message naming the file and the fix; a bundle carrying
fp32 and int8 round-trips, and a version-1 bundle (one encoder) still loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from metricsearch.core.bundle import Agreement, ReducedEncoder, load_bundle, write_manifest
from metricsearch.core.errors import BundleError

AGREEMENT = Agreement(
    dataset="listings", texts=760, mean_cosine=0.995, min_cosine=0.97, neighbour_overlap=0.958, backend="openvino CPU"
)


def _copy(bundle: Path, tmp_path: Path) -> Path:
    target = tmp_path / "bundle"
    shutil.copytree(bundle, target)
    return target


def _edit(bundle: Path, **changes) -> None:
    manifest_path = bundle / "bundle.json"
    data = json.loads(manifest_path.read_text())
    data.update(changes)
    manifest_path.write_text(json.dumps(data))


def _with_int8(bundle: Path, tmp_path: Path) -> Path:
    """A copy of an fp32 bundle carrying a second graph as int8 (the same bytes: only the manifest is tested here)."""
    target = _copy(bundle, tmp_path)
    shutil.copy(target / "encoder.onnx", target / "encoder-int8.onnx")
    manifest = load_bundle(target).manifest
    int8 = ReducedEncoder(file="encoder-int8.onnx", precision="int8", backend="openvino", agreement=AGREEMENT)
    write_manifest(
        manifest.model_copy(update={"encoder": manifest.encoder.model_copy(update={"reduced": [int8]})}), target
    )
    return target


def test_valid_bundle_loads(tiny_bundle):
    bundle = load_bundle(tiny_bundle)
    assert bundle.manifest.schema_version == 1
    assert bundle.encoder_path.is_file()


def test_a_one_encoder_bundle_is_written_as_version_1_which_older_services_read(tiny_bundle):
    written = json.loads((tiny_bundle / "bundle.json").read_text())
    assert written["schema_version"] == 1 and "reduced" not in written["encoder"]


def test_a_bundle_with_fp32_and_int8_round_trips(tiny_bundle, tmp_path):
    bundle = load_bundle(_with_int8(tiny_bundle, tmp_path))
    encoder = bundle.manifest.encoder
    assert bundle.manifest.schema_version == 2
    assert encoder.precisions == {"fp32": None, "int8": 0.958}
    assert encoder.reduced[0].agreement == AGREEMENT
    int8 = bundle.in_precision("int8")
    assert int8.encoder_path == bundle.path / "encoder-int8.onnx"
    assert (int8.manifest.encoder.precision, int8.manifest.encoder.backend) == ("int8", "openvino")
    assert int8.manifest.encoder.agreement == AGREEMENT and int8.manifest.encoder.dim == encoder.dim
    assert bundle.in_precision("fp32") is bundle
    with pytest.raises(BundleError, match="carries no bf16 encoder"):
        bundle.in_precision("bf16")


def test_an_older_one_encoder_bundle_still_loads(tiny_bundle, tmp_path):
    """A version-1 manifest as exports wrote it before bundles carried two encoders (no `reduced` key)."""
    bundle = _copy(tiny_bundle, tmp_path)
    data = json.loads((bundle / "bundle.json").read_text())
    data["encoder"] = {k: data["encoder"][k] for k in ("file", "inputs", "output", "output_kind", "dim")} | {
        "precision": "fp32",
        "backend": "onnxruntime",
        "agreement": None,
    }
    (bundle / "bundle.json").write_text(json.dumps(data | {"schema_version": 1}))
    loaded = load_bundle(bundle)
    assert loaded.manifest.encoder.precisions == {"fp32": None} and loaded.in_precision("fp32") is loaded


def test_reduced_encoders_need_version_2_an_fp32_encoder_and_their_file(tiny_bundle, tmp_path):
    both = _with_int8(tiny_bundle, tmp_path)
    _edit(both, schema_version=1)
    with pytest.raises(BundleError, match=r"encoder\.reduced needs schema_version 2"):
        load_bundle(both)
    _edit(
        both,
        schema_version=2,
        encoder=json.loads((both / "bundle.json").read_text())["encoder"] | {"precision": "bf16"},
    )
    with pytest.raises(BundleError, match="made from an fp32 encoder"):
        load_bundle(both)
    _edit(both, encoder=json.loads((both / "bundle.json").read_text())["encoder"] | {"precision": "fp32"})
    (both / "encoder-int8.onnx").unlink()
    with pytest.raises(BundleError, match=r"encoder-int8\.onnx.*missing"):
        load_bundle(both)


def test_other_schema_version_is_refused_naming_both(tiny_bundle, tmp_path):
    bundle = _copy(tiny_bundle, tmp_path)
    _edit(bundle, schema_version=3)
    with pytest.raises(BundleError, match=r"schema_version 3.*reads versions 1 and 2"):
        load_bundle(bundle)


def test_missing_manifest_says_how_to_build_one(tmp_path):
    with pytest.raises(BundleError, match="metricsearch export"):
        load_bundle(tmp_path)


def test_corrupt_json_is_refused(tiny_bundle, tmp_path):
    bundle = _copy(tiny_bundle, tmp_path)
    (bundle / "bundle.json").write_text("{not json")
    with pytest.raises(BundleError, match="not readable JSON"):
        load_bundle(bundle)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"metric": "hamming"}, "metric"),
        ({"unexpected": 1}, "unexpected"),
        ({"fields": [{"name": "description", "weight": 1.0}]}, "first field must be 'title'"),
        ({"fields": [{"name": "title", "weight": 0.0}]}, "weight > 0"),
        ({"pooling": "svd"}, "rank_k"),
        ({"max_seq_length": 0}, "max_seq_length"),
    ],
)
def test_invalid_manifests_name_the_field(tiny_bundle, tmp_path, changes, message):
    bundle = _copy(tiny_bundle, tmp_path)
    _edit(bundle, **changes)
    with pytest.raises(BundleError, match=message):
        load_bundle(bundle)


def test_missing_encoder_file_is_named(tiny_bundle, tmp_path):
    bundle = _copy(tiny_bundle, tmp_path)
    (bundle / "encoder.onnx").unlink()
    with pytest.raises(BundleError, match=r"encoder\.onnx.*missing"):
        load_bundle(bundle)


def test_character_ngrams_are_named_in_the_manifest_and_change_what_a_store_holds(tiny_bundle, tmp_path):
    """A manifest without n-grams is written and identified as before they existed (its stores stay valid); one that
    names the n-gram analyzer round-trips, and its identity, which every store checks, differs."""
    written = json.loads((tiny_bundle / "bundle.json").read_text())
    assert "ngrams" not in written["lexical"]
    words = load_bundle(tiny_bundle)
    assert words.manifest.lexical.ngrams is None and "ngrams" not in words.identity
    bundle = _copy(tiny_bundle, tmp_path)
    _edit(bundle, lexical={**written["lexical"], "ngrams": "char-wb-3grams/v1"})
    loaded = load_bundle(bundle)
    assert loaded.manifest.lexical.ngrams == "char-wb-3grams/v1"
    write_manifest(loaded.manifest, bundle)
    assert load_bundle(bundle).manifest == loaded.manifest
    assert loaded.identity != words.identity and '"ngrams":"char-wb-3grams/v1"' in loaded.identity
    _edit(bundle, lexical={**written["lexical"], "ngrams": "char-wb-4grams/v9"})
    with pytest.raises(BundleError, match=r"lexical\.ngrams"):
        load_bundle(bundle)


def test_an_adaptive_fusion_round_trips_and_a_fixed_one_is_written_as_before(tiny_bundle, tmp_path):
    """The rule's parameters survive write and load; a fusion without a rule has no `adaptive` key, so a service from
    before rules existed still reads the manifest."""
    bundle = _copy(tiny_bundle, tmp_path)
    adaptive = {"components": ["title", "lexical_text"], "floor": 0.1, "power": 2.0, "gate": 0.4, "chosen_by": "why"}
    for fusion in (
        {"weights": {"title": 1.0}, "chosen_by": "fixed"},
        {"weights": {"title": 1.0}, "adaptive": adaptive},
    ):
        _edit(bundle, fusion=fusion)
        manifest = load_bundle(bundle).manifest
        write_manifest(manifest, bundle)
        written = json.loads((bundle / "bundle.json").read_text())["fusion"]
        assert load_bundle(bundle).manifest == manifest and ("adaptive" in written) == ("adaptive" in fusion)
    assert manifest.fusion.adaptive.model_dump() == adaptive
    _edit(bundle, fusion={"weights": {"title": 1.0}, "adaptive": adaptive | {"components": ["title", "colour"]}})
    with pytest.raises(BundleError, match=r"fusion\.adaptive\.components must name each of"):
        load_bundle(bundle)


def test_a_fusion_that_weighs_ngrams_needs_the_bundle_to_store_them(tiny_bundle, tmp_path):
    bundle = _copy(tiny_bundle, tmp_path)
    written = json.loads((bundle / "bundle.json").read_text())
    for fusion in (
        {"weights": {"title": 1.0, "ngrams_text": 0.5}},
        {
            "weights": {"title": 1.0},
            "adaptive": {"components": ["title", "ngrams_title"], "floor": 0, "power": 1, "gate": 0.4},
        },
    ):
        _edit(bundle, lexical=written["lexical"], fusion=fusion)
        with pytest.raises(BundleError, match=r"need lexical\.ngrams"):
            load_bundle(bundle)
        _edit(bundle, lexical={**written["lexical"], "ngrams": "char-wb-3grams/v1"}, fusion=fusion)
        assert load_bundle(bundle).manifest.fusion is not None
