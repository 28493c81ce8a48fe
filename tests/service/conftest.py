"""Service fixtures: a second tiny bundle, the one a model rollout moves to (test_rollout*.py)."""

from __future__ import annotations

import pytest

from tests.tiny_model import build_tiny_model


@pytest.fixture(scope="session")
def bundle_b(tmp_path_factory):
    """A second tiny model: another vocabulary, so other weights and other vectors than the `tiny_bundle`'s."""
    from metricsearch.export.onnx_export import export_bundle

    root = tmp_path_factory.mktemp("tiny-b")
    return export_bundle(build_tiny_model(root / "model", vocab_size=300), root / "bundle", name="tiny-bert-b")
