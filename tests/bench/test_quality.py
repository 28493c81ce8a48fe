"""bench/quality.py's Generalisation rows computed in process: the rule's rows fuse components computed once, so they
must rank as BundleScorer does, and the leave-one-pair-out choice must read only the other pairs."""

from __future__ import annotations

import dataclasses
from itertools import product

import pytest

from bench.data import Product, write_catalog_match
from bench.quality import RULE_GRID, leave_one_pair_out, parts_of, rule_mrr
from metricsearch.evaluation import BundleScorer, evaluate, read_task

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


def test_leave_one_pair_out_chooses_on_the_other_pairs(fused_tiny_bundle, pair):
    scorer = BundleScorer(fused_tiny_bundle)
    rule, fallback = scorer.rerank.rule, scorer.rerank.fusion
    parts = parts_of(scorer, pair, rule.components)
    # A second pair whose gold is reversed: what ranks it well ranks the first badly, so a choice shows its chooser.
    reversed_gold = dataclasses.replace(pair, relevant=[[79 - j for j in r] for r in pair.relevant])
    pairs = {"a": parts, "b": dataclasses.replace(parts, data=reversed_gold)}
    grid = [dataclasses.replace(rule, floor=f, power=p, gate=g) for f, p, g in product(*RULE_GRID.values())]
    for held, (mrr, picked) in leave_one_pair_out(pairs, rule, fallback).items():
        other = pairs["b" if held == "a" else "a"]
        assert rule_mrr(other, picked, fallback) == max(rule_mrr(other, r, fallback) for r in grid)
        assert mrr == rule_mrr(pairs[held], picked, fallback)
