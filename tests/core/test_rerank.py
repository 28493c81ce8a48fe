"""The exact rerank against brute force: the angular metric is minus the weighted per-field angular distance, a field
either side lacks compares on the title, components show each field's score (NaN where it is missing), and a fused
rerank refuses to run without what fusion reads."""

from __future__ import annotations

import numpy as np
import pytest

from metricsearch.core.bundle import FUSION_COMPONENTS, AdaptiveFusionSpec, FieldSpec, FusionSpec, load_bundle
from metricsearch.core.fusion import DEFAULT_FUSION, ComponentStats, fuse
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


def test_an_adaptive_rule_fuses_with_the_weights_the_statistics_carry_and_a_fixed_fusion_ignores_them(manifest):
    """The rule's choice travels with the catalog's statistics; a bundle without a rule ranks exactly as before."""
    rng = np.random.default_rng(4)
    query, candidates = (
        FieldVectors(units(rng, 2), np.ones(2, bool)),
        FieldVectors(units(rng, 5, 2), np.ones((5, 2), bool)),
    )
    lexical = {
        name: rng.random(5) for name in ("lexical_title", "lexical_description", "lexical_text", "lexical_codes")
    }
    chosen = {"title": 0.2, "lexical_title": 1.0}
    stats = ComponentStats(
        dict.fromkeys(FUSION_COMPONENTS, 0.1), dict.fromkeys(FUSION_COMPONENTS, 0.5), 100, chosen, "measured"
    )
    fixed = Reranker(manifest.model_copy(update={"fusion": FusionSpec(weights={"title": 1.0, "lexical_text": 1.0})}))
    rule = AdaptiveFusionSpec(components=["title", "lexical_title"], floor=0.0, power=1.0, gate=0.3)
    adaptive = Reranker(
        manifest.model_copy(update={"fusion": FusionSpec(weights={"title": 1.0, "lexical_text": 1.0}, adaptive=rule)})
    )
    components = adaptive.metric_scores(query, candidates, lexical)[1]
    np.testing.assert_array_equal(adaptive(query, candidates, lexical, stats).scores, fuse(components, stats, chosen))
    np.testing.assert_array_equal(
        fixed(query, candidates, lexical, stats).scores, fuse(components, stats, {"title": 1.0, "lexical_text": 1.0})
    )
    unmeasured = ComponentStats(stats.mean, stats.std, 100)
    assert adaptive.fusion_weights(unmeasured) == fixed.fusion_weights(stats) == {"title": 1.0, "lexical_text": 1.0}
    assert fixed.scored == {"title", "lexical_text"} and adaptive.scored == {"title", "lexical_text", "lexical_title"}
