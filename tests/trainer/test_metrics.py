"""Ranking metrics against hand-computed rankings, ties included."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.metrics import pessimistic_rank, ranking_metrics


def test_pessimistic_rank_puts_ties_first():
    scores = np.array([0.9, 0.5, 0.7, 0.7, 0.1])
    assert pessimistic_rank(scores, 0) == 1
    assert pessimistic_rank(scores, 2) == 3  # tied with index 3: ranked after it
    assert pessimistic_rank(scores, 3) == 3
    assert pessimistic_rank(scores, 4) == 5
    assert pessimistic_rank(np.zeros(4), 1) == 4
    assert pessimistic_rank(scores, [4, 2]) == 3  # several relevant items: the best one counts
    assert pessimistic_rank(scores, [2, 3]) == 2  # the other relevant item is not counted against it


def test_metrics_by_hand():
    # three queries over 5 candidates, relevant items at ranks 1, 2 and 5
    m = ranking_metrics([1, 2, 5], 5, ks=(1, 2))
    assert m["MRR"] == pytest.approx((1 + 0.5 + 0.2) / 3)
    assert m["HR@1"] == pytest.approx(1 / 3)
    assert m["HR@2"] == pytest.approx(2 / 3)
    assert m["MPR"] == pytest.approx((1.0 + 0.75 + 0.0) / 3)


def test_no_ranks_is_an_error():
    with pytest.raises(ValueError, match="nothing was evaluated"):
        ranking_metrics([], 10)
