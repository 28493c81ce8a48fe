"""The embedded store's metadata census (store/census.py): a filter that wants a kind of value its key never held
is answered empty without the engine, which would check every point to find none; any other filter still reaches
the engine, across writes, deletes and a restart."""

from __future__ import annotations

from dataclasses import replace

import pytest

from metricsearch.core.errors import InvalidInputError
from metricsearch.service.store import EdgeStore
from metricsearch.service.store.base import AnyOf, Equals, Range
from metricsearch.service.store.census import MetadataCensus, wanted_kinds
from tests.service.store.conftest import SCHEMA
from tests.service.store.test_congruence import query_vector


class CountingShard:
    """The real shard, with its searches and scrolls counted."""

    def __init__(self, shard) -> None:
        self._shard = shard
        self.calls = 0

    def query(self, request):
        self.calls += 1
        return self._shard.query(request)

    def scroll(self, request):
        self.calls += 1
        return self._shard.scroll(request)

    def __getattr__(self, name):
        return getattr(self._shard, name)


def counted(store: EdgeStore) -> CountingShard:
    store._shard = CountingShard(store._shard)
    return store._shard


def test_wanted_kinds_follow_the_filters_matching_rules():
    assert wanted_kinds(Equals("k", "red")) == {"keyword"}
    assert wanted_kinds(Equals("k", 2)) == wanted_kinds(Equals("k", 2.5)) == {"float"}
    assert wanted_kinds(Equals("k", True)) == {"bool"}, "true is not 1"
    assert wanted_kinds(AnyOf("k", ("a", 3))) == {"keyword", "float"}
    assert wanted_kinds(AnyOf("k", ())) == set()
    assert wanted_kinds(Range("k", gte=0)) == {"float"}


def test_the_census_holds_every_key_and_kind_written():
    census = MetadataCensus()
    census.add([{"color": "red", "tags": ["a"], "gone": None}, {"year": 2001, "new": False}])
    assert not census.matches_nothing([Equals("color", "blue"), AnyOf("tags", ("b",)), Range("year", lte=0)])
    assert not census.matches_nothing([Equals("new", True)])
    for nothing in ([Equals("colour", "red")], [Equals("year", "2001")], [Equals("new", 0)], [Equals("gone", "x")]):
        assert census.matches_nothing(nothing), nothing
    assert census.matches_nothing([Equals("color", "red"), Range("color", gte=0)]), "every condition must be met"


def test_a_filter_no_kind_held_can_match_never_reaches_the_engine(tmp_path, items):
    store = EdgeStore(tmp_path / "edge", SCHEMA, optimize_after_writes=0)
    try:
        store.upsert(items(range(30)))
        shard = counted(store)
        for nothing in ([Equals("colour", "red")], [Equals("color", 3)], [Range("color", gte=0)], [Equals("new", 1)]):
            assert store.search(query_vector(0), 10, nothing).ids == []
            assert store.delete_where(nothing) == 0
        assert shard.calls == 0
        found = store.search(query_vector(0), 10, [Equals("color", "red"), Equals("new", True)])
        assert shard.calls == 1 and found.ids and found.vectors["title"].shape == (len(found.ids), 8)
        empty = store.search(query_vector(0), 10, [Equals("colour", "red")])
        assert empty.scores.shape == (0,) and {n: v.shape for n, v in empty.vectors.items()} == {
            "title": (0, 8),
            "description": (0, 12),
        }
        with pytest.raises(InvalidInputError):  # a key that cannot be filtered on is refused, not answered empty
            store.search(query_vector(0), 10, [Equals("a.b", "x")])
    finally:
        store.close()


def test_a_key_written_later_or_before_a_restart_is_searched(tmp_path, items):
    path = tmp_path / "edge"
    store = EdgeStore(path, SCHEMA, optimize_after_writes=0)
    store.upsert(items(range(10)))
    assert store.search(query_vector(0), 10, [Equals("shop", "a")]).ids == []
    store.upsert([replace(items(range(3, 4))[0], metadata={"shop": "a"})])
    assert store.search(query_vector(0), 10, [Equals("shop", "a")]).ids == ["item-3"]
    store.delete(["item-3"])
    shard = counted(store)
    assert store.search(query_vector(0), 10, [Equals("shop", "a")]).ids == []
    assert shard.calls == 1, "a kind once written stays in the census: searched, found gone"
    store.close()

    store = EdgeStore(path, SCHEMA, optimize_after_writes=0)
    try:
        shard = counted(store)
        assert store.search(query_vector(0), 10, [Equals("shop", "a")]).ids == []
        assert shard.calls == 0, "after a restart the census holds what the items hold"
        assert len(store.search(query_vector(0), 10, [Equals("color", "red")]).ids) == 3
        assert shard.calls == 1
    finally:
        store.close()
