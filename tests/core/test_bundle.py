"""Manifest validation: a bad bundle is refused at load with a message naming the file and the fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from metricsearch.core.bundle import load_bundle
from metricsearch.core.errors import BundleError


def _copy(bundle: Path, tmp_path: Path) -> Path:
    target = tmp_path / "bundle"
    shutil.copytree(bundle, target)
    return target


def _edit(bundle: Path, **changes) -> None:
    manifest_path = bundle / "bundle.json"
    data = json.loads(manifest_path.read_text())
    data.update(changes)
    manifest_path.write_text(json.dumps(data))


def test_valid_bundle_loads(tiny_bundle):
    bundle = load_bundle(tiny_bundle)
    assert bundle.manifest.schema_version == 1
    assert bundle.encoder_path.is_file()


def test_other_schema_version_is_refused_naming_both(tiny_bundle, tmp_path):
    bundle = _copy(tiny_bundle, tmp_path)
    _edit(bundle, schema_version=2)
    with pytest.raises(BundleError, match=r"schema_version 2.*reads version 1"):
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
