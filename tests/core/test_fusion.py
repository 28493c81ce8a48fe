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


def test_fused_score_of_an_item_is_the_same_whatever_candidates_come_with_it():
    """Bit for bit: ties break by id, so a last-bit difference (BLAS rounds a row by its place in the array) would
    reorder equal items between a narrow page and a wide one."""
    rng = np.random.default_rng(0)
    names = ("title", "description", "lexical_title", "lexical_description", "lexical_text", "lexical_codes")
    components = {name: rng.normal(size=2000) for name in names}
    stats = ComponentStats.estimate({name: rng.normal(size=500) for name in components})
    weights = dict(zip(names, (2.0, 1.0, 0.3, 0.7, 0.5, 0.5), strict=True))
    full = fuse(components, stats, weights)
    for start in range(1, 33):
        np.testing.assert_array_equal(fuse({n: v[start:] for n, v in components.items()}, stats, weights), full[start:])
    subset = np.arange(0, 2000, 3)
    np.testing.assert_array_equal(fuse({n: v[subset] for n, v in components.items()}, stats, weights), full[subset])


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
