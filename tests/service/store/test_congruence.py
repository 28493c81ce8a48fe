"""Congruence: the embedded store and the server store (qdrant-client's local mode, same API as a server) answer
the same operations alike, and both agree with brute force."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from metricsearch.core.errors import InvalidInputError, StoreMismatchError
from metricsearch.service.store import EdgeStore, RemoteStore
from metricsearch.service.store.base import AnyOf, Equals, Range, SearchResult
from metricsearch.service.store.edge.planner import DROPPED_MAX
from tests.service.store.conftest import SCHEMA, Reference, unit

N_ITEMS = 60
DELETED = ["item-7", "item-8", "item-20", "item-33"]

SEARCHES = {
    "plain": ((), ()),
    "equals-str": ((Equals("color", "red"),), ()),
    "equals-int": ((Equals("year", 2003),), ()),
    "equals-float": ((Equals("price", 2.75),), ()),
    "equals-integral-float": ((Equals("price", 3.0),), ()),
    "equals-bool-true": ((Equals("new", True),), ()),
    "equals-bool-false": ((Equals("new", False),), ()),
    "equals-list-element": ((Equals("tags", "t2"),), ()),
    "any-of-str": ((AnyOf("color", ("red", "blue")),), ()),
    "any-of-int": ((AnyOf("year", (2001, 2005)),), ()),
    "any-of-list-element": ((AnyOf("tags", ("t1", "t3")),), ()),
    "any-of-mixed-types": ((AnyOf("year", ("2002", 2002, 2004)),), ()),
    "any-of-empty": ((AnyOf("color", ()),), ()),
    "equals-int-matches-float": ((Equals("size", 2),), ()),
    "equals-float-matches-int": ((Equals("size", 1.0),), ()),
    "any-of-int-matches-float": ((AnyOf("price", (3, 4)),), ()),
    "any-of-int-mixed-storage": ((AnyOf("size", (0, 2, "1")),), ()),
    "any-of-many-numbers": ((AnyOf("price", tuple(range(1, 200, 3))),), ()),
    "any-of-many-numbers-mixed-storage": ((AnyOf("size", (*range(-41, 42, 2), 0, "2")),), ()),
    "range-mixed-storage": ((Range("size", gte=0.5, lte=1.5),), ()),
    "range-gte": ((Range("price", gte=10.0),), ()),
    "range-lte": ((Range("year", lte=2002),), ()),
    "range-both": ((Range("price", gte=2.0, lte=6.5),), ()),
    "missing-key": ((Equals("absent", "x"),), ()),
    # a kind of value the key never holds: the embedded store answers these without the engine (metadata_index.py)
    "equals-number-of-strings": ((Equals("color", 3),), ()),
    "equals-string-of-numbers": ((Equals("year", "2003"),), ()),
    "equals-number-of-bools": ((Equals("new", 1),), ()),
    "range-of-strings": ((Range("color", gte=0),), ()),
    "any-of-strings-of-numbers-and-a-held-key": ((AnyOf("price", ("2.75", "3")), Equals("color", "red")), ()),
    "exclude": ((), ("item-0", "item-1", "item-2", "item-5", "no-such-item")),
    # more ids than the embedded store drops from its hits (DROPPED_MAX): filtered out by the engine instead
    "exclude-many": ((), tuple(f"item-{i}" for i in range(0, 50, 2))),
    "combined": ((Equals("new", True), Range("price", gte=1.0), AnyOf("color", ("red", "green"))), ("item-14",)),
}
NOTHING = {
    "missing-key",
    "any-of-empty",
    "equals-number-of-strings",
    "equals-string-of-numbers",
    "equals-number-of-bools",
    "range-of-strings",
    "any-of-strings-of-numbers-and-a-held-key",
}
"""The searches no item matches."""


def populate(store, reference: Reference, items) -> None:
    """Upsert, overwrite (items 3-4: new texts, metadata and vectors; 10-12: new vectors) and delete, on the store
    and the reference alike."""
    for batch in (items(range(N_ITEMS)), items(range(3, 5), seed=1, version=1) + items(range(10, 13), seed=2)):
        store.upsert(batch)
        reference.upsert(batch)
    assert store.delete([*DELETED, "no-such-item"]) == len(DELETED)
    reference.delete(DELETED)


def query_vector(seed: int) -> np.ndarray:
    return np.random.default_rng(100 + seed).normal(size=SCHEMA.sizes[SCHEMA.ann]).astype(np.float32)


def assert_matches_reference(result: SearchResult, reference: Reference, expected_ids: list[str]) -> None:
    assert result.ids == expected_ids
    assert result.scores.dtype == np.float32 and result.scores.shape == (len(expected_ids),)
    for name, size in SCHEMA.sizes.items():
        matrix = result.vectors[name]
        assert matrix.dtype == np.float32 and matrix.shape == (len(expected_ids), size)
        expected = [unit(reference.items[i].vectors[name]) for i in expected_ids]
        np.testing.assert_allclose(matrix, np.array(expected).reshape(-1, size), atol=1e-5)
    for listing in result.listings:
        stored = reference.items[listing.id]
        assert (listing.title, listing.metadata) == (stored.title, stored.metadata)


@pytest.mark.parametrize("name", SEARCHES)
def test_search_matches_brute_force(store, items, name):
    reference = Reference()
    populate(store, reference, items)
    conditions, exclude = SEARCHES[name]
    for seed, limit in ((0, 10), (1, 3), (2, 1000)):
        vector = query_vector(seed)
        expected_ids, expected_scores = reference.search(vector, limit, conditions, exclude)
        result = store.search(vector, limit, conditions, exclude)
        assert_matches_reference(result, reference, expected_ids)
        np.testing.assert_allclose(result.scores, expected_scores, atol=1e-5)


def test_scenarios_are_selective(items):
    """Guards the test data: each filter keeps some items and drops others, so a filter ignored fails a test."""
    assert len(SEARCHES["exclude"][1]) <= DROPPED_MAX < len(SEARCHES["exclude-many"][1])
    reference = Reference()
    populate(reference, reference, items)
    for name, (conditions, exclude) in SEARCHES.items():
        kept = len(reference.search(query_vector(0), 1000, conditions, exclude)[0])
        if name == "plain":
            assert kept == len(reference.items)
        elif name in NOTHING:
            assert kept == 0, name
        else:
            assert 0 < kept < len(reference.items), name


def test_limit_above_count_returns_all(store, items):
    store.upsert(items(range(5)))
    assert len(store.search(query_vector(0), 100).ids) == 5


def test_get_delete_count(store, items):
    reference = Reference()
    populate(store, reference, items)
    assert store.count() == len(reference.items) == N_ITEMS - len(DELETED)

    wanted = ["item-3", "item-12", "item-40", "item-7", "no-such-item", "item-3"]
    got = store.get(wanted)
    assert sorted(got) == ["item-12", "item-3", "item-40"]
    assert got["item-3"].title == "title 3 v1" and got["item-12"].content_hash == "hash-12-0"
    assert all(item.vectors == {} for item in got.values())
    for item_id, item in store.get(wanted, with_vectors=True).items():
        assert item.metadata == reference.items[item_id].metadata
        for name in SCHEMA.sizes:
            assert item.vectors[name].dtype == np.float32
            np.testing.assert_allclose(item.vectors[name], unit(reference.items[item_id].vectors[name]), atol=1e-6)

    assert store.get([]) == {}
    assert store.delete(["item-40", "item-40", "item-41"]) == 2
    assert store.delete(["item-40"]) == 0
    assert store.count() == len(reference.items) - 2
    assert store.readiness() is None


def test_scroll_pages_through_every_item_once(store, items):
    """What a model rollout reads: every stored item's texts and metadata, in pages, none twice, no vectors."""
    reference = Reference()
    populate(store, reference, items)
    seen, offset, pages = [], None, 0
    while True:
        page, offset = store.scroll(offset, 7)
        assert len(page) <= 7 and all(item.vectors == {} for item in page)
        seen += page
        pages += 1
        if offset is None:
            break
    assert sorted(i.id for i in seen) == sorted(reference.items) and pages >= len(reference.items) // 7
    for item in seen:
        wanted = reference.items[item.id]
        assert (item.title, item.description, item.metadata) == (wanted.title, wanted.description, wanted.metadata)


