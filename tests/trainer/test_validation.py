"""Validation metrics, by hand: the ranking metric early stopping watches, with ties ranked pessimistically."""

from __future__ import annotations

import numpy as np
import pytest

from metricsearch.trainer.validation import diagonal_mrr, spearman, triplet_accuracy


def test_validation_metrics_by_hand():
    scores = np.array([[0.9, 0.1, 0.0], [0.8, 0.5, 0.1], [0.3, 0.3, 0.3]])
    # row 0: rank 1; row 1: rank 2; row 2: tied with both others, ranked after them (pessimistic): 3
    assert diagonal_mrr(scores) == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    assert triplet_accuracy(np.array([0.1, 0.5, 0.3]), np.array([0.2, 0.4, 0.3])) == pytest.approx(1 / 3)
    assert spearman(np.array([1.0, 2.0, 3.0]), np.array([10.0, 30.0, 20.0])) == pytest.approx(0.5)
    assert spearman(np.ones(3), np.array([1.0, 2.0, 3.0])) == 0.0
