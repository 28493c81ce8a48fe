"""Second-order text representations (second-order-metrics.txt): a text's masked token matrix A (n x d) becomes
the low-rank factor D = diag(s_1..s_k) V_k^T (k x d), the top-k rows of S V^T where A = U S V^T, so that
D^T D approximates the token covariance A^T A; texts compare by the normalised Frobenius similarity

    S_F(A^T A, B^T B) = <D_a^T D_a, D_b^T D_b>_F / (||D_a^T D_a||_F ||D_b^T D_b||_F)
                      = ||D_a D_b^T||_F^2 / (sqrt(sum s_a^4) sqrt(sum s_b^4)),

so no d x d matrix is ever formed. Pure numpy, no I/O: the service and the benchmarks' evaluation run this code.

Written by hand: no library computes the paper's factors or S_F from factors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

FULL_RANK_CAP = 16
"""Rows kept for `pooling: cov` without `rank_k` ("full rank"): min(tokens, d, this). ||A^T A||_F^2 = sum s_i^4, so
the fourth power makes the tail negligible (BENCHMARKS.md, "Choices behind the defaults", measures the share of
sum s_i^4 it keeps on wine reviews), while each row costs d floats stored and a rerank term per candidate."""

EPS = 1e-30


def serving_rank(pooling: str, rank_k: int | None) -> int:
    """Factor rows a bundle stores per text: rank_k when given (svd, or cov truncated after training), else the cap."""
    if pooling not in ("cov", "svd"):
        raise ValueError(f"pooling {pooling!r} has no factors")
    return rank_k if rank_k is not None else FULL_RANK_CAP


def factors(tokens: np.ndarray, rank: int) -> np.ndarray:
    """(rank, d) float32 factor D = diag(s) V^T of one (n, d) token matrix, zero rows past the matrix's rank.

    For n < d the n x n Gram matrix A A^T = U S^2 U^T is decomposed (cheaper) and D = U^T A, which needs no
    division by s, so rank-deficient and one-token texts stay finite; otherwise the SVD of A. float64 inside."""
    a = np.asarray(tokens, dtype=np.float64)
    n, d = a.shape
    out = np.zeros((rank, d), dtype=np.float32)
    if n == 0:
        return out
    if n < d:
        eigenvalues, u = np.linalg.eigh(a @ a.T)  # ascending
        top = np.argsort(eigenvalues)[::-1][:rank]
        rows = u[:, top].T @ a
    else:
        _, s, vt = np.linalg.svd(a, full_matrices=False)
        rows = s[:rank, None] * vt[:rank]
    out[: rows.shape[0]] = rows
    return out


def mean_vector(tokens: np.ndarray) -> np.ndarray:
    """The first-order (mean) vector of an (n, d) token matrix, what mean pooling gives: the ANN candidate vector."""
    if len(tokens) == 0:
        return np.zeros(tokens.shape[-1], dtype=np.float32)
    return np.asarray(tokens, dtype=np.float32).mean(axis=0)


def represent(token_matrices: Sequence[np.ndarray], rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, d) mean vectors and (n, rank, d) factors of texts given as their (n_i, d) token matrices."""
    d = token_matrices[0].shape[-1] if token_matrices else 0
    means = np.zeros((len(token_matrices), d), dtype=np.float32)
    stacked = np.zeros((len(token_matrices), rank, d), dtype=np.float32)
    for i, tokens in enumerate(token_matrices):
        means[i] = mean_vector(tokens)
        stacked[i] = factors(tokens, rank)
    return means, stacked


def frobenius_norms(factor_sets: np.ndarray) -> np.ndarray:
    """||D^T D||_F = sqrt(sum s_i^4) of (..., k, d) factors, from the row norms ||d_i|| = s_i (the rows of
    diag(s) V^T are orthogonal): O(k d) a text rather than the O(k^2 d) of ||D D^T||_F."""
    row_norms_sq = np.square(factor_sets).sum(axis=-1, dtype=np.float64)
    return np.sqrt(np.square(row_norms_sq).sum(axis=-1))


def frobenius_similarity(query: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """S_F of one (k, d) query factor against (n, k', d) candidate factors, all candidates in one batched product:
    (n,) values in [0, 1] (covariances are positive semi-definite); 0 where either side is all zeros."""
    query = np.asarray(query, dtype=np.float32)
    candidates = np.asarray(candidates, dtype=np.float32)
    cross = np.einsum("nid,jd->nij", candidates, query, optimize=True)
    inner = np.square(cross).sum(axis=(1, 2))
    norms = frobenius_norms(candidates) * frobenius_norms(query)
    return np.where(norms > EPS, np.clip(inner / np.maximum(norms, EPS), 0.0, 1.0), 0.0)


def pairwise_frobenius_similarity(queries: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """(m, n) S_F of (m, k, d) query factors against (n, k', d) candidate factors (evaluation: every pair)."""
    return np.stack([frobenius_similarity(q, candidates) for q in queries]) if len(queries) else np.zeros((0, 0))


def per_field_similarity(
    query: np.ndarray, query_present: np.ndarray, candidates: np.ndarray, candidates_present: np.ndarray
) -> np.ndarray:
    """S_F per field, (n, F), from (F, k, d) query and (n, F, k, d) candidate factors. Field 0 (the title) is always
    present; where either side lacks a later field, that field takes the title's S_F, as the angular rerank does."""
    similarities = np.stack([frobenius_similarity(query[f], candidates[:, f]) for f in range(query.shape[0])], axis=1)
    missing = ~(candidates_present & query_present[None, :])
    missing[:, 0] = False
    return np.where(missing, similarities[:, :1], similarities)


def weighted_score(similarities: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    """The weighted mean of per-field S_F, in [0, 1]: an item scores 1 against itself."""
    w = np.asarray(weights, dtype=np.float64)
    return similarities @ (w / w.sum())
