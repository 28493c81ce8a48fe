"""The embedded store's metadata index (store/edge/metadata_index.py): a filter that wants a kind of value its key
does not hold is answered empty without the engine, which would check every point to find none; any other filter is
answered (by the engine where a payload index serves it, else by the index: test_exact.py), across writes, replacing
writes, deletes and a restart."""

from __future__ import annotations

from dataclasses import replace

import pytest

from metricsearch.core.errors import InvalidInputError
from metricsearch.service.store import EdgeStore
from metricsearch.service.store.base import AnyOf, Equals, Range
from metricsearch.service.store.edge import metadata_index
from metricsearch.service.store.edge import store as store_module
from metricsearch.service.store.edge.metadata_index import MetadataIndex, wanted_kinds
from tests.service.store.conftest import SCHEMA
from tests.service.store.test_congruence import query_vector

real_filter = store_module.edge_filter


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
    """The engine calls of the store's live shard, counted from now on."""
    store._live.shard = CountingShard(store._live.shard)
    return store._live.shard


def test_wanted_kinds_follow_the_filters_matching_rules():
    assert wanted_kinds(Equals("k", "red")) == {"keyword"}
    assert wanted_kinds(Equals("k", 2)) == wanted_kinds(Equals("k", 2.5)) == {"float"}
    assert wanted_kinds(Equals("k", True)) == {"bool"}, "true is not 1"
    assert wanted_kinds(AnyOf("k", ("a", 3))) == {"keyword", "float"}
    assert wanted_kinds(AnyOf("k", ())) == set()
    assert wanted_kinds(Range("k", gte=0)) == {"float"}


def test_the_index_holds_every_key_and_kind_written():
    index = MetadataIndex()
    index.add([0, 1], [{"color": "red", "tags": ["a"], "gone": None}, {"year": 2001, "new": False}])
    assert not index.matches_nothing([Equals("color", "blue"), AnyOf("tags", ("b",)), Range("year", lte=0)])
    assert not index.matches_nothing([Equals("new", True)])
    for nothing in ([Equals("colour", "red")], [Equals("year", "2001")], [Equals("new", 0)], [Equals("gone", "x")]):
        assert index.matches_nothing(nothing), nothing
    assert index.matches_nothing([Equals("color", "red"), Range("color", gte=0)]), "every condition must be met"


def test_the_index_forgets_a_kind_when_its_last_item_goes():
    index = MetadataIndex()
    index.add([0, 1, 2], [{"color": "red", "size": 2}, {"color": 3}, {"color": ["blue"], "size": 4}])
    index.remove([0], [{"color": "red", "size": 2}])
    assert not index.matches_nothing([Equals("color", "blue"), Equals("color", 3), Equals("size", 4)])
    index.remove([2], [{"color": ["blue"], "size": 4}])
    assert index.matches_nothing([Equals("color", "blue")]) and index.matches_nothing([Equals("size", 4)])
    assert not index.matches_nothing([Equals("color", 3)])
    index.remove([1, 5], [{"color": 3}, {"never": "added"}])
    assert index.matches_nothing([Equals("color", 3)])
    index.add([0], [{"color": "red"}])
    assert not index.matches_nothing([Equals("color", "green")]), "counts never go below zero"


def test_a_key_held_by_many_keeps_only_what_its_items_hold(monkeypatch):
    monkeypatch.setattr(metadata_index, "DENSE_MIN", 1)
    index = MetadataIndex()
    index.add(range(5), [{"m": "a"}, {"m": "b"}, {"m": "b"}, {"m": 1}, {"m": ["b", "d"]}])
    index.remove([0, 1, 4], [{"m": "a"}, {"m": "b"}, {"m": ["b", "d"]}])
    index.add([0, 1], [{"m": "c"}, {"m": 2}])
    column = index._columns["m"]
    assert sorted(column.codes) == ["b", "c"] and not column.lists, "what no item holds any more leaves"
    assert index.matching([Equals("m", "b")]).tolist() == [2] and index.matching([Range("m", gte=1)]).tolist() == [
        1,
        3,
    ]


