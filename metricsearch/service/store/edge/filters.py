"""qdrant-edge's filter classes for the one filter translation (store/filters.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from qdrant_edge import FieldCondition, Filter, HasIdCondition, MatchAny, MatchValue, RangeFloat

from metricsearch.core.filters import Condition
from metricsearch.service.store.edge.layout import point_key
from metricsearch.service.store.filters import engine_filter

Node = FieldCondition | Filter


class EdgeNodes:
    def equals(self, path: str, value: str | bool) -> Node:
        # qdrant-edge 0.9 reads a Python bool as the integer 1 or 0, which never matches a stored bool; numpy's bool
        # converts as a bool.
        return FieldCondition(path, match=MatchValue(np.bool_(value) if isinstance(value, bool) else value))

    def any_of(self, path: str, strings: list[str]) -> Node:
        return FieldCondition(path, match=MatchAny(strings))

    def between(self, path: str, gte: float | None, lte: float | None) -> Node:
        return FieldCondition(path, range=RangeFloat(gte=gte, lte=lte))

    def either(self, nodes: list[Node]) -> Node:
        return Filter(should=nodes)

    def all_of(self, nodes: list[Node]) -> Node:
        return Filter(must=nodes)

    def point(self, item_id: str) -> int:
        return point_key(item_id)

    def search_filter(self, must: list[Node], excluded_points: list[int]) -> Filter:
        return Filter(must=must or None, must_not=[HasIdCondition(set(excluded_points))] if excluded_points else None)


_NODES = EdgeNodes()


def edge_filter(conditions: Sequence[Condition], exclude_ids: Sequence[str]) -> Filter | None:
    return engine_filter(conditions, exclude_ids, _NODES)
