"""bench/quality.py's Generalisation rows computed in process: the rule's rows fuse components computed once, so they
must rank as BundleScorer does, and the leave-one-pair-out choice must read only the other pairs."""

from __future__ import annotations

import dataclasses
from itertools import product

import numpy as np
import pytest

from bench.data import Product, write_catalog_match
from bench.quality import (
    RULE_GRID,
    Fixed,
    fitted_rule,
    labelled_ceiling,
    leave_one_pair_out,
    listings,
    parts_of,
    rule_mrr,
    tie_mrrs,
)
from metricsearch.core.fusion import CatalogAgreement, fuse
from metricsearch.core.records import Item
from metricsearch.evaluation import BundleScorer, EvalData, evaluate, read_task

KINDS = ("crisp white", "bold red", "dry rose", "sweet dessert wine", "sparkling brut")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """60 left items, 80 right ones (enough for the rule to measure, AGREEMENT_MIN_ITEMS), each match by its code."""
    left = [Product(f"L{n}", f"{KINDS[n % 5]} speaker KX{n}00", f"a {KINDS[n % 5]} model") for n in range(60)]
    right = [Product(f"R{n}", f"KX{n}00 {KINDS[(n + 1) % 5]} speaker", f"model KX{n}00") for n in range(80)]
    gold = {f"L{n}": {f"R{n}"} for n in range(60)}
    return read_task("catalog-match", write_catalog_match(left, right, gold, tmp_path_factory.mktemp("pair")))


def test_the_rule_row_ranks_as_the_bundle_scorer(fused_tiny_bundle, pair):
    scorer = BundleScorer(fused_tiny_bundle)
    parts = parts_of(scorer, pair, scorer.rerank.rule.components)
    assert parts.agreement.sampled == 80
    assert rule_mrr(parts, scorer.rerank.rule, scorer.rerank.fusion) == evaluate(pair, scorer).metrics["MRR"]


def test_leave_one_pair_out_fits_on_the_other_pairs(fused_tiny_bundle, pair):
    scorer = BundleScorer(fused_tiny_bundle)
    rule, fallback = scorer.rerank.rule, scorer.rerank.fusion
    parts = parts_of(scorer, pair, rule.components)
    # A second pair whose gold is reversed: what ranks it well ranks the first badly, so a choice shows its chooser.
    reversed_gold = dataclasses.replace(pair, relevant=[[79 - j for j in r] for r in pair.relevant])
    pairs = {"a": parts, "b": dataclasses.replace(parts, data=reversed_gold)}
    sentences = CatalogAgreement({}, parts.agreement.near_duplicates - 0.2, 500)
    gate = round(parts.agreement.near_duplicates - 0.1, 2)
    grid = [dataclasses.replace(rule, floor=f, power=p, gate=gate) for f, p in product(*RULE_GRID.values())]
    for held, (mrr, picked) in leave_one_pair_out(pairs, sentences, rule, fallback).items():
        other = pairs["b" if held == "a" else "a"]
        assert picked.gate == gate
        assert rule_mrr(other, picked, fallback) == max(rule_mrr(other, r, fallback) for r in grid)
        assert mrr == rule_mrr(pairs[held], picked, fallback)


def test_a_gate_fitted_above_a_pair_leaves_it_the_bundles_weights(fused_tiny_bundle, pair):
    """Sentences that agree more than the pair: the gate lands above the pair's agreement, so the fitted rule ranks
    it with the fixed weights, whatever floor and power it chose."""
    scorer = BundleScorer(fused_tiny_bundle)
    rule, fallback = scorer.rerank.rule, scorer.rerank.fusion
    parts = parts_of(scorer, pair, rule.components)
    sentences = CatalogAgreement({}, parts.agreement.near_duplicates + 0.2, 500)
    fitted = fitted_rule({"a": parts}, sentences, rule, fallback)
    assert fitted.gate > parts.agreement.near_duplicates
    assert fitted.weights(parts.agreement, fallback)[0] == dict(fallback)


def test_ties_optimistic_count_only_the_strictly_higher_scores_and_at_random_the_expected_order():
    data = EvalData("catalog-match", "t", [Item(id="q", title="q")] * 3, [Item(id=str(n), title="c") for n in range(4)],
                    [[1], [2], [1, 2]], [None, 0, None])  # fmt: skip
    scores = np.array([[0.9, 0.5, 0.5, 0.1], [0.9, 0.9, 0.5, 0.7], [0.5, 0.5, 0.5, 0.1]])
    # Query 0: 0.9 above its gold's 0.5 and one item tied with it: optimistic rank 2, at random 2 or 3. Query 1: its
    # own column (0.9) left out; 0.9 and 0.7 above: rank 3 either way. Query 2: two gold matches tied with one other
    # item: rank 1 unless the other comes first (1 in 3), then 2.
    optimistic, at_random = tie_mrrs(data, scores)
    assert optimistic == pytest.approx((1 / 2 + 1 / 3 + 1) / 3)
    assert at_random == pytest.approx(((1 / 2 + 1 / 3) / 2 + 1 / 3 + (2 / 3 + 1 / 3 / 2)) / 3)
    assert evaluate(data, Fixed(scores)).metrics["MRR"] < at_random < optimistic


def test_the_labelled_ceiling_starts_from_the_rule_and_follows_the_gold(fused_tiny_bundle, pair):
    scorer = BundleScorer(fused_tiny_bundle)
    rule, fallback = scorer.rerank.rule, scorer.rerank.fusion
    parts = parts_of(scorer, pair, rule.components)
    start = rule.weights(parts.agreement, fallback)[0]
    ceiling, weights = labelled_ceiling(parts, start)
    assert ceiling >= rule_mrr(parts, rule, fallback)
    assert ceiling == evaluate(pair, Fixed(fuse(parts.components, parts.stats, weights))).metrics["MRR"]
    reversed_gold = dataclasses.replace(
        parts, data=dataclasses.replace(pair, relevant=[[79 - j for j in r] for r in pair.relevant])
    )
    assert labelled_ceiling(reversed_gold, start)[1] != weights


def test_listings_count_first_answers_that_repeat_a_title_and_widen_the_gold_by_it():
    queries = [Item(id="q0", title="Data Streams"), Item(id="q1", title="Joins"), Item(id="q2", title="Other")]
    titles = ["data streams", "Data-Streams .", "joins", "merge joins", "x"]
    candidates = [Item(id=f"c{n}", title=t) for n, t in enumerate(titles)]
    data = EvalData("catalog-match", "t", queries, candidates, [[0], [3], [0]], [None, None, None])
    # q0: first answer c1, not its gold c0 but with its title (and the query's); q1: first answer c2, the query's
    # title, not its gold's; q2: first answer its gold.
    scores = np.array([[0.8, 0.9, 0.1, 0.1, 0.1], [0.1, 0.1, 0.9, 0.5, 0.6], [0.9, 0.1, 0.1, 0.1, 0.1]])
    found = listings(data, scores)
    assert (found.first_not_gold, found.first_has_query_title, found.first_has_gold_title) == (2, 2, 1)
    # Widened, q0's c1 is a match (rank 1); q1 still ranks its gold third.
    assert found.widened_mrr == pytest.approx((1 + 1 / 3 + 1) / 3)
    assert evaluate(data, Fixed(scores)).metrics["MRR"] == pytest.approx((1 / 2 + 1 / 3 + 1) / 3)