def test_replacing_and_deleting_items_take_their_kinds_out_of_the_index(tmp_path, items):
    # A float index on promo: a number filter on it goes to the engine, a string one is answered in process.
    store = EdgeStore(tmp_path / "edge", SCHEMA, optimize_after_writes=0, indexed_fields={"promo": "float"})
    try:
        first, second, third = items(range(3))
        store.upsert([replace(first, metadata={"promo": "yes"}), replace(second, metadata={"promo": "yes"})])
        store.upsert([third, replace(third, metadata={"promo": 1})])  # the same id twice: the last one is stored
        shard = counted(store)
        assert store.search(query_vector(0), 10, [Equals("promo", 1)]).ids == ["item-2"]
        assert shard.calls == 1, "a filter the float index serves reaches the engine"
        store.upsert([replace(third, metadata={"promo": "no"})])  # the number goes, a string comes
        assert store.search(query_vector(0), 10, [Equals("promo", 1)]).ids == []
        assert shard.calls == 1, "no item holds a number under promo any more"
        assert store.delete_where([Equals("promo", "yes")]) == 2
        assert sorted(store.search(query_vector(0), 10, [AnyOf("promo", ("yes", "no"))]).ids) == ["item-2"]
        store.delete(["item-2"])
        calls = shard.calls
        assert store.search(query_vector(0), 10, [Equals("promo", "no")]).ids == []
        assert store.delete_where([Equals("promo", "no")]) == 0
        assert shard.calls == calls, "every item with promo is gone: nothing to look at"
    finally:
        store.close()


@pytest.mark.parametrize("indexed", [{}, {"color": "keyword", "new": "bool"}], ids=["in-process", "engine"])
def test_a_filter_no_kind_held_can_match_never_reaches_the_engine(tmp_path, items, monkeypatch, indexed):
    store = EdgeStore(tmp_path / "edge", SCHEMA, optimize_after_writes=0, indexed_fields=indexed)
    built = []
    monkeypatch.setattr(store_module, "edge_filter", lambda *args: built.append(args) or real_filter(*args))
    try:
        store.upsert(items(range(30)))
        shard = counted(store)
        for nothing in ([Equals("colour", "red")], [Equals("color", 3)], [Range("color", gte=0)], [Equals("new", 1)]):
            assert store.search(query_vector(0), 10, nothing).ids == []
            assert store.delete_where(nothing) == 0
        assert shard.calls == 0
        built.clear()
        numbers = [AnyOf(f"made-up-{n}", tuple(range(15))) for n in range(64)]
        assert store.search(query_vector(0), 10, numbers).ids == []
        assert not built, "a search that can match nothing builds no engine filter (about 18 us a number)"
        found = store.search(query_vector(0), 10, [Equals("color", "red"), Equals("new", True)])
        assert found.ids and found.vectors["title"].shape == (len(found.ids), 8)
        assert shard.calls == (1 if indexed else 0), "the engine answers only the filters its indexes serve"
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
    indexed = {"shop": "keyword", "color": "keyword"}
    store = EdgeStore(path, SCHEMA, optimize_after_writes=0, indexed_fields=indexed)
    store.upsert(items(range(10)))
    assert store.search(query_vector(0), 10, [Equals("shop", "a")]).ids == []
    store.upsert([replace(items(range(3, 4))[0], metadata={"shop": "a"})])
    assert store.search(query_vector(0), 10, [Equals("shop", "a")]).ids == ["item-3"]
    store.delete(["item-3"])
    shard = counted(store)
    assert store.search(query_vector(0), 10, [Equals("shop", "a")]).ids == []
    assert shard.calls == 0, "the only item with the key is gone, and the key with it"
    store.close()

    store = EdgeStore(path, SCHEMA, optimize_after_writes=0, indexed_fields=indexed)
    try:
        shard = counted(store)
        assert store.search(query_vector(0), 10, [Equals("shop", "a")]).ids == []
        assert shard.calls == 0, "after a restart the index holds what the items hold"
        assert len(store.search(query_vector(0), 10, [Equals("color", "red")]).ids) == 3
        assert shard.calls == 1
    finally:
        store.close()
