"""Indexer.index's writes: each chunk of items is encoded while the one before it is written, chunks are written in
order, and after a failure nothing more is written; what each write tells the answer cache it changed (embedded
store, tiny model)."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest

from metricsearch.core.bundle import load_bundle
from metricsearch.core.errors import StoreUnavailableError
from metricsearch.core.records import Item
from metricsearch.encoder import Encoder
from metricsearch.service.engine import ANN_VECTOR, Engine, vector_schema
from metricsearch.service.engine.indexer import changed_keys
from metricsearch.service.store import EdgeStore
from metricsearch.service.store.base import Equals

# batch_size 2 x 2 workers: chunks of 4 items, [0-3], [4-7], [8-9].
ITEMS = [Item(f"i{n}", f"item {n} title", f"description of item {n}" if n % 3 else "", {"n": n}) for n in range(10)]
CHUNKS = [[f"i{n}" for n in range(start, min(start + 4, 10))] for start in (0, 4, 8)]


@pytest.fixture
def indexer(tiny_bundle, tmp_path):
    loaded = load_bundle(tiny_bundle)
    store = EdgeStore(tmp_path / "store", vector_schema(loaded), optimize_after_writes=0)
    encoder = Encoder(loaded, intra_op_threads=1, bulk_workers=2)
    yield Engine(loaded.manifest, encoder, store, candidates_min=100, candidates_factor=10).indexer
    store.close()


def record_calls(indexer, monkeypatch, *, fail_write: int = -1, fail_encode: int = -1) -> list[tuple]:
    """(event, chunk's ids, monotonic time) for every encode and write, a write taking 0.2 s; the numbered call of
    each kind fails when asked."""
    events: list[tuple] = []
    lock = threading.Lock()
    encode, upsert = indexer.encode_items, indexer.store.upsert

    def log(event: str, ids: list[str]) -> int:
        with lock:
            events.append((event, ids, time.monotonic()))
            return sum(1 for e in events if e[0] == event) - 1

    def encoding(items, batch_size):
        if log("encode", [i.id for i in items]) == fail_encode:
            raise RuntimeError("the encoder failed")
        encoded = encode(items, batch_size)
        log("encoded", [i.id for i in items])
        return encoded

    def writing(records):
        if log("write", [r.id for r in records]) == fail_write:
            raise StoreUnavailableError("the store failed", 1)
        time.sleep(0.2)
        upsert(records)
        log("written", [r.id for r in records])

    monkeypatch.setattr(indexer, "encode_items", encoding)
    monkeypatch.setattr(indexer.store, "upsert", writing)
    return events


def test_next_chunk_is_encoded_while_the_last_is_written_in_order(indexer, monkeypatch):
    events = record_calls(indexer, monkeypatch)
    assert indexer.index(ITEMS, batch_size=2).indexed == len(ITEMS)
    assert [ids for e, ids, _ in events if e == "written"] == CHUNKS
    when = {(e, tuple(ids)): t for e, ids, t in events}
    for n in range(len(CHUNKS) - 1):  # chunk n+1's encoding starts after chunk n's, before chunk n is written
        assert when["encoded", tuple(CHUNKS[n])] <= when["encode", tuple(CHUNKS[n + 1])]
        assert when["encode", tuple(CHUNKS[n + 1])] < when["written", tuple(CHUNKS[n])]
    stored = indexer.store.get([i.id for i in ITEMS], with_vectors=True)
    assert sorted(stored) == sorted(i.id for i in ITEMS)
    assert all(np.isclose(np.linalg.norm(s.vectors[ANN_VECTOR]), 1, atol=1e-4) for s in stored.values())


@pytest.mark.parametrize(("kind", "error"), [("fail_encode", RuntimeError), ("fail_write", StoreUnavailableError)])
def test_after_a_failure_nothing_more_is_written(indexer, monkeypatch, kind, error):
    """The second chunk fails: the first is in the store (unacknowledged, as a failed upsert may leave part of its
    batch), the third is neither written nor, beyond the one chunk in flight, encoded."""
    events = record_calls(indexer, monkeypatch, **{kind: 1})
    with pytest.raises(error):
        indexer.index(ITEMS, batch_size=2)
    assert [ids for e, ids, _ in events if e == "written"] == CHUNKS[:1]
    assert sorted(indexer.store.get([i.id for i in ITEMS])) == CHUNKS[0]
    assert CHUNKS[2] not in [ids for e, ids, _ in events if e == "write"]
    if kind == "fail_encode":
        assert CHUNKS[2] not in [ids for e, ids, _ in events if e == "encode"]


class Told:
    """Records what the indexer tells the answer cache: each write of texts with its ids, each write of metadata
    alone with its items' changed keys, and each drop of everything."""

    def __init__(self) -> None:
        self.told: list[object] = []

    @contextmanager
    def writing(self, ids):
        self.told.append(("texts", None if ids is None else sorted(ids)))
        try:
            yield
        except BaseException:
            self.told.append("failed")
            raise

    def changed(self, metadata):
        self.told.append({item_id: set(keys) for item_id, keys in metadata.items()})

    def clear(self):
        self.told.append("everything")


def test_each_write_tells_the_answer_cache_its_items_texts_or_metadata(indexer, monkeypatch):
    """A write that rewrote only metadata (the texts, hence vectors and terms, as they were) names each item's changed
    keys; a new item, a new text and a delete name their ids around the write; a delete by filter names none."""
    told = Told()
    monkeypatch.setattr(indexer, "answers", told)
    indexer.index(ITEMS[:3])
    moved = [Item(i.id, i.title, i.description, {"n": i.metadata["n"], "stock": 1}) for i in ITEMS[:2]]
    indexer.index([*moved, ITEMS[2]])  # the third unchanged: no write of it
    indexer.index([Item("i0", "item 0 new title", "", {"n": 5})])  # a new text, and new metadata
    indexer.index(moved[1:])  # written as it is stored: nothing to tell
    indexer.delete("i1")
    indexer.delete_where([Equals("n", 2)])
    assert told.told == [
        ("texts", ["i0", "i1", "i2"]),
        {"i0": {"stock"}, "i1": {"stock"}},
        ("texts", ["i0"]),
        ("texts", ["i1"]),
        ("texts", None),
    ]


def test_a_failed_write_drops_every_answer(indexer, monkeypatch):
    """A failed upsert may have written some points, of which nothing is known."""
    indexer.index(ITEMS[:1])
    told = Told()
    monkeypatch.setattr(indexer, "answers", told)

    def failing(records):
        raise StoreUnavailableError("the store failed", 1)

    monkeypatch.setattr(indexer.store, "upsert", failing)
    with pytest.raises(StoreUnavailableError):
        indexer.index([Item("i0", ITEMS[0].title, ITEMS[0].description, {"n": 1})])  # metadata alone
    with pytest.raises(StoreUnavailableError):
        indexer.index([Item("i0", "a new title", "", {"n": 1})])  # a new text
    assert told.told == ["everything", ("texts", ["i0"]), "failed"]


def test_changed_keys_compare_values_as_stored():
    assert changed_keys({"a": 1, "b": [1, 2], "c": "x"}, {"a": 1, "b": [1, 2], "c": "x"}) == frozenset()
    assert changed_keys({"a": 1, "b": True}, {"a": 1.0, "b": 1}) == {"a", "b"}  # types count, as the store keeps them
    assert changed_keys({"gone": 1, "kept": {"x": 1}}, {"kept": {"x": 2}, "new": None}) == {"gone", "kept", "new"}
