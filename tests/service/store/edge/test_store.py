"""The embedded store alone: what it holds survives a reopen, and open_store without a URL opens it. Its parts are
tested beside it: the files and one owner (test_layout.py), writes and checkpoints (test_writes.py), the background
HNSW build (test_build.py), snapshots (test_snapshot.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from metricsearch.core.errors import InvalidInputError
from metricsearch.service.config import Settings
from metricsearch.service.store import EdgeStore, open_store
from metricsearch.service.store.base import Equals, Range
from metricsearch.service.store.edge import layout
from tests.service.store.conftest import SCHEMA, Reference, unit


def shard_dirs(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.startswith("shard-"))


def query(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=SCHEMA.sizes[SCHEMA.ann]).astype(np.float32)


def assert_same_answers(store: EdgeStore, reference: Reference) -> None:
    assert store.count() == len(reference.items)
    for seed, conditions in enumerate([(), (Equals("new", True),), (Range("price", gte=20.0),)]):
        expected_ids, expected_scores = reference.search(query(seed), 10, conditions)
        result = store.search(query(seed), 10, conditions)
        assert result.ids == expected_ids
        np.testing.assert_allclose(result.scores, expected_scores, atol=1e-5)
        for listing in result.listings:  # from the in-memory copy too, also after a reopen or a build's swap
            stored = reference.items[listing.id]
            assert (listing.title, listing.metadata) == (stored.title, stored.metadata)
        for name, matrix in result.vectors.items():  # read from the in-memory copy, not the engine
            expected = np.array([unit(reference.items[i].vectors[name]) for i in expected_ids]).reshape(matrix.shape)
            np.testing.assert_allclose(matrix, expected, atol=1e-6)
    stored = store.get(list(reference.items), with_vectors=True)
    assert stored.keys() == reference.items.keys()
    for item_id, item in stored.items():
        assert item.content_hash == reference.items[item_id].content_hash
        np.testing.assert_allclose(
            item.vectors["description"], unit(reference.items[item_id].vectors["description"]), atol=1e-6
        )


def test_reopen_keeps_everything(tmp_path, items):
    reference = Reference()
    store = EdgeStore(tmp_path / "s", SCHEMA)
    for batch in (items(range(30)), items(range(5, 10), seed=1, version=1)):
        store.upsert(batch)
        reference.upsert(batch)
    assert store.delete(["item-0", "item-1"]) == 2
    reference.delete(["item-0", "item-1"])
    store.close()
    store.close()  # idempotent

    reopened = EdgeStore(tmp_path / "s", SCHEMA)
    try:
        assert_same_answers(reopened, reference)
        assert reopened.get(["item-6"])["item-6"].title == "title 6 v1"
    finally:
        reopened.close()


def test_open_store_without_url_is_embedded(tmp_path, items):
    store = open_store(Settings(data_dir=tmp_path, collection="things"), SCHEMA)
    try:
        assert isinstance(store, EdgeStore)
        store.upsert(items(range(2)))
    finally:
        store.close()
    assert json.loads((tmp_path / "things" / layout.SIDECAR).read_text())["identity"] == SCHEMA.identity


def test_an_item_read_with_its_vectors_has_those_a_search_ranks_it_by(tmp_path, items):
    """A query by id compares its item with candidates read from the in-memory copy, so the item's own vectors come
    from there too (not the engine's, which differ in the last bit): an item equals itself as a candidate."""
    store = EdgeStore(tmp_path / "s", SCHEMA)
    store.upsert(items(range(20)))
    store.upsert(items(range(3), seed=1, version=1))  # replaced: the copy holds the new version
    ids = [f"item-{n}" for n in range(20)]
    read = store.get([*ids, "nope"], with_vectors=True)
    assert read.keys() == set(ids)
    for item_id, item in read.items():
        found = store.search(item.vectors[SCHEMA.ann], 20)
        at = found.ids.index(item_id)
        for name, vector in item.vectors.items():
            assert vector.dtype == np.float32
            np.testing.assert_array_equal(vector, found.vectors[name][at])
    assert read["item-1"].content_hash == items(range(3), seed=1, version=1)[1].content_hash
    assert store.get(["item-1"])["item-1"].vectors == {}
    store.close()


def test_an_item_whose_point_key_another_item_holds_is_refused_and_nothing_is_lost(tmp_path, items, monkeypatch):
    """Keys are 64-bit hashes (layout.point_key): a shared one, forced here, would replace the other item."""
    store = EdgeStore(tmp_path / "s", SCHEMA, optimize_after_writes=0)
    try:
        first, second, third = items(range(3))
        store.upsert([first])
        shared = layout.point_key(first.id)
        monkeypatch.setattr(layout, "point_key", lambda item_id: shared)
        with pytest.raises(InvalidInputError, match="'item-1' shares a point key with the stored item 'item-0'"):
            store.upsert([second])
        with pytest.raises(InvalidInputError, match="items 'item-1' and 'item-2' share a point key"):
            store.upsert([second, third])
        store.upsert([replace(first, title="renamed")])  # the item that holds the key is replaced as ever
        assert store.count() == 1 and store.get([first.id])[first.id].title == "renamed"
    finally:
        store.close()
