"""How the embedded store answers a search (store/edge/planner.py): which filters its payload indexes serve, and
how the engine walks the points a filter keeps: each of them compared when they are few, a beam as many times wider
than the limit as the filter keeps fewer than all points (at most FILTERED_EF_MAX times) when they are many."""

from __future__ import annotations

import math
from dataclasses import replace

from metricsearch.service.store import EdgeStore
from metricsearch.service.store.base import AnyOf, Equals, Range
from metricsearch.service.store.edge.planner import (
    EXACT_FILTERED_MAX,
    FILTERED_EF_MAX,
    engine_params,
    in_process,
    served_by_indexes,
)
from tests.service.store.conftest import SCHEMA
from tests.service.store.edge.test_metadata_index import counted
from tests.service.store.test_congruence import query_vector


def test_an_index_serves_a_filter_when_its_type_holds_every_kind_the_filter_can_match():
    indexes = {"color": "keyword", "year": "float", "new": "bool"}
    assert served_by_indexes([Equals("color", "red"), Range("year", gte=2000), Equals("new", True)], indexes)
    assert served_by_indexes([], indexes)
    assert not served_by_indexes([AnyOf("color", ("red", 3))], indexes), "a number on a keyword index"
    assert not served_by_indexes([Equals("year", "2001")], indexes)
    assert not served_by_indexes([Equals("shop", "a")], indexes), "no index on the key"
    assert in_process([Equals("shop", "a")], indexes) and not in_process([Equals("color", "red")], indexes)


def test_few_kept_points_are_compared_and_many_get_a_wider_walk():
    plain = engine_params(10, None, 100_000)
    assert not plain.exact and plain.hnsw_ef is None, "no filter: the engine's own walk"
    assert engine_params(10, EXACT_FILTERED_MAX, 100_000).exact
    wider = engine_params(10, 50_000, 100_000)
    assert not wider.exact and wider.hnsw_ef == 20, "half the points kept: a beam twice the limit"
    assert plain.quantization.rescore and wider.quantization.rescore, "a walk's hits scored by their floats"
    assert engine_params(10, 90_000, 100_000).hnsw_ef == math.ceil(10 * 100_000 / 90_000)
    assert engine_params(10, EXACT_FILTERED_MAX + 1, 10**7).hnsw_ef == FILTERED_EF_MAX * 10, "at most this wide"


def test_an_indexed_filter_asks_the_engine_for_an_exhaustive_search(tmp_path, items):
    store = EdgeStore(tmp_path / "edge", SCHEMA, optimize_after_writes=0, indexed_fields={"color": "keyword"})
    try:
        store.upsert(items(range(30)))  # 10 items of each color
        asked = []
        shard = counted(store)
        real_query = shard.query
        shard.query = lambda request: asked.append(request) or real_query(request)
        assert len(store.search(query_vector(0), 5, [Equals("color", "red")]).ids) == 5
        store.upsert([replace(items(range(30, 31))[0], metadata={"color": "red"})])
        assert len(store.search(query_vector(0), 5, [Equals("color", "red")]).ids) == 5
        assert len(store.search(query_vector(0), 5).ids) == 5
        exhaustive, again, plain = (request.params for request in asked)
        assert exhaustive.exact and again.exact and not plain.exact
    finally:
        store.close()