def test_metadata_key_with_path_syntax_refused(store, items):
    store.upsert(items(range(3)))
    with pytest.raises(InvalidInputError, match="metadata key"):
        store.search(query_vector(0), 3, [Equals("tags[0]", "all")])


def test_misshapen_vector_refused(store, items):
    item = items(range(1))[0]
    item.vectors["title"] = np.zeros(3, dtype=np.float32)
    with pytest.raises(ValueError, match="'title' must have shape"):
        store.upsert([item])


def test_edge_and_remote_agree(edge_store, local_store, items):
    """The same operations on both stores give the same items, order, scores and vectors."""
    for store in (edge_store, local_store):
        populate(store, Reference(), items)
    assert edge_store.count() == local_store.count()
    ids = [f"item-{i}" for i in range(N_ITEMS)]
    edge_items, local_items = edge_store.get(ids, with_vectors=True), local_store.get(ids, with_vectors=True)
    assert edge_items.keys() == local_items.keys()
    for item_id, item in edge_items.items():
        other = local_items[item_id]
        assert (item.title, item.description, item.metadata, item.content_hash) == (
            other.title,
            other.description,
            other.metadata,
            other.content_hash,
        )
        for name in SCHEMA.sizes:
            np.testing.assert_allclose(item.vectors[name], other.vectors[name], atol=1e-6)
    for conditions, exclude in SEARCHES.values():
        edge = edge_store.search(query_vector(3), 15, conditions, exclude)
        local = local_store.search(query_vector(3), 15, conditions, exclude)
        assert edge.listings == local.listings
        np.testing.assert_allclose(edge.scores, local.scores, atol=1e-5)
        for name in SCHEMA.sizes:
            np.testing.assert_allclose(edge.vectors[name], local.vectors[name], atol=1e-6)


