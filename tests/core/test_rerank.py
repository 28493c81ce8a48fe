"""The exact rerank against brute force: the angular metric is minus the weighted per-field angular distance, a field
either side lacks compares on the title, components show each field's score (NaN where it is missing), and a fused
rerank refuses to run without what fusion reads."""

from __future__ import annotations

import numpy as np
import pytest

from metricsearch.core.bundle import FieldSpec, FusionSpec, load_bundle
from metricsearch.core.fusion import DEFAULT_FUSION
from metricsearch.core.rerank import FieldVectors, Reranker

DIM = 8


def units(rng: np.random.Generator, *shape: int) -> np.ndarray:
    vectors = rng.normal(size=(*shape, DIM))
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)


def angle(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.arccos(np.clip(a @ b, -1, 1)) / np.pi)


@pytest.fixture
def manifest(tiny_bundle):
    fields = [FieldSpec(name="title", weight=1.0), FieldSpec(name="description", weight=0.5)]
    return load_bundle(tiny_bundle).manifest.model_copy(update={"metric": "angular", "fusion": None, "fields": fields})


def test_angular_rerank_is_minus_the_weighted_angular_distance_per_field(manifest):
    rng = np.random.default_rng(0)
    query = FieldVectors(units(rng, 2), np.array([True, True]))
    candidates = FieldVectors(units(rng, 3, 2), np.array([[True, True], [True, False], [True, True]]))
    reranked = Reranker(manifest)(query, candidates)

    title = [angle(query.fields[0], c[0]) for c in candidates.fields]
    description = [angle(query.fields[1], c[1]) for c in candidates.fields]
    description[1] = title[1]  # no description: the title's distance stands in
    expected = [-(t + 0.5 * d) for t, d in zip(title, description, strict=True)]
    np.testing.assert_allclose(reranked.scores, expected, rtol=1e-5)
    np.testing.assert_allclose(reranked.components["title"], [-t for t in title], rtol=1e-5)
    assert np.isnan(reranked.components["description"][1])
    assert reranked.components["description"][0] == pytest.approx(-description[0], rel=1e-5)


def test_an_item_ranks_first_against_itself(manifest):
    rng = np.random.default_rng(1)
    catalog = units(rng, 5, 2)
    reranked = Reranker(manifest)(
        FieldVectors(catalog[3], np.ones(2, bool)), FieldVectors(catalog, np.ones((5, 2), bool))
    )
    assert int(np.argmax(reranked.scores)) == 3 and reranked.scores[3] == pytest.approx(0.0, abs=1e-6)


def test_a_field_of_weight_zero_is_not_scored(manifest):
    title_only = manifest.model_copy(
        update={"fields": [FieldSpec(name="title", weight=1.0), FieldSpec(name="description", weight=0.0)]}
    )
    assert Reranker(title_only).fields == ["title"]


def test_a_fused_rerank_needs_lexical_scores_and_catalog_statistics(manifest):
    fused = Reranker(manifest.model_copy(update={"fusion": FusionSpec(weights=DEFAULT_FUSION)}))
    rng = np.random.default_rng(2)
    with pytest.raises(ValueError, match="lexical scores and the catalog's statistics"):
        fused(FieldVectors(units(rng, 2), np.ones(2, bool)), FieldVectors(units(rng, 3, 2), np.ones((3, 2), bool)))
    assert fused.needs_stats and not Reranker(manifest).needs_stats
