"""qdrant-client's filter classes for the one filter translation (store/filters.py)."""

from __future__ import annotations

from collections.abc import Sequence

from qdrant_client import models as qm

from metricsearch.core.filters import Condition
from metricsearch.core.records import point_id
from metricsearch.service.store.filters import engine_filter

Node = qm.FieldCondition | qm.Filter


class ClientNodes:
    def equals(self, path: str, value: str | bool) -> Node:
        return qm.FieldCondition(key=path, match=qm.MatchValue(value=value))

    def any_of(self, path: str, strings: list[str]) -> Node:
        return qm.FieldCondition(key=path, match=qm.MatchAny(any=strings))

    def between(self, path: str, gte: float | None, lte: float | None) -> Node:
        return qm.FieldCondition(key=path, range=qm.Range(gte=gte, lte=lte))

    def either(self, nodes: list[Node]) -> Node:
        return qm.Filter(should=nodes)

    def all_of(self, nodes: list[Node]) -> Node:
        return qm.Filter(must=nodes)

    def point(self, item_id: str) -> str:
        return point_id(item_id)

    def search_filter(self, must: list[Node], excluded_points: list[str]) -> qm.Filter:
        must_not: list[qm.Condition] = [qm.HasIdCondition(has_id=excluded_points)] if excluded_points else []
        return qm.Filter(must=must or None, must_not=must_not or None)


_NODES = ClientNodes()


def client_filter(conditions: Sequence[Condition], exclude_ids: Sequence[str]) -> qm.Filter | None:
    return engine_filter(conditions, exclude_ids, _NODES)
