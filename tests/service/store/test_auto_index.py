"""Payload indexes learned from filters (MS_AUTO_INDEX, store/auto_index.py): a filter on a key without an index
builds one in the background, typed from the stored values, bounded, kept across restarts, answering the same, on
both stores (the server store over real REST calls, tests/service/qdrant_rest.py)."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from metricsearch.service.config import Settings
from metricsearch.service.store import EdgeStore, RemoteStore, auto_index, open_store
from metricsearch.service.store.base import AnyOf, Equals, Range, StoredItem
from tests.service.qdrant_rest import QdrantRest
from tests.service.store.conftest import SCHEMA, Reference
from tests.service.store.test_congruence import SEARCHES, populate, query_vector
from tests.service.store.test_payload import edge_indexes

LEARNED = {"color": "keyword", "year": "float", "price": "float", "new": "bool", "tags": "keyword", "size": "float"}
"""What the filters of SEARCHES teach, typed from the stored values (size holds ints and floats: one float index)."""


def _auto_edge(path, limit: int = 16, indexed_fields=None, **kwargs) -> EdgeStore:
    fields = indexed_fields or {}
    return EdgeStore(path, SCHEMA, optimize_after_writes=0, indexed_fields=fields, auto_index_max=limit, **kwargs)


def mixed_codes(items) -> list[StoredItem]:
    """Two more items whose `code` holds a string in one and a number in the other: a key no index type serves."""
    return [replace(item, metadata={"code": "A7" if i else 7}) for i, item in enumerate(items(range(20, 22)))]


def _filter_everything(store) -> dict[str, list[str]]:
    """Every search of SEARCHES, wide enough to return all matches; {name: ids}."""
    return {
        name: store.search(query_vector(2), 1000, conditions, exclude).ids
        for name, (conditions, exclude) in SEARCHES.items()
    }


@pytest.mark.parametrize("kind", ["edge", "server"])
def test_filters_build_indexes_in_the_background_and_answers_stay_the_same(kind, tmp_path, items, caplog):
    caplog.set_level(logging.INFO)
    with QdrantRest() as server:
        store = (
            _auto_edge(tmp_path / "edge")
            if kind == "edge"
            else RemoteStore.connect(server.url, "items", SCHEMA, indexed_fields={}, auto_index_max=16)
        )
        try:
            reference = Reference()
            populate(store, reference, items)
            assert store.auto_index.indexed == {}
            before = _filter_everything(store)
            assert store.auto_index.wait(30)
            assert store.auto_index.indexed == LEARNED, "the absent key gets none"
            assert _filter_everything(store) == before
            for name, (conditions, exclude) in SEARCHES.items():
                assert before[name] == reference.search(query_vector(2), 1000, conditions, exclude)[0], name
        finally:
            store.close()
        stored = edge_indexes(tmp_path / "edge") if kind == "edge" else server.indexes["items"]
        assert stored == {"id": "keyword", **{f"metadata.{k}": v for k, v in LEARNED.items()}}
    logged = [r for r in caplog.records if "automatic" in r.getMessage() and "built" in r.getMessage()]
    assert sorted(r.key for r in logged) == sorted(LEARNED) and all(r.ms >= 0 for r in logged)


def test_a_key_whose_values_mix_types_gets_no_index(tmp_path, items):
    mixed = [
        StoredItem(f"m-{i}", "t", "d", {"code": "A7" if i % 2 else 7, "label": ["x", 1] if i else "x"}, str(i), {})
        for i in range(6)
    ]
    store = _auto_edge(tmp_path / "edge")
    try:
        store.upsert([replace(item, vectors=other.vectors) for item, other in zip(mixed, items(range(6)), strict=True)])
        for conditions in ([Equals("code", "A7")], [Equals("code", 7)], [AnyOf("label", ("x", 1))]):
            before = store.search(query_vector(0), 10, conditions).ids
            assert store.auto_index.wait(30)
            assert store.search(query_vector(0), 10, conditions).ids == before
        assert store.auto_index.indexed == {}
    finally:
        store.close()
    assert edge_indexes(tmp_path / "edge") == {"id": "keyword"}


def test_a_filter_that_matches_nothing_is_not_looked_at_and_a_refusal_expires(tmp_path, items, monkeypatch):
    """Filters that arrive before the catalog (a service started empty) match nothing, so their key is not looked at;
    once items hold it, the next filter on it builds its index. A key refused (its values mix types) is not looked at
    again for RETRY_AFTER_S, then is, so a catalog whose values were fixed still gets its index."""
    outcomes: list[str] = []
    store = _auto_edge(tmp_path / "edge", on_auto_index=outcomes.append)
    try:
        store.search(query_vector(0), 10, [Equals("color", "red")])  # an empty store: no item holds the key
        assert store.auto_index.wait(30) and outcomes == []
        store.upsert(items(range(20)))
        store.search(query_vector(0), 10, [Equals("color", "red")])
        assert store.auto_index.wait(30) and outcomes == ["built"]

        mixed = mixed_codes(items)
        store.upsert(mixed)
        store.search(query_vector(0), 10, [AnyOf("code", ("A7", 7))])
        assert store.auto_index.wait(30) and outcomes == ["built", "refused"]
        store.upsert([replace(mixed[0], metadata={"code": "A6"})])  # the catalog's values fixed: strings only
        store.search(query_vector(0), 10, [AnyOf("code", ("A7", "A6"))])
        assert store.auto_index.wait(30) and outcomes == ["built", "refused"], "looked at again within RETRY_AFTER_S"
        monkeypatch.setattr(auto_index, "RETRY_AFTER_S", 0.0)  # the refusal has expired
        store.search(query_vector(0), 10, [AnyOf("code", ("A7", "A6"))])
        assert store.auto_index.wait(30) and outcomes == ["built", "refused", "built"]
        assert store.auto_index.indexed == {"color": "keyword", "code": "keyword"}
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["edge", "server"])
def test_filters_on_random_keys_are_not_looked_at_and_learned_indexes_are_bounded(kind, tmp_path, items, caplog):
    """Filters are user input: keys no item holds are not even looked at (a look reads every point to find none, so
    made-up keys in every search kept the store busy), and at most the limit are learned in all."""
    outcomes: list[str] = []
    caplog.set_level(logging.WARNING, logger=auto_index.__name__)
    with QdrantRest() as server:
        store = (
            _auto_edge(tmp_path / "edge", limit=2, on_auto_index=outcomes.append)
            if kind == "edge"
            else RemoteStore.connect(
                server.url, "items", SCHEMA, indexed_fields={}, auto_index_max=2, on_auto_index=outcomes.append
            )
        )
        try:
            store.upsert(items(range(50)))
            for n in range(300):
                store.search(query_vector(0), 10, [Equals(f"junk-{n}", "x")])
                store.search(query_vector(0), 10, [Equals("color", "red"), Equals(f"junk-{n}", "x")])
            assert store.delete_where([Equals("color", "red"), Equals("junk", "x")]) == 0
            assert store.auto_index.wait(60)
            assert store.auto_index.indexed == {} and outcomes == []
            for key in LEARNED:
                store.search(query_vector(0), 10, [Range(key, gte=0)])
            assert store.auto_index.wait(30)
            assert len(store.auto_index.indexed) == 2
            # A key past the limit is unindexed for good: said once (log and metric), not on every search.
            unserved = next(k for k, t in LEARNED.items() if t == "float" and k not in store.auto_index.indexed)
            for _ in range(3):
                store.search(query_vector(0), 10, [Range(unserved, gte=0)])
            warned = [r.key for r in caplog.records if "MS_INDEXED_FIELDS" in r.getMessage()]
            assert unserved in warned and len(warned) == len(set(warned)) == outcomes.count("over_limit")
        finally:
            store.close()
    if kind == "edge":
        assert len(edge_indexes(tmp_path / "edge")) == 3


def test_learned_indexes_are_kept_across_restarts_while_auto_index_is_on(tmp_path, items):
    path = tmp_path / "edge"
    store = _auto_edge(path)
    store.upsert(items(range(20)))
    store.search(query_vector(0), 10, [Equals("color", "red")])
    assert store.auto_index.wait(30)
    store.close()

    store = _auto_edge(path, limit=1)
    assert store.auto_index.indexed == {"color": "keyword"}
    store.search(query_vector(0), 10, [Equals("new", True)])
    assert store.auto_index.wait(30) and "new" not in store.auto_index.indexed, "the learned one counts to the limit"
    store.close()

    _auto_edge(path, indexed_fields={"color": "float"}).close()
    assert edge_indexes(path) == {"id": "keyword", "metadata.color": "float"}, (
        "a declaration wins over what was learned"
    )

    EdgeStore(path, SCHEMA, optimize_after_writes=0, indexed_fields={}).close()
    assert edge_indexes(path) == {"id": "keyword"}, "with MS_AUTO_INDEX off, start-up drops every undeclared index"


def test_server_store_keeps_learned_indexes_while_auto_index_is_on(items):
    with QdrantRest() as server:
        store = RemoteStore.connect(server.url, "items", SCHEMA, indexed_fields={}, auto_index_max=16)
        store.upsert(items(range(20)))
        store.search(query_vector(0), 10, [Equals("color", "red")])
        assert store.auto_index.wait(30)
        store.close()
        assert server.indexes["items"] == {"id": "keyword", "metadata.color": "keyword"}

        store = RemoteStore.connect(server.url, "items", SCHEMA, indexed_fields={}, auto_index_max=16)
        assert store.auto_index.indexed == {"color": "keyword"}
        store.close()
        RemoteStore.connect(server.url, "items", SCHEMA, indexed_fields={}).close()
        assert server.indexes["items"] == {"id": "keyword"}


def test_an_index_learned_during_an_hnsw_build_survives_the_swap(tmp_path, items):
    path = tmp_path / "edge"
    store = _auto_edge(path, indexing_threshold_kb=1)
    store.upsert(items(range(300)))
    store.optimize_now()
    store.search(query_vector(0), 10, [Equals("color", "red")])
    assert store.auto_index.wait(30) and store.wait_for_maintenance(60) and store.has_hnsw
    store.close()
    assert edge_indexes(path) == {"id": "keyword", "metadata.color": "keyword"}


def test_settings_turn_auto_index_on_and_report_each_outcome(tmp_path, items, monkeypatch):
    outcomes: list[str] = []
    store = open_store(Settings(data_dir=tmp_path), SCHEMA, on_auto_index=outcomes.append)
    store.upsert(items(range(20)))
    store.upsert(mixed_codes(items))
    store.search(query_vector(0), 10, [Equals("color", "red")])
    store.search(query_vector(0), 10, [AnyOf("code", ("A7", 7))])  # its values mix types
    assert store.auto_index.wait(30)
    store.close()
    assert sorted(outcomes) == ["built", "refused"]

    monkeypatch.setenv("MS_AUTO_INDEX", "false")
    store = open_store(Settings(data_dir=tmp_path), SCHEMA, on_auto_index=outcomes.append)
    store.search(query_vector(0), 10, [Equals("new", True)])
    assert store.auto_index.wait(30)
    store.close()
    assert edge_indexes(tmp_path / "items") == {"id": "keyword"}
