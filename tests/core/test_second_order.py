"""Second-order representations against brute force: the factors reproduce the token covariance A^T A, and S_F from
factors equals the normalised Frobenius inner product of the full d x d covariances."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metricsearch.core import second_order

D = 6


def tokens(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, D))


def brute_force_similarity(a: np.ndarray, b: np.ndarray) -> float:
    ca, cb = a.T @ a, b.T @ b
    return float(np.sum(ca * cb) / (np.linalg.norm(ca) * np.linalg.norm(cb)))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 10))
def test_full_rank_factors_reproduce_the_token_covariance(seed, n):
    """Both branches: the Gram matrix for fewer tokens than dimensions, the SVD otherwise."""
    a = tokens(seed, n)
    factor = second_order.factors(a, D).astype(np.float64)
    np.testing.assert_allclose(factor.T @ factor, a.T @ a, atol=1e-4)
    assert second_order.frobenius_norms(factor) == pytest.approx(np.linalg.norm(a.T @ a), rel=1e-5)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 10), m=st.integers(1, 10))
def test_similarity_from_factors_is_the_frobenius_similarity_of_the_covariances(seed, n, m):
    a, b = tokens(seed, n), tokens(seed + 1, m)
    similarity = second_order.frobenius_similarity(second_order.factors(a, D), second_order.factors(b, D)[None])
    assert similarity[0] == pytest.approx(brute_force_similarity(a, b), abs=1e-5)


def test_a_text_scores_one_against_itself_and_zero_against_no_tokens():
    factor = second_order.factors(tokens(1, 4), 3)
    empty = second_order.factors(np.zeros((0, D)), 3)
    assert not empty.any()
    assert second_order.frobenius_similarity(factor, np.stack([factor, empty])) == pytest.approx([1.0, 0.0])


def test_a_truncated_factor_keeps_the_largest_singular_directions():
    a = tokens(2, 8)
    singular_values = np.linalg.svd(a, compute_uv=False)
    kept = second_order.factors(a, 2)
    np.testing.assert_allclose(np.linalg.norm(kept, axis=1), singular_values[:2], rtol=1e-5)


def test_a_missing_field_takes_the_title_s_similarity_and_fields_average_by_weight():
    title, description = second_order.factors(tokens(3, 4), 3), second_order.factors(tokens(4, 4), 3)
    other_title, other_description = second_order.factors(tokens(5, 4), 3), second_order.factors(tokens(6, 4), 3)
    query = np.stack([title, description])
    candidates = np.stack([np.stack([other_title, other_description])] * 2)
    per_field = second_order.per_field_similarity(
        query, np.array([True, True]), candidates, np.array([[True, True], [True, False]])
    )
    title_score = second_order.frobenius_similarity(title, other_title[None])[0]
    description_score = second_order.frobenius_similarity(description, other_description[None])[0]
    np.testing.assert_allclose(per_field, [[title_score, description_score], [title_score, title_score]], rtol=1e-6)
    weighted = second_order.weighted_score(per_field, [3.0, 1.0])
    np.testing.assert_allclose(weighted[0], (3 * title_score + description_score) / 4, rtol=1e-6)


def test_serving_rank_is_rank_k_or_the_full_rank_cap():
    assert second_order.serving_rank("svd", 4) == 4
    assert second_order.serving_rank("cov", None) == second_order.FULL_RANK_CAP
    with pytest.raises(ValueError, match="no factors"):
        second_order.serving_rank("mean", None)
