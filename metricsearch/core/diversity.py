"""Choosing which ranked candidates to show: maximal marginal relevance (Carbonell and Goldstein, 1998) so ten results
are not ten near-copies, and per-group caps ("at most 2 per brand"), in one greedy pass so that an item skipped for
its group never counts as shown. Pure numpy, no I/O.

Written by hand: MMR is a few lines, and no library here applies it with a per-group cap or our per-field metrics.

MMR picks, one at a time, the candidate maximising (1 - diversity) * relevance - diversity * (its largest similarity
to a result already picked). Relevance is the rerank score rescaled to [0, 1] over the candidates (min-max; the
order is unchanged), and similarity is the bundle's own metric between two candidates on [0, 1], so `diversity`
weighs like against like whatever the score's scale. With diversity 0 the pick is the plain ranking, ties in input
order, exactly as `scoring.top_k`."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np

from metricsearch.core import scoring, second_order
from metricsearch.core.rerank import FieldVectors

EPS = 1e-12


def select(
    relevance: np.ndarray,
    want: int,
    *,
    diversity: float = 0.0,
    similarity_to: Callable[[int], np.ndarray] | None = None,
    groups: Sequence[Hashable] | None = None,
    group_size: int = 1,
) -> list[int]:
    """Indices of up to `want` candidates, in the order shown.

    `relevance`: (n,) higher is better. `similarity_to(j)`: (n,) similarities in [0, 1] of every candidate to
    candidate j (needed when diversity > 0). `groups`: one hashable value per candidate; at most `group_size`
    candidates of each value are picked (None: no cap)."""
    if not 0.0 <= diversity <= 1.0:
        raise ValueError(f"diversity must be in [0, 1], got {diversity}")
    if diversity > 0 and similarity_to is None:
        raise ValueError("diversity > 0 needs similarity_to")
    n = len(relevance)
    order = scoring.top_k(np.asarray(relevance, dtype=np.float64), n)  # best first, ties in input order
    codes = _group_codes(groups, order)
    if diversity == 0:  # the greedy pass in one go: a candidate is picked when fewer than group_size came before it
        return order[np.flatnonzero(_rank_in_group(codes) < group_size)[:want]].tolist()
    counts = np.zeros(codes.max() + 1 if n else 0, dtype=np.int64)
    picked: list[int] = []
    ranked = np.asarray(relevance, dtype=np.float64)[order]
    span = ranked[0] - ranked[-1] if n else 0.0
    scaled = (ranked - ranked[-1]) / span if span > EPS else np.zeros(n)
    nearest = np.zeros(n)  # each candidate's largest similarity to a pick so far (0 before the first pick)
    open_ = np.ones(n, dtype=bool)  # neither picked nor in a full group
    while len(picked) < want and open_.any():
        value = np.where(open_, (1.0 - diversity) * scaled - diversity * nearest, -np.inf)
        position = int(np.argmax(value))  # the first of equal values: the more relevant one
        index = int(order[position])
        picked.append(index)
        open_[position] = False
        code = codes[position]
        counts[code] += 1
        if counts[code] >= group_size:
            open_ &= codes != code
        nearest = np.maximum(nearest, np.asarray(similarity_to(index), dtype=np.float64)[order])
    return picked


def _rank_in_group(codes: np.ndarray) -> np.ndarray:
    """How many candidates of the same group come before each one."""
    by_group = np.argsort(codes, kind="stable")
    sorted_codes = codes[by_group]
    first = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])  # where each group's run starts
    run_start = np.repeat(first, np.diff(np.r_[first, len(codes)]))
    rank = np.empty(len(codes), dtype=np.int64)
    rank[by_group] = np.arange(len(codes)) - run_start
    return rank


def _group_codes(groups: Sequence[Hashable] | None, order: np.ndarray) -> np.ndarray:
    """Each candidate's group as a small integer, laid out in `order`; without groups, each candidate its own."""
    if groups is None:
        return np.arange(len(order))
    seen: dict[Hashable, int] = {}
    return np.array([seen.setdefault(groups[i], len(seen)) for i in order], dtype=np.int64)


def similarity_to(candidates: FieldVectors, j: int, metric: str, weights: Sequence[float]) -> np.ndarray:
    """(n,) similarity in [0, 1] of every candidate to candidate j in the bundle's metric: for frobenius the weighted
    mean S_F of the factors; otherwise 1 - the weighted mean per-field angular distance (MetricBERT's inference, also
    what RecoBERT and fused bundles compare texts by, without their normalisation over a query's candidates)."""
    if metric == "frobenius":
        values = second_order.per_field_similarity(
            candidates.factors[j], candidates.present[j], candidates.factors, candidates.present
        )
        return second_order.weighted_score(values, weights)
    distances = scoring.per_field_distances(
        candidates.fields[j], candidates.present[j], candidates.fields, candidates.present
    )
    w = np.asarray(weights, dtype=np.float64)
    return 1.0 - distances @ (w / w.sum())


def intra_list_distance(candidates: FieldVectors, metric: str, weights: Sequence[float]) -> float:
    """Mean pairwise distance (1 - similarity_to) of a list of results: the diversity figure of EVALUATION.md."""
    n = len(candidates.present)
    if n < 2:
        return 0.0
    total = sum(float((1.0 - similarity_to(candidates, j, metric, weights))[j + 1 :].sum()) for j in range(n - 1))
    return total / (n * (n - 1) / 2)
