"""Fused scores: z-scores with catalog statistics, missing descriptions on the title's z, and a ranking that does
not depend on which candidates are ranked together."""

from __future__ import annotations

import numpy as np

from metricsearch.core.fusion import ComponentStats, fuse, zscores


def test_statistics_ignore_missing_fields():
    stats = ComponentStats.estimate({"title": np.array([1.0, 3.0]), "description": np.array([np.nan, 4.0])})
    assert stats.mean == {"title": 2.0, "description": 4.0}
    assert stats.std["title"] == 1.0 and stats.pairs == 2


def test_a_missing_description_takes_the_titles_z():
    stats = ComponentStats({"title": 0.0, "description": 10.0}, {"title": 1.0, "description": 2.0}, 100)
    z = zscores({"title": np.array([2.0, 3.0]), "description": np.array([np.nan, 14.0])}, stats)
    np.testing.assert_allclose(z["description"], [2.0, 2.0])


def test_fused_ranking_is_the_same_for_any_subset_of_candidates():
    rng = np.random.default_rng(0)
    components = {name: rng.normal(size=50) for name in ("title", "description", "lexical_title")}
    stats = ComponentStats.estimate({name: rng.normal(size=500) for name in components})
    weights = {"title": 1.0, "description": 0.5, "lexical_title": 2.0}
    full = fuse(components, stats, weights)
    subset = np.arange(0, 50, 3)
    np.testing.assert_allclose(fuse({n: v[subset] for n, v in components.items()}, stats, weights), full[subset])


def test_zero_weights_leave_a_component_out():
    stats = ComponentStats({"title": 0.0, "lexical_title": 0.0}, {"title": 1.0, "lexical_title": 1.0}, 10)
    components = {"title": np.array([1.0]), "lexical_title": np.array([np.nan])}
    scores = fuse(components, stats, {"title": 1.0, "lexical_title": 0})
    assert scores.tolist() == [1.0]


def test_matrices_of_queries_by_candidates_fuse_as_each_row_does():
    """What tuning and the evaluation pass: (queries, candidates) components, a missing description in places."""
    rng = np.random.default_rng(1)
    components = {name: rng.normal(size=(4, 6)) for name in ("title", "description", "lexical_text")}
    components["description"][rng.random((4, 6)) < 0.3] = np.nan
    stats = ComponentStats.estimate({name: rng.normal(size=200) for name in components})
    weights = {"title": 2.0, "description": 1.0, "lexical_text": 0.5}
    fused, z = fuse(components, stats, weights), zscores(components, stats)
    for row in range(4):
        one = {name: values[row] for name, values in components.items()}
        np.testing.assert_allclose(fused[row], fuse(one, stats, weights))
        for name, values in zscores(one, stats).items():
            np.testing.assert_allclose(z[name][row], values)
