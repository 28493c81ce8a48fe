"""Ranking metrics as pure functions (metricbert.txt section 4.3). Ranks are 1-based and ties are broken
pessimistically: a relevant item tied with others is ranked after all of them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def pessimistic_rank(scores: np.ndarray, relevant: int | Sequence[int]) -> int:
    """Rank of the best relevant candidate: 1 + the number of non-relevant candidates scoring at least as high
    (higher score = more similar)."""
    relevant = [relevant] if isinstance(relevant, int) else list(relevant)
    best = scores[relevant].max()
    others = np.delete(scores, relevant)
    return 1 + int(np.count_nonzero(others >= best))


def ranking_metrics(ranks: Sequence[int], n_candidates: int, ks: Sequence[int] = (1, 10)) -> dict[str, float]:
    """MPR (mean percentile rank, 1 at the top and 0 at the bottom, higher is better), MRR and HR@k over queries."""
    r = np.asarray(ranks, dtype=np.float64)
    if r.size == 0:
        raise ValueError("no ranks: nothing was evaluated")
    out = {
        "MPR": float(np.mean(1.0 - (r - 1.0) / max(n_candidates - 1, 1))),
        "MRR": float(np.mean(1.0 / r)),
    }
    out.update({f"HR@{k}": float(np.mean(r <= k)) for k in ks})
    return out