def open_kind(kind: str, tmp_path, schema):
    if kind == "edge":
        return EdgeStore(tmp_path / "edge", schema)
    return RemoteStore(QdrantClient(path=str(tmp_path / "local")), "items", schema)


@pytest.mark.parametrize("kind", ["edge", "remote-local"])
@pytest.mark.parametrize(
    ("other", "needle"),
    [
        (replace(SCHEMA, sizes={"title": 8, "description": 16}), "{'title': 8, 'description': 16}"),
        (replace(SCHEMA, identity="other-bundle@2"), "'other-bundle@2'"),
    ],
)
def test_both_refuse_a_store_of_another_bundle(tmp_path, items, kind, other, needle):
    store = open_kind(kind, tmp_path, SCHEMA)
    store.upsert(items(range(3)))
    store.close()
    with pytest.raises(StoreMismatchError) as error:
        open_kind(kind, tmp_path, other)
    message = str(error.value)
    assert "'test-bundle@1'" in message and "{'title': 8, 'description': 12}" in message and needle in message
    assert ("MS_DATA_DIR" if kind == "edge" else "MS_COLLECTION") in message
    store = open_kind(kind, tmp_path, SCHEMA)
    assert store.count() == 3
    store.close()


def test_remote_collection_without_record(tmp_path):
    """A collection made elsewhere (or by a server without collection metadata): used when its sizes fit."""
    path = str(tmp_path / "local")
    client = QdrantClient(path=path)
    vectors = {n: qm.VectorParams(size=s, distance=qm.Distance.COSINE) for n, s in SCHEMA.sizes.items()}
    client.create_collection("items", vectors_config=vectors)
    client.create_collection("dots", vectors_config={"title": qm.VectorParams(size=8, distance=qm.Distance.DOT)})
    client.close()

    RemoteStore(QdrantClient(path=path), "items", SCHEMA).close()
    with pytest.raises(StoreMismatchError, match="'description': 16"):
        RemoteStore(QdrantClient(path=path), "items", replace(SCHEMA, sizes={"title": 8, "description": 16}))
    with pytest.raises(StoreMismatchError, match="Cosine"):
        RemoteStore(QdrantClient(path=path), "dots", replace(SCHEMA, sizes={"title": 8}))
