"""Filtered searches the engine would answer by reading every point, answered in process by the embedded store.

qdrant-edge checks a condition on a metadata key without a payload index by reading each point's payload as it meets
it, and a selective filter makes it meet nearly all of them: at 100k items, one key keeping 3% of them took 2.8 s, 40
keys x 25 numbers 5.7 s, and 40 ranges keeping 84% 0.88 s, under the lock every search waits on, and its HNSW walk
found 0.00-0.78 of a filter's exact 100 nearest (BENCHMARKS.md, "Choices behind the defaults"). The metadata index
(metadata_index.py) finds the items meeting such a filter from its columns, and they are searched here exactly: their
dense vectors against the query, their terms against the lexical queries, fused by reciprocal rank as the engine fuses
its prefetches: the candidates an engine with an index would find, exact rather than approximate.
Written by hand: the engine's search restated over the in-memory copies.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from metricsearch.core.lexical import SparseVector
from metricsearch.core.scoring import top_k
from metricsearch.service.store.base import lexical_limit
from metricsearch.service.store.edge.term_rows import TermRows
from metricsearch.service.store.edge.vector_rows import VectorRows

RRF_K = 60
"""The engine's reciprocal rank fusion constant (the stores' `Fusion.Rrf(k=60)`)."""


def search(
    vectors: VectorRows,
    terms: TermRows,
    rows: np.ndarray,
    vector: np.ndarray,
    using: str,
    limit: int,
    lexical: Mapping[str, SparseVector],
) -> tuple[list[Hashable], np.ndarray]:
    """The points at `rows` of `vectors` as the engine's search over them would return them, best first, and their
    scores: the `limit` nearest to `vector` on vector `using`, with their cosines; with `lexical` queries, fused with
    each one's `lexical_limit(limit)` best scoring above 0."""
    if not len(rows):
        return [], np.empty(0, np.float32)
    nearest, cosines = vectors.nearest(using, vector, rows, limit)
    if not lexical:
        return vectors.points_at(nearest), cosines.astype(np.float32, copy=False)
    rankings = [vectors.points_at(nearest)]
    for scores in terms.scores(lexical, rows).values():
        best = top_k(scores, lexical_limit(limit))
        rankings.append(vectors.points_at(rows[best[scores[best] > 0]]))
    return fused(rankings)


def fused(rankings: Sequence[Sequence[Hashable]]) -> tuple[list[Hashable], np.ndarray]:
    """Every point of the rankings (each best first) and its reciprocal rank fusion score, sum 1 / (RRF_K + rank),
    best first."""
    scores: dict[Hashable, float] = {}
    for ranking in rankings:
        for rank, point in enumerate(ranking, start=1):
            scores[point] = scores.get(point, 0.0) + 1.0 / (RRF_K + rank)
    best = sorted(scores.items(), key=lambda hit: -hit[1])
    return [point for point, _ in best], np.fromiter((score for _, score in best), dtype=np.float32, count=len(best))
