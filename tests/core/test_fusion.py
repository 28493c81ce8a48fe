"""Fused scores: z-scores with catalog statistics, missing descriptions on the title's z, and a ranking that does
not depend on which candidates are ranked together."""

from __future__ import annotations

import numpy as np

from metricsearch.core.bundle import AdaptiveFusionSpec
from metricsearch.core.fusion import (
    AGREEMENT_FUSION,
    DEFAULT_FUSION,
    AgreementRule,
    CatalogAgreement,
    ComponentStats,
    candidate_agreement,
    catalog_agreement,
    fuse,
    neighbour_agreement,
    zscores,
)


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


def test_a_component_agrees_when_its_nearest_neighbour_is_the_others():
    """Rows are sampled items, columns every item; each row's own column is left out (it would be its own best)."""
    strong = np.array([[9.0, 1.0, 0.0, 0.0], [1.0, 9.0, 0.0, 0.0], [0.0, 0.0, 9.0, 1.0]])
    noise = np.array([[9.0, 0.0, 1.0, 0.0], [0.0, 9.0, 1.0, 0.0], [0.0, 0.0, 9.0, 1.0]])
    own = [0, 1, 2]
    agreement = neighbour_agreement({"title": strong, "lexical_title": strong.copy(), "description": noise}, own)
    assert agreement["title"] == agreement["lexical_title"] == 1.0
    assert agreement["description"] == 1 / 3  # only the last row names the item the other two name


def test_a_component_that_tells_no_items_apart_agrees_never():
    """An empty or constant field (every score equal, missing fields as 0) measures nothing: 0, never a NaN."""
    rng = np.random.default_rng(0)
    title = rng.normal(size=(5, 8))
    empty = np.zeros((5, 8))
    agreement = neighbour_agreement({"title": title, "description": empty, "lexical_text": title.copy()}, range(5))
    assert agreement["description"] == 0.0 and agreement["title"] == 1.0


def test_one_item_has_no_neighbour_to_agree_on():
    assert neighbour_agreement({"title": np.zeros((1, 1)), "lexical_text": np.zeros((1, 1))}, [0]) == {
        "title": 0.0,
        "lexical_text": 0.0,
    }


def test_a_catalog_of_near_duplicates_gets_weights_from_its_agreement():
    agreement = CatalogAgreement(
        {"title": 0.6, "description": 0.3, "lexical_text": 0.75, "lexical_codes": 0.45}, 0.59, 500
    )
    weights, why = AGREEMENT_FUSION.weights(agreement, DEFAULT_FUSION)
    # floor 0.2, power 0.5: sqrt(a - 0.2), the largest (lexical_text, sqrt(0.55)) scaled to 1
    assert weights["lexical_text"] == 1.0 and weights["title"] == 0.8528 and weights["description"] == 0.4264
    assert weights["lexical_title"] == 0.0 and "near-duplicates 0.590" in why


def test_too_few_items_keep_the_bundles_weights_whatever_they_agree_on():
    few = CatalogAgreement({"title": 0.6, "description": 0.3, "lexical_text": 0.75, "lexical_codes": 0.45}, 0.59, 6)
    weights, why = AGREEMENT_FUSION.weights(few, DEFAULT_FUSION)
    assert weights == DEFAULT_FUSION and "6 items measured" in why


def test_a_catalog_without_near_duplicates_keeps_the_bundles_weights():
    """Sentences (STS-benchmark): the learned metric leads; a catalog of one item or of empty fields likewise."""
    for agreement in (
        CatalogAgreement({"title": 0.3, "lexical_text": 0.6}, 0.31, 500),
        CatalogAgreement(dict.fromkeys(AGREEMENT_FUSION.components, 0.0), 0.0, 500),
    ):
        weights, why = AGREEMENT_FUSION.weights(agreement, DEFAULT_FUSION)
        assert weights == DEFAULT_FUSION and why.startswith("the bundle's weights")


def test_an_empty_constant_or_one_item_catalog_measures_no_agreement():
    one = {name: np.zeros((1, 1)) for name in ("title", "description", "lexical_text")}
    assert catalog_agreement(one, [0]) == CatalogAgreement(dict.fromkeys(one, 0.0), 0.0, 1)
    rng = np.random.default_rng(3)
    title = rng.normal(size=(6, 9))
    constant = {"title": title, "description": np.full((6, 9), np.nan), "lexical_text": np.ones((6, 9))}
    measured = catalog_agreement(constant, range(6))
    assert measured.components == {"title": 0.0, "description": 0.0, "lexical_text": 0.0}
    assert measured.near_duplicates == 0.0  # the lexical score names the first item, whatever it is


def test_agreement_over_each_items_candidates_is_the_catalogs_when_they_are_every_other_item():
    """The service measures over the candidates its store finds; with every other item as candidates that is the
    agreement over the whole catalog, and an item that is no candidate of a row takes no part in it."""
    rng = np.random.default_rng(5)
    z = {name: rng.normal(size=(6, 6)) for name in ("title", "description", "lexical_text")}
    stats = ComponentStats(dict.fromkeys(z, 0.0), dict.fromkeys(z, 1.0), 30)
    rows = [{name: np.delete(values[n], n) for name, values in z.items()} for n in range(6)]
    ids = [[f"i{j}" for j in range(6) if j != n] for n in range(6)]
    assert candidate_agreement(rows, ids, stats, list(z)) == catalog_agreement(z, range(6))
    backwards = [{name: values[::-1] for name, values in row.items()} for row in rows]
    assert candidate_agreement(backwards, [row[::-1] for row in ids], stats, list(z)) == catalog_agreement(z, range(6))
    mask = np.ones((6, 6), dtype=bool)
    mask[:, 5] = False
    fewer = [{name: np.delete(values[n], [n, 5]) for name, values in z.items()} for n in range(5)]
    masked = {name: values[:5] for name, values in z.items()}
    fewer_ids = [[f"i{j}" for j in range(5) if j != n] for n in range(5)]
    assert candidate_agreement(fewer, fewer_ids, stats, list(z)) == catalog_agreement(masked, range(5), mask[:5])


def test_no_candidates_agree_on_nothing():
    stats = ComponentStats({}, {}, 0)
    nothing = CatalogAgreement({"title": 0.0, "lexical_text": 0.0}, 0.0, 0)
    assert candidate_agreement([], [], stats, ["title", "lexical_text"]) == nothing
    assert candidate_agreement([{"title": np.zeros(0)}], [[]], stats, ["title", "lexical_text"]) == nothing


def test_a_rule_reads_its_parameters_from_the_manifest():
    spec = AdaptiveFusionSpec(components=["title", "lexical_text"], floor=0.1, power=2.0, gate=0.4, chosen_by="why")
    assert AgreementRule.of(spec) == AgreementRule(("title", "lexical_text"), 0.1, 2.0, 0.4, "why")
