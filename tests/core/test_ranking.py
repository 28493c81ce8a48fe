"""Ranking metrics against hand-computed rankings (ties pessimistic, several relevant answers) and brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from metricsearch.core.ranking import (
    accuracy_at_k,
    ndcg_at_k,
    pair_ranks,
    pearson,
    pessimistic_rank,
    precision_at_k,
    ranking_metrics,
    relevant_positions,
    retrieval_metrics,
    spearman,
)

SCORES = np.array([0.9, 0.5, 0.7, 0.7, 0.1])


def test_pessimistic_rank_puts_ties_first():
    assert pessimistic_rank(SCORES, 0) == 1
    assert pessimistic_rank(SCORES, 2) == 3  # tied with index 3: ranked after it
    assert pessimistic_rank(SCORES, 3) == 3
    assert pessimistic_rank(SCORES, 4) == 5
    assert pessimistic_rank(np.zeros(4), 1) == 4
    assert pessimistic_rank(SCORES, [4, 2]) == 3  # several relevant items: the best one counts
    assert pessimistic_rank(SCORES, [2, 3]) == 2  # the other relevant item is not counted against it


def test_nan_never_ranks_ahead_of_a_finite_score():
    scores = np.array([np.nan, 0.5, 0.9, -np.inf])
    assert pessimistic_rank(scores, 0) == 4  # after the finite scores, and tied with -inf: after it too
    assert pessimistic_rank(scores, 1) == 2  # the NaN candidate is not counted ahead of it
    assert pessimistic_rank(np.array([0.1, np.nan, 0.9]), 0) == 2
    assert pessimistic_rank(np.array([np.nan, np.nan, 0.9]), 0) == 3
    assert relevant_positions(np.array([np.nan, 0.2, np.nan]), [0, 1]).tolist() == [1, 3]


def test_positions_of_several_relevant_items():
    # order, ties pessimistic: 0 (0.9), 3 (0.7, non-relevant first), 2 (0.7), 1 (0.5), 4 (0.1)
    assert relevant_positions(SCORES, [2, 4]).tolist() == [3, 5]
    assert relevant_positions(SCORES, [2, 3]).tolist() == [2, 3]  # tied relevant items take consecutive places
    assert relevant_positions(SCORES, [3, 2, 3]).tolist() == [2, 3]  # a repeated id is one relevant item
    # per pair, each relevant item is ranked among the non-relevant ones only
    assert pair_ranks(np.array([3, 5])).tolist() == [3, 4]
    assert pair_ranks(np.array([2, 3])).tolist() == [2, 2]
    with pytest.raises(ValueError, match="at least one"):
        relevant_positions(SCORES, [])


def test_ranking_metrics_by_hand():
    # three queries over 5 candidates, relevant items at ranks 1, 2 and 5
    m = ranking_metrics([1, 2, 5], 5, ks=(1, 2))
    assert m["MRR"] == pytest.approx((1 + 0.5 + 0.2) / 3)
    assert m["HR@1"] == pytest.approx(1 / 3)
    assert m["HR@2"] == pytest.approx(2 / 3)
    assert m["MPR"] == pytest.approx((1.0 + 0.75 + 0.0) / 3)
    # a candidate count per rank: rank 2 of 3 is the middle, rank 2 of 5 a quarter down
    assert ranking_metrics([2, 2], [3, 5])["MPR"] == pytest.approx((0.5 + 0.75) / 2)


def test_list_metrics_by_hand():
    positions = np.array([1, 3])  # two relevant items, at places 1 and 3
    assert precision_at_k(positions, 1) == 1.0
    assert precision_at_k(positions, 2) == 0.5
    assert precision_at_k(positions, 10) == pytest.approx(0.2)
    assert accuracy_at_k(np.array([3]), 2) == 0.0
    assert accuracy_at_k(np.array([3]), 3) == 1.0
    # DCG = 1/log2(2) + 1/log2(4) = 1.5; ideal = 1/log2(2) + 1/log2(3)
    assert ndcg_at_k(positions, 3) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    assert ndcg_at_k(positions, 2) == pytest.approx(1.0 / (1 + 1 / math.log2(3)))
    assert ndcg_at_k(np.array([1, 2]), 5) == pytest.approx(1.0)
    # one relevant item at place 2 with k = 1: nothing found, and the ideal has only one slot
    assert ndcg_at_k(np.array([2]), 1) == 0.0


def test_retrieval_metrics_per_query_and_per_pair():
    # query A: relevant at places 2 and 3 of 5 candidates; query B: relevant at place 1 of 5
    positions, counts = [np.array([2, 3]), np.array([1])], [5, 5]
    per_query = retrieval_metrics(positions, counts, ks=(1, 2), per="query")
    assert per_query["MRR"] == pytest.approx((1 / 2 + 1) / 2)
    assert per_query["HR@1"] == pytest.approx(0.5)
    assert per_query["MPR"] == pytest.approx((0.75 + 1.0) / 2)
    assert per_query["P@2"] == pytest.approx((1 / 2 + 1 / 2) / 2)
    assert per_query["Acc@1"] == pytest.approx(0.5)
    per_pair = retrieval_metrics(positions, counts, ks=(1, 2), per="pair")
    # pairs: A's two items both rank 2 among A's 3 non-relevant + itself (4 candidates); B's ranks 1 of 5
    assert per_pair["MRR"] == pytest.approx((0.5 + 0.5 + 1) / 3)
    assert per_pair["HR@2"] == pytest.approx(1.0)
    assert per_pair["HR@1"] == pytest.approx(1 / 3)
    assert per_pair["MPR"] == pytest.approx((2 / 3 + 2 / 3 + 1) / 3)
    assert per_pair["NDCG@2"] == per_query["NDCG@2"]  # list metrics are per query either way


def test_correlations_by_hand():
    predicted, gold = np.array([1.0, 2.0, 3.0]), np.array([10.0, 30.0, 20.0])
    assert pearson(predicted, gold) == pytest.approx(0.5)  # cov 10 / sqrt(2 * 200)
    assert spearman(predicted, gold) == pytest.approx(0.5)
    assert spearman(np.array([1.0, 2.0, 30.0]), gold) == pytest.approx(0.5)  # ranks only
    assert pearson(np.ones(3), gold) == 0.0
    assert spearman(np.ones(3), gold) == 0.0


def test_no_ranks_is_an_error():
    with pytest.raises(ValueError, match="nothing was evaluated"):
        ranking_metrics([], 10)
    with pytest.raises(ValueError, match="nothing was evaluated"):
        retrieval_metrics([], [])


@given(
    st.lists(st.integers(0, 4), min_size=2, max_size=30),
    st.data(),
)
def test_positions_match_a_brute_force_pessimistic_sort(values, data):
    scores = np.array(values, dtype=float) / 4  # few distinct values: many ties
    relevant = data.draw(st.lists(st.integers(0, len(values) - 1), min_size=1, unique=True))
    is_relevant = np.isin(np.arange(len(values)), relevant)
    order = np.lexsort((is_relevant, -scores))  # by score, then non-relevant first
    expected = sorted(int(np.flatnonzero(order == j)[0]) + 1 for j in relevant)
    assert relevant_positions(scores, relevant).tolist() == expected
    best = max(scores[relevant])
    assert pessimistic_rank(scores, relevant) == 1 + int(np.sum(scores[~is_relevant] >= best))
