"""A second-order bundle for the evaluation tests: the session's tiny model exported with rank-2 SVD factors."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def svd_bundle(tiny_bundle, tmp_path_factory) -> Path:
    """The tiny model exported for second-order serving: rank-2 factors, reranked by S_F."""
    from metricsearch.export.onnx_export import export_bundle

    root = tmp_path_factory.mktemp("svd2")
    return export_bundle(tiny_bundle.parent / "model", root / "bundle", name="tiny-svd2", pooling="svd", rank_k=2)
