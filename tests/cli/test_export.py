"""`metricsearch export` writes a bundle with the fusion weights named, refuses to overwrite one, and offers exactly
the choices the bundle manifest and the exporter define."""

from __future__ import annotations

import json

from metricsearch.cli import export
from metricsearch.core.bundle import METRICS_OF_POOLING
from metricsearch.core.fusion import CATALOG_FUSION, CATALOG_FUSION_RULE
from metricsearch.export import PRECISIONS


def test_export_refuses_to_overwrite(run_cli, tiny_bundle):
    result = run_cli("export", "--bundle", tiny_bundle)
    assert result.returncode == 1 and "choose another --bundle or pass --overwrite" in result.stderr


def test_export_writes_the_named_fusion_weights(run_cli, tiny_bundle, tmp_path):
    """`--fusion catalog` gives any model the weights a catalog-trained bundle starts from; unset, a model other than
    the packaged one gets none."""
    model = tiny_bundle.parent / "model"
    named = run_cli("export", "--model", model, "--bundle", tmp_path / "catalog", "--fusion", "catalog")
    assert named.returncode == 0, named.stderr
    fusion = json.loads((tmp_path / "catalog" / "bundle.json").read_text())["fusion"]
    assert fusion == {"weights": CATALOG_FUSION, "chosen_by": CATALOG_FUSION_RULE}
    unset = run_cli("export", "--model", model, "--bundle", tmp_path / "unset")
    assert unset.returncode == 0 and json.loads((tmp_path / "unset" / "bundle.json").read_text())["fusion"] is None
    wrong = run_cli("export", "--model", model, "--bundle", tmp_path / "x", "--fusion", "lexical")
    assert wrong.returncode == 2 and "'lexical' is not one of 'default', 'catalog'" in wrong.stderr


def test_choices_are_those_the_manifest_and_the_exporter_define(run_cli):
    assert [p.value for p in export.Pooling] == list(METRICS_OF_POOLING)
    assert {p.value for p in export.Precision} == set(PRECISIONS)
    shown = run_cli("export", "--help").stdout
    assert "fp32|fp16|bf16|int8" in shown and "mean|cov|svd" in shown and "angular|frobenius|recobert" in shown
