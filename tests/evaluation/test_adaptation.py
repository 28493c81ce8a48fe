"""Label-free adaptive fusion: the weights come from the catalog's items alone (a gold file shuffled or removed
changes nothing), and a catalog of one item, one source, or an empty or constant field gets a valid choice."""

from __future__ import annotations

import csv
import random

import pytest

from metricsearch.core.fusion import AGREEMENT_FUSION, DEFAULT_FUSION
from metricsearch.core.readers import read_catalog_list
from metricsearch.core.records import Item
from metricsearch.evaluation import BundleScorer, EvalData
from metricsearch.evaluation.adaptation import adapted_stats, adapted_weights, measure_agreement
from tests.bundles import bundle_variant
from tests.service.catalogs import catalog_items
from tests.service.engine.test_statistics import ADAPTIVE, RULE


def write_csv(path, header, rows):
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def scorer(tiny_bundle):
    return BundleScorer(tiny_bundle)


def test_the_weights_read_no_gold_file(scorer, tmp_path):
    items = catalog_items(40)
    left, right = items[:20], items[20:]
    for name, part in (("left", left), ("right", right)):
        write_csv(
            tmp_path / f"{name}.csv", ["id", "title", "description"], [(i.id, i.title, i.description) for i in part]
        )
    gold = [(a.id, b.id) for a, b in zip(left, right, strict=True)]
    gold_file = write_csv(tmp_path / "gold.csv", ["left_id", "right_id"], gold)

    def weights():
        catalog = read_catalog_list(tmp_path / "left.csv") + read_catalog_list(tmp_path / "right.csv")
        return adapted_weights(scorer, catalog, AGREEMENT_FUSION, DEFAULT_FUSION)

    first = weights()
    random.Random(0).shuffle(gold)
    write_csv(gold_file, ["left_id", "right_id"], [(a, b) for (a, _), (_, b) in zip(gold, reversed(gold), strict=True)])
    assert weights() == first
    gold_file.unlink()
    assert weights() == first


@pytest.mark.parametrize(
    "items",
    [
        [Item("only", "a kettle", "steel")],
        [],
        [Item(f"i{n}", f"kettle {n}", "") for n in range(12)],  # no descriptions
        [Item(f"i{n}", f"kettle model {n}", "the same text") for n in range(12)],  # a constant description
        [Item(f"i{n}", "kettle", "kettle") for n in range(12)],  # every item the same
        [Item(f"i{n}", f"kettle {n}", "steel", {"source": "left"}) for n in range(12)],  # one shop
    ],
    ids=["one item", "no item", "empty description", "constant description", "all equal", "one source"],
)
def test_a_degenerate_catalog_gets_a_valid_choice_and_says_why(scorer, items):
    weights, why = adapted_weights(scorer, items, AGREEMENT_FUSION, DEFAULT_FUSION)
    assert all(w >= 0 for w in weights.values()) and any(w > 0 for w in weights.values())
    assert why
    if len(items) < 2:
        assert weights == DEFAULT_FUSION and why.startswith("the bundle's weights")


def test_agreement_of_a_catalog_is_measured_per_component(scorer):
    measured = measure_agreement(scorer, catalog_items(30), AGREEMENT_FUSION.components)
    assert set(measured.components) <= set(AGREEMENT_FUSION.components)
    assert all(0.0 <= a <= 1.0 for a in measured.components.values()) and 0.0 <= measured.near_duplicates <= 1.0


def test_an_in_process_figure_ranks_with_the_rules_choice(tiny_bundle, tmp_path, scorer):
    """`adapted_stats` gives an evaluation the statistics the service ranks with, the rule's weights on them; a bundle
    without a rule keeps its statistics as they are."""
    adaptive = BundleScorer(bundle_variant(tiny_bundle, tmp_path / "adaptive", fusion=ADAPTIVE))
    items = catalog_items(50)
    data = EvalData("annotated", "catalog", items[:1], items, [[]], [0])
    _, stored, _ = adaptive.prepare(data)
    stats = adaptive.stats(items, stored)
    adapted = adapted_stats(adaptive, items, stored, stats)
    assert (adapted.weights, adapted.chosen_by) == adapted_weights(adaptive, items, RULE, DEFAULT_FUSION)
    assert adapted.mean == stats.mean and adaptive.rerank.fusion_weights(adapted) == adapted.weights
    assert adapted_stats(scorer, items, stored, stats) is stats
