"""The tiny bundle fusing as the packaged one does, for the benches that need a fused bundle."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from metricsearch.core.bundle import AdaptiveFusionSpec, FusionSpec, load_bundle, write_manifest
from metricsearch.core.fusion import AGREEMENT_FUSION, DEFAULT_FUSION


@pytest.fixture(scope="session")
def fused_tiny_bundle(tiny_bundle, tmp_path_factory) -> Path:
    """The tiny bundle with the packaged bundle's fusion: DEFAULT_FUSION and AGREEMENT_FUSION's adaptive rule (the
    tiny one exports none, as any model but the packaged one)."""
    out = tmp_path_factory.mktemp("fused") / "bundle"
    shutil.copytree(tiny_bundle, out)
    rule = AGREEMENT_FUSION
    adaptive = AdaptiveFusionSpec(
        components=list(rule.components), floor=rule.floor, power=rule.power, gate=rule.gate, chosen_by=rule.rule
    )
    fusion = FusionSpec(weights=dict(DEFAULT_FUSION), chosen_by="as the packaged bundle", adaptive=adaptive)
    write_manifest(load_bundle(out).manifest.model_copy(update={"fusion": fusion}), out)
    return out
