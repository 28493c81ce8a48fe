"""Start-up refuses a reduced-precision bundle whose agreement with fp32 was never measured: its neighbour overlap is
unknown, so MS_MIN_NEIGHBOUR_OVERLAP cannot vouch for it. Only a floor of 0 serves it; fp32 needs no record."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from metricsearch.core.bundle import MANIFEST_FILE
from metricsearch.core.errors import BundleError
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service


def _unmeasured(bundle: Path, precision: str, target: Path) -> Path:
    """The tiny fp32 bundle relabelled as `precision` with no agreement record, as a hand-made or older export is."""
    shutil.copytree(bundle, target)
    manifest = json.loads((target / MANIFEST_FILE).read_text())
    manifest["encoder"] |= {"precision": precision, "agreement": None}
    (target / MANIFEST_FILE).write_text(json.dumps(manifest))
    return target


@pytest.mark.parametrize("precision", ["int8", "bf16", "fp16"])
def test_unmeasured_reduced_precision_bundle_is_refused_with_the_fix(tiny_bundle, tmp_path, precision):
    bundle = _unmeasured(tiny_bundle, precision, tmp_path / precision)
    settings = Settings(bundle_dir=bundle, data_dir=tmp_path / "data")
    with pytest.raises(BundleError) as refused:
        Service(settings)
    message = str(refused.value)
    assert f"its {precision} encoder records no measured agreement" in message
    assert f"--precision {precision} --catalog CATALOG" in message
    assert "MS_MIN_NEIGHBOUR_OVERLAP=0.95" in message and "MS_MIN_NEIGHBOUR_OVERLAP=0 to serve it" in message
    assert not (tmp_path / "data").exists(), "nothing may be opened before the bundle is accepted"


def test_a_floor_of_zero_serves_an_unmeasured_bundle(tiny_bundle, tmp_path):
    bundle = _unmeasured(tiny_bundle, "int8", tmp_path / "int8")
    runtime = Service(Settings(bundle_dir=bundle, data_dir=tmp_path / "data", min_neighbour_overlap=0)).live
    try:
        assert runtime.bundle.manifest.encoder.precision == "int8"
        assert runtime.encoder.encode(["red cotton shirt"]).shape == (1, runtime.encoder.dim)
    finally:
        runtime.close()


def test_fp32_bundle_needs_no_record_at_any_floor(tiny_bundle, tmp_path):
    runtime = Service(Settings(bundle_dir=tiny_bundle, data_dir=tmp_path / "data", min_neighbour_overlap=1)).live
    runtime.close()
