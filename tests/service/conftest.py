"""Service fixtures: a second tiny bundle, the one a model rollout moves to (test_rollout*.py), and engines over a
small catalog whose rerank normalises its scores."""

from __future__ import annotations

import pytest

from metricsearch.core.fusion import DEFAULT_FUSION
from tests.service.catalogs import served_catalog
from tests.tiny_model import build_tiny_model


@pytest.fixture(scope="session")
def bundle_b(tmp_path_factory):
    """A second tiny model: another vocabulary, so other weights and other vectors than the `tiny_bundle`'s."""
    from metricsearch.export.onnx_export import export_bundle

    root = tmp_path_factory.mktemp("tiny-b")
    return export_bundle(build_tiny_model(root / "model", vocab_size=300), root / "bundle", name="tiny-bert-b")


@pytest.fixture
def hybrid(tiny_bundle, tmp_path):
    runtime = served_catalog(tiny_bundle, tmp_path, fusion={"weights": DEFAULT_FUSION, "chosen_by": "test"})
    yield runtime.engine
    runtime.close()


NORMALISED = {
    "fused": {"fusion": {"weights": DEFAULT_FUSION, "chosen_by": "test"}},
    "recobert": {"metric": "recobert", "recobert_lambdas": [1.0, 1.0, 0.5, 0.5]},
}


@pytest.fixture(params=list(NORMALISED))
def normalised(request, tiny_bundle, tmp_path):
    """A catalog whose rerank normalises scores: fused with lexical scores, or RecoBERT's four."""
    runtime = served_catalog(tiny_bundle, tmp_path, **NORMALISED[request.param])
    yield runtime.engine
    runtime.close()


@pytest.fixture(params=list(NORMALISED))
def exhaustive(request, tiny_bundle, tmp_path):
    """`normalised`, with every item a candidate of every query: a ranking is then exact, so a cached answer checked
    after writes must equal it (no candidate search in between to find other items)."""
    runtime = served_catalog(tiny_bundle, tmp_path, candidates_min=1000, **NORMALISED[request.param])
    yield runtime.engine
    runtime.close()
