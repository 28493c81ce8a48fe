"""Filters no payload index serves are answered by the embedded store in process (metadata_index.py, exact.py): on
random metadata of every kind, with a key's values in a dict (held by few items) or in arrays (by many), and with or
without payload indexes (which send the filters they serve to the engine), a filter finds the items brute force
finds, across replacing writes and deletes; a filter its indexes do not serve never reaches the engine, and one they
serve does."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metricsearch.service.store import EdgeStore
from metricsearch.service.store.base import AnyOf, Equals, Range, StoredItem
from metricsearch.service.store.edge import metadata_index
from tests.service.store.conftest import SCHEMA, matches
from tests.service.store.edge.test_metadata_index import counted
from tests.service.store.test_congruence import query_vector

KEYS = ("a", "b", "c")
STRINGS = ("x", "y", "z", "w")
stored_values = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([0.5, 2.0, -1.0, 3.0]),
    st.booleans(),
    st.sampled_from(STRINGS[:3]),
    st.lists(st.sampled_from(STRINGS), max_size=3),
    st.none(),
)
metadata = st.dictionaries(st.sampled_from(KEYS), stored_values, max_size=3)
keys = st.sampled_from(KEYS)
bounds = st.none() | st.sampled_from([-3.0, -1.0, 0.0, 0.5, 2.0, 3.0])
conditions = st.one_of(
    st.builds(
        Equals, keys, st.integers(-3, 3) | st.sampled_from([0.5, 2.0]) | st.booleans() | st.sampled_from(STRINGS)
    ),
    st.builds(AnyOf, keys, st.lists(st.integers(-3, 3) | st.sampled_from(STRINGS), max_size=4).map(tuple)),
    st.builds(Range, keys, bounds, bounds),
)


def item(n: int, meta: dict, version: int) -> StoredItem:
    rng = np.random.default_rng(n * 10 + version)
    return StoredItem(
        id=f"i{n}",
        title=f"t{n}",
        description="",
        metadata=meta,
        content_hash=f"{n}-{version}",
        vectors={name: rng.normal(size=size).astype(np.float32) for name, size in SCHEMA.sizes.items()},
    )


INDEXED = {"a": "keyword", "b": "float", "c": "bool", "m": "keyword"}
"""A payload index per key: the filters whose every value kind its type holds go to the engine."""


@pytest.fixture(
    params=[(1, None), (10**9, None), (1, INDEXED), (10**9, INDEXED)],
    ids=["arrays", "dicts", "arrays-indexed", "dicts-indexed"],
)
def store(request, tmp_path, monkeypatch):
    """An embedded store whose metadata index keeps each key's values in arrays (every key held by more than
    rows / 16 items) or in dicts, without payload indexes or with one on each key."""
    dense_min, indexed = request.param
    monkeypatch.setattr(metadata_index, "DENSE_MIN", dense_min)
    store = EdgeStore(tmp_path / "edge", SCHEMA, optimize_after_writes=0, indexed_fields=indexed)
    stored: dict[str, dict] = {}
    real_upsert, real_delete = store.upsert, store.delete

    def upsert(items):
        stored.update((it.id, it.metadata) for it in items)
        real_upsert(items)

    def delete(ids):
        for i in ids:
            stored.pop(i, None)
        return real_delete(ids)

    store.upsert, store.delete, store.stored = upsert, delete, stored  # what brute force filters
    yield store
    store.close()


def assert_finds_what_brute_force_finds(store: EdgeStore, wanted) -> None:
    expected = {i for i, meta in store.stored.items() if all(matches(meta, c) for c in wanted)}
    assert set(store.search(query_vector(0), 1000, wanted).ids) == expected, wanted


MIXED = [True, False, 1, 1.0, 0, 2.5, "1", "x", ["1", "x"], ["y"], [], None]
"""Values of every kind under one key, with the pairs the engine tells apart (true and 1, 1 and "1")."""
ASKED = [
    *(Equals("m", v) for v in (1, 1.0, True, False, 0, "1", "x", "y", 2.5, "absent")),
    AnyOf("m", (1, "x")),
    AnyOf("m", ("1",)),
    AnyOf("m", (0, 2)),
    AnyOf("m", ()),
    Range("m", gte=0, lte=1),
    Range("m", gte=1),
    Range("m"),
]


def test_each_kind_of_value_is_told_apart_as_the_engine_tells_it(store):
    """The pairs brute force tells apart as the engine does (the congruence tests hold the engines to it)."""
    for copies in (1, 3):  # each value held by one item, then by several: in dicts, then in arrays
        store.upsert([item(n, {"m": value}, copies) for n, value in enumerate(MIXED * copies)])
        for condition in ASKED:
            assert_finds_what_brute_force_finds(store, [condition])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    first=st.lists(metadata, min_size=1, max_size=30),
    later=st.lists(metadata, max_size=10),
    deleted=st.sets(st.integers(0, 29), max_size=8),
    filters=st.lists(st.lists(conditions, min_size=1, max_size=3), min_size=1, max_size=8),
)
def test_a_filter_finds_what_brute_force_finds(store, first, later, deleted, filters):
    store.delete([f"i{n}" for n in range(40)])  # one store for every example: its index lives through them all
    store.upsert([item(n, meta, 0) for n, meta in enumerate(first)])
    store.upsert([item(n, meta, 1) for n, meta in enumerate(later)])  # replacing writes, new items past `first`
    store.delete([f"i{n}" for n in deleted])
    for wanted in filters:
        assert_finds_what_brute_force_finds(store, wanted)


def test_a_filter_its_indexes_do_not_serve_never_reaches_the_engine(tmp_path, items):
    """Searches and deletes alike; an index built later, or found at a restart, serves its key's filters."""
    path = tmp_path / "edge"
    store = EdgeStore(path, SCHEMA, optimize_after_writes=0, indexed_fields={"color": "keyword"})
    store.upsert(items(range(30)))
    shard = counted(store)
    assert store.search(query_vector(0), 5, [Equals("year", 2003)]).ids
    assert store.search(query_vector(0), 5, [Equals("color", "red"), Equals("year", 2003)]).ids
    assert store.search(query_vector(0), 5, [AnyOf("color", ("red", 3))]).ids, "a number on a keyword index"
    assert store.delete_where([Equals("year", 2006)]) == 4
    assert shard.calls == 0
    assert store.search(query_vector(0), 5, [Equals("color", "red")]).ids
    assert shard.calls == 1, "a filter its index serves"
    store.create_index("year", "float")
    assert store.search(query_vector(0), 5, [Range("year", gte=2003)]).ids
    assert shard.calls == 2, "an index built after the start serves its key's filters"
    store.close()

    store = EdgeStore(path, SCHEMA, optimize_after_writes=0)  # indexes as they are
    try:
        shard = counted(store)
        assert store.search(query_vector(0), 5, [Equals("year", 2003), Equals("color", "red")]).ids
        assert shard.calls == 1, "after a restart"
        assert store.search(query_vector(0), 5, [Equals("new", True)]).ids and shard.calls == 1
    finally:
        store.close()
