"""The server store's candidate vectors (store/remote/vectors.py): a warm search reads no vectors from Qdrant, an
item another replica updated is read again (its content hash changed), a point deleted between the search and the
read of its vectors is dropped, and answers equal those read with the vectors in one call (the cache off)."""

from __future__ import annotations

import numpy as np
from qdrant_client import QdrantClient

from metricsearch.service.store import RemoteStore
from tests.service.store.conftest import SCHEMA, Reference, unit


class RecordingClient(QdrantClient):
    """A real local-mode client that records what each search and retrieve asked for."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, object]] = []
        self.before_retrieve = lambda: None

    def query_points(self, *args, **kwargs):
        self.calls.append(("query_points", kwargs.get("with_vectors")))
        return super().query_points(*args, **kwargs)

    def retrieve(self, *args, **kwargs):
        hook, self.before_retrieve = self.before_retrieve, lambda: None  # once: the hook may retrieve itself
        hook()
        self.calls.append(("retrieve", tuple(kwargs.get("ids") or ())))
        return super().retrieve(*args, **kwargs)


def query(seed: int) -> np.ndarray:
    return np.random.default_rng(100 + seed).normal(size=SCHEMA.sizes[SCHEMA.ann]).astype(np.float32)


def assert_vectors(result, reference: Reference) -> None:
    for name in SCHEMA.sizes:
        expected = np.array([unit(reference.items[i].vectors[name]) for i in result.ids])
        np.testing.assert_allclose(result.vectors[name], expected, atol=1e-5)


def test_a_warm_search_reads_no_vectors_and_updates_are_read_again(tmp_path, items):
    client = RecordingClient(path=str(tmp_path / "local"))
    store = RemoteStore(client, "items", SCHEMA)
    writer = RemoteStore(client, "items", SCHEMA)  # another replica on the same collection
    reference = Reference()
    store.upsert(items(range(30)))
    reference.upsert(items(range(30)))

    first = store.search(query(0), 10)
    assert [c for c in client.calls if c[0] == "query_points"] == [("query_points", False)]
    assert sorted(next(ids for name, ids in client.calls if name == "retrieve")) == sorted(first.points)
    assert_vectors(first, reference)

    client.calls.clear()
    again = store.search(query(0), 10)
    assert client.calls == [("query_points", False)], "a warm search read vectors"
    assert again.ids == first.ids
    np.testing.assert_array_equal(again.vectors[SCHEMA.ann], first.vectors[SCHEMA.ann])

    updated = items(range(0, 30, 3), seed=5, version=1)  # new texts (hash) and vectors
    writer.upsert(updated)
    reference.upsert(updated)
    client.calls.clear()
    fresh = store.search(query(0), 10)
    expected, _ = reference.search(query(0), 10)
    assert fresh.ids == expected
    assert_vectors(fresh, reference)
    read_again = {p for name, ids in client.calls if name == "retrieve" for p in ids}
    changed = {p for p, i in zip(fresh.points, fresh.ids, strict=True) if i in {u.id for u in updated}}
    assert read_again == changed
    store.close()


def test_a_point_deleted_before_its_vectors_are_read_is_dropped(tmp_path, items):
    client = RecordingClient(path=str(tmp_path / "local"))
    store = RemoteStore(client, "items", SCHEMA)
    store.upsert(items(range(20)))
    top = store.search(query(1), 5)
    cold = RemoteStore(client, "items", SCHEMA)  # an empty cache: every hit's vectors are read
    client.before_retrieve = lambda: store.delete([top.ids[0]])
    result = cold.search(query(1), 5)
    assert result.ids == top.ids[1:]
    assert all(len(m) == 4 for m in result.vectors.values())
    store.close()


def test_answers_equal_those_read_without_the_cache(tmp_path, items):
    client = QdrantClient(path=str(tmp_path / "local"))
    cached = RemoteStore(client, "items", SCHEMA)
    uncached = RemoteStore(client, "items", SCHEMA, vector_cache_mb=0)
    cached.upsert(items(range(40)))
    for seed in range(4):
        for _ in range(2):  # cold, then warm
            a, b = cached.search(query(seed), 12), uncached.search(query(seed), 12)
            assert (a.ids, a.points, [x.title for x in a.listings]) == (b.ids, b.points, [x.title for x in b.listings])
            np.testing.assert_allclose(a.scores, b.scores, atol=1e-6)  # local mode: 1 ulp apart
            for name in SCHEMA.sizes:
                np.testing.assert_allclose(a.vectors[name], b.vectors[name], atol=1e-7)
    cached.close()
