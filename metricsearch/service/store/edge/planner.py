"""How the embedded store answers a search: which points it looks at and how the engine walks them.

- A filter no stored value can meet is answered at once, empty (MetadataIndex.matches_nothing).
- A filter that no payload index serves would make the engine read every point's payload it meets: its points come
  from the in-process metadata index and are searched exactly (exact.py).
- Else the engine searches, with parameters that suit how many points the filter keeps (`engine_params`).
- A few excluded ids are dropped from a search that asks for as many more hits, rather than filtered out."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from qdrant_edge import Filter, Prefetch, QuantizationSearchParams, Query, QueryRequest, SearchParams
from qdrant_edge import Fusion as EdgeFusion
from qdrant_edge import SparseVector as EdgeSparseVector

from metricsearch.core.filters import Condition
from metricsearch.core.lexical import SparseVector
from metricsearch.service.store import base
from metricsearch.service.store.edge.exact import RRF_K
from metricsearch.service.store.edge.metadata_index import wanted_kinds

DROPPED_MAX = 16
"""Up to this many excluded ids are dropped from a search's hits rather than filtered out by the engine: at 100k
points a must_not has_id filter cost 0.3 ms of a 1.2 ms dense search (0.45 ms with a lexical prefetch), where a
candidate more costs about 0.03 ms to read and rerank (BENCHMARKS.md, "Choices behind the defaults")."""
EXACT_FILTERED_MAX = 20_000
"""A search whose filter keeps at most this many points (the metadata index counts them) compares each of them,
through the filter's payload indexes, rather than walking the HNSW graph: past the engine's own full-scan threshold
(about 3,300 points of 768 floats) the walk meets too few of the points a filter keeps, and the cost of comparing
grows with the points kept, hence the bound (BENCHMARKS.md, "Choices behind the defaults")."""
RESCORED = QuantizationSearchParams(rescore=True)
"""An HNSW walk ranks by the ANN vector's int8 copies (layout.ANN_INT8), then its hits by their floats: without it the
engine hands back int8 scores (off by up to 0.01 at 768 floats)."""
WALK = SearchParams(quantization=RESCORED)
FILTERED_EF_MAX = 8
"""The widest beam a filtered walk gets, in multiples of its limit: the engine's default beam (the limit) finds too
few of a filter's nearest when it keeps a part of the points, a wider one more of them at a few ms more
(BENCHMARKS.md, "Choices behind the defaults")."""


def served_by_indexes(conditions: Sequence[Condition], indexes: Mapping[str, str]) -> bool:
    """Whether a payload index ({key: type}) serves every condition: one on its key whose type holds every kind of
    value it can match (a string `in` on a float index is checked point by point)."""
    return all(c.key in indexes and wanted_kinds(c) <= {indexes[c.key]} for c in conditions)


def in_process(conditions: Sequence[Condition], indexes: Mapping[str, str]) -> bool:
    """Whether the metadata index finds the points a filter keeps: no payload index serves it (the engine would read
    every point's payload it meets)."""
    return not served_by_indexes(conditions, indexes)


def engine_params(limit: int, kept: int | None, total: int) -> SearchParams:
    """How the engine searches for the `limit` nearest of the `kept` points a filter keeps out of `total` (None: no
    filter, the engine's default HNSW walk): each of them compared when they are few (EXACT_FILTERED_MAX), else a walk
    whose beam is as many times wider than `limit` as the filter keeps fewer than all points (FILTERED_EF_MAX at
    most), so it meets about as many kept points as an unfiltered walk does. A walk's hits are rescored (RESCORED)."""
    if kept is None:
        return WALK
    if kept <= EXACT_FILTERED_MAX:
        return SearchParams(exact=True)  # on the floats: the engine's exact search reads no int8 copies
    return SearchParams(hnsw_ef=min(FILTERED_EF_MAX * limit, math.ceil(limit * total / kept)), quantization=RESCORED)


def dropped_rather_than_filtered(exclude_ids: Sequence[str]) -> bool:
    return len(exclude_ids) <= DROPPED_MAX


def engine_request(
    vector: np.ndarray,
    using: str,
    limit: int,
    extra: int,
    where: Filter | None,
    params: SearchParams,
    lexical: Mapping[str, SparseVector],
) -> QueryRequest:
    """The engine's search for the `limit` nearest on vector `using` (`params`: engine_params), with a prefetch of
    each lexical query's `lexical_limit(limit)` best fused by RRF: the union of every prefetch's hits (RRF orders
    them; the rerank scores them). Each part asks for `extra` hits more, for the excluded ids dropped from them."""
    dense = Query.Nearest(np.asarray(vector, dtype=np.float32).tolist(), using=using)
    if not lexical:
        return QueryRequest(
            limit=limit + extra, query=dense, filter=where, with_payload=False, with_vector=False, params=params
        )
    stages = [Prefetch(limit=limit + extra, query=dense, filter=where, params=params)]
    stages += [
        Prefetch(limit=base.lexical_limit(limit) + extra, query=_sparse_query(name, query), filter=where)
        for name, query in lexical.items()
    ]
    return QueryRequest(
        limit=sum(stage.limit for stage in stages), prefetches=stages, query=EdgeFusion.Rrf(k=RRF_K), with_payload=False
    )


def _sparse_query(name: str, query: SparseVector) -> Query:
    return Query.Nearest(EdgeSparseVector(query.indices.tolist(), query.values.tolist()), using=name)
