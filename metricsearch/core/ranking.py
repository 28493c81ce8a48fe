"""Ranking and correlation metrics as pure functions: the one home of the project's evaluation math.

Ranks and positions are 1-based, higher scores are more similar, and ties are broken pessimistically: a relevant
candidate tied with non-relevant ones is placed after all of them, so a model that scores everything alike earns
the worst rank, not an average one. A NaN score (a scorer's failure, such as an empty text's zero vector) counts as
the lowest possible, tied with -inf: it never ranks ahead of a finite score. Definitions: MPR, MRR and HR@k from
metricbert.txt section 4.3 and
recobert.txt section 5.2; Precision@k, Accuracy@k and NDCG@k from siamese-vs-triplet-sbert.txt section 3.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

Per = Literal["query", "pair"]


def relevant_positions(scores: np.ndarray, relevant: int | Sequence[int]) -> np.ndarray:
    """1-based positions of the relevant candidates in the pessimistic order (each after every non-relevant
    candidate scoring at least as high), ascending. NaN scores rank as -inf (np.sort would put them last, and read
    descending that is first)."""
    scores = np.nan_to_num(np.asarray(scores, dtype=np.float64), nan=-np.inf, posinf=np.inf, neginf=-np.inf)
    index = np.unique(np.atleast_1d(np.asarray(relevant, dtype=np.int64)))
    if index.size == 0:
        raise ValueError("no relevant candidate: each query needs at least one")
    is_relevant = np.zeros(scores.shape[0], dtype=bool)
    is_relevant[index] = True
    relevant_scores = np.sort(scores[is_relevant])[::-1]
    others = np.sort(scores[~is_relevant])
    ahead = others.size - np.searchsorted(others, relevant_scores, side="left")
    return ahead + np.arange(1, relevant_scores.size + 1)


def pessimistic_rank(scores: np.ndarray, relevant: int | Sequence[int]) -> int:
    """Rank of the best relevant candidate: 1 + the non-relevant candidates scoring at least as high."""
    return int(relevant_positions(scores, relevant)[0])


def pair_ranks(positions: np.ndarray) -> np.ndarray:
    """Each relevant candidate's rank among the non-relevant ones only (the other relevant candidates are not
    counted against it): the per-pair rank of the papers' expert sets, one example per (query, relevant) pair."""
    positions = np.asarray(positions)
    return positions - np.arange(positions.size)


def ranking_metrics(
    ranks: Sequence[int], n_candidates: int | Sequence[int], ks: Sequence[int] = (1, 10)
) -> dict[str, float]:
    """MPR (mean percentile rank, 1 at the top and 0 at the bottom, higher is better), MRR and HR@k over examples;
    `n_candidates` is one count for all or one per rank."""
    r = np.asarray(ranks, dtype=np.float64)
    if r.size == 0:
        raise ValueError("no ranks: nothing was evaluated")
    n = np.broadcast_to(np.asarray(n_candidates, dtype=np.float64), r.shape)
    out = {
        "MPR": float(np.mean(1.0 - (r - 1.0) / np.maximum(n - 1.0, 1.0))),
        "MRR": float(np.mean(1.0 / r)),
    }
    out.update({f"HR@{k}": float(np.mean(r <= k)) for k in ks})
    return out


def precision_at_k(positions: np.ndarray, k: int) -> float:
    """rel(k) / k: the share of the top k that is relevant."""
    return float(np.count_nonzero(np.asarray(positions) <= k)) / k


def accuracy_at_k(positions: np.ndarray, k: int) -> float:
    """1 when at least one relevant candidate is in the top k, else 0."""
    return float(np.any(np.asarray(positions) <= k))


def ndcg_at_k(positions: np.ndarray, k: int) -> float:
    """DCG of the top k (binary relevance, 1 / log2(position + 1)) over the DCG of the ideal order, which puts
    min(#relevant, k) relevant candidates first."""
    positions = np.asarray(positions, dtype=np.float64)
    dcg = np.sum(1.0 / np.log2(positions[positions <= k] + 1.0))
    ideal = np.sum(1.0 / np.log2(np.arange(1, min(positions.size, k) + 1) + 1.0))
    return float(dcg / ideal)


def example_ranks(
    positions: Sequence[np.ndarray], n_candidates: Sequence[int], per: Per = "query"
) -> tuple[list[int], list[int]]:
    """The examples MPR, MRR and HR@k average over, as (rank, candidates it was ranked among) lists: one per
    query by its best relevant candidate (per="query"), or one per (query, relevant) pair by `pair_ranks`, among
    the non-relevant candidates plus itself (per="pair")."""
    if per == "query":
        return [int(p[0]) for p in positions], [int(n) for n in n_candidates]
    ranks = [int(r) for p in positions for r in pair_ranks(p)]
    counts = [int(n) - p.size + 1 for p, n in zip(positions, n_candidates, strict=True) for _ in p]
    return ranks, counts


def retrieval_metrics(
    positions: Sequence[np.ndarray], n_candidates: Sequence[int], ks: Sequence[int] = (1, 10, 100), per: Per = "query"
) -> dict[str, float]:
    """Every ranking metric, from each query's relevant positions and candidate count. MPR, MRR and HR@k average
    over `example_ranks` (per="query" for gold matches like Abt-Buy's, per="pair" for the papers' expert
    annotations); Precision@k, Accuracy@k and NDCG@k are per query either way."""
    if not positions:
        raise ValueError("no queries: nothing was evaluated")
    out = ranking_metrics(*example_ranks(positions, n_candidates, per), ks)
    for k in ks:
        out[f"P@{k}"] = float(np.mean([precision_at_k(p, k) for p in positions]))
        out[f"Acc@{k}"] = float(np.mean([accuracy_at_k(p, k) for p in positions]))
        out[f"NDCG@{k}"] = float(np.mean([ndcg_at_k(p, k) for p in positions]))
    return out


def pearson(predicted: np.ndarray, gold: np.ndarray) -> float:
    """Pearson correlation; 0 when either side is constant (undefined, and no evidence of skill)."""
    if np.ptp(predicted) == 0 or np.ptp(gold) == 0:
        return 0.0
    from scipy.stats import pearsonr  # the offline side's dependency: the core imports only numpy

    return float(pearsonr(predicted, gold).statistic)


def spearman(predicted: np.ndarray, gold: np.ndarray) -> float:
    """Spearman rank correlation; 0 when either side is constant (undefined, and no evidence of skill)."""
    if np.ptp(predicted) == 0 or np.ptp(gold) == 0:
        return 0.0
    from scipy.stats import spearmanr

    return float(spearmanr(predicted, gold).statistic)
