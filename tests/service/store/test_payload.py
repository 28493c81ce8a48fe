"""Payload indexes from MS_INDEXED_FIELDS (store/payload.py `sync_indexes`): both stores create them on the metadata
paths filters use, keep them across restarts, rebuild one whose type changed and drop one no longer declared; the
embedded one keeps them through an HNSW build; filters answer the same with and without them. The server store is
checked over real REST calls (tests/service/qdrant_rest.py keeps the indexes, which qdrant-client's local mode
ignores)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from qdrant_client import QdrantClient
from qdrant_edge import EdgeShard

from metricsearch.service.config import Settings
from metricsearch.service.store import EdgeStore, RemoteStore, open_store
from metricsearch.service.store.edge import metadata_index
from tests.service.qdrant_rest import QdrantRest
from tests.service.store.conftest import SCHEMA, Reference
from tests.service.store.test_congruence import SEARCHES, populate, query_vector

DECLARED = {"color": "keyword", "price": "float", "new": "bool"}
PATHS = {"metadata.color": "keyword", "metadata.price": "float", "metadata.new": "bool"}


def edge_indexes(path) -> dict[str, str]:
    """The payload indexes of the store's live shard, read by the engine itself after the store closed."""
    (shard_dir,) = path.glob("shard-*")
    shard = EdgeShard.load(str(shard_dir))
    try:
        return {p: str(i.data_type).rsplit(".", 1)[-1].lower() for p, i in shard.info().payload_schema.items()}
    finally:
        shard.close()


def built(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "payload index" in r.getMessage()]


def test_embedded_store_keeps_the_declared_indexes(tmp_path, items, caplog):
    caplog.set_level(logging.INFO)
    path = tmp_path / "edge"
    store = EdgeStore(path, SCHEMA, optimize_after_writes=0, indexed_fields=DECLARED)
    store.upsert(items(range(20)))
    store.close()
    assert edge_indexes(path) == {"id": "keyword", **PATHS}
    assert len(built(caplog)) == 3

    caplog.clear()
    EdgeStore(path, SCHEMA, optimize_after_writes=0, indexed_fields=DECLARED).close()
    assert built(caplog) == [], "a restart with the same declaration keeps every index"

    EdgeStore(path, SCHEMA, optimize_after_writes=0, indexed_fields={**DECLARED, "price": "keyword"}).close()
    assert edge_indexes(path)["metadata.price"] == "keyword"
    assert any("dropped the 'float' payload index on metadata.price (declared 'keyword')" in m for m in built(caplog))

    EdgeStore(path, SCHEMA, optimize_after_writes=0).close()  # snapshot commands: no declaration, nothing changes
    assert edge_indexes(path)["metadata.price"] == "keyword"

    EdgeStore(path, SCHEMA, optimize_after_writes=0, indexed_fields={"new": "bool"}).close()
    assert edge_indexes(path) == {"id": "keyword", "metadata.new": "bool"}


def test_embedded_indexes_survive_an_hnsw_build(tmp_path, items):
    path = tmp_path / "edge"
    store = EdgeStore(path, SCHEMA, optimize_after_writes=0, indexing_threshold_kb=1, indexed_fields=DECLARED)
    store.upsert(items(range(300)))
    store.optimize_now()
    assert store.wait_for_maintenance(60) and store.has_hnsw
    store.close()
    assert edge_indexes(path) == {"id": "keyword", **PATHS}


def test_embedded_store_from_settings_uses_ms_indexed_fields(tmp_path, monkeypatch):
    monkeypatch.setenv("MS_INDEXED_FIELDS", "color:keyword, price:float")
    open_store(Settings(data_dir=tmp_path), SCHEMA).close()
    assert edge_indexes(tmp_path / "items") == {
        "id": "keyword",
        "metadata.color": "keyword",
        "metadata.price": "float",
    }


def test_server_store_keeps_the_declared_indexes(items):
    with QdrantRest() as server:
        store = RemoteStore.connect(server.url, "items", SCHEMA, indexed_fields=DECLARED)
        store.upsert(items(range(5)))
        store.close()
        assert server.indexes["items"] == {"id": "keyword", **PATHS}

        calls = server.index_calls
        RemoteStore.connect(server.url, "items", SCHEMA, indexed_fields=DECLARED).close()
        assert server.index_calls == calls, "a restart with the same declaration sends no index call"

        RemoteStore.connect(server.url, "items", SCHEMA, indexed_fields={**DECLARED, "new": "keyword"}).close()
        assert server.indexes["items"]["metadata.new"] == "keyword"

        RemoteStore.connect(server.url, "items", SCHEMA).close()
        assert server.indexes["items"]["metadata.new"] == "keyword"

        RemoteStore.connect(server.url, "items", SCHEMA, indexed_fields={"color": "keyword"}).close()
        assert server.indexes["items"] == {"id": "keyword", "metadata.color": "keyword"}


def test_server_store_from_settings_uses_ms_indexed_fields(monkeypatch):
    with QdrantRest() as server:
        monkeypatch.setenv("MS_INDEXED_FIELDS", "new:bool")
        open_store(Settings(qdrant_url=server.url), SCHEMA).close()
        assert server.indexes["items"] == {"id": "keyword", "metadata.new": "bool"}


EVERY_KEY = {"color": "keyword", "tags": "keyword", "price": "float", "year": "float", "size": "float", "new": "bool"}


def _store_pair(kind: str, tmp_path):
    """The same kind of store twice: without payload indexes and with one on every metadata key filters use."""
    if kind.startswith("edge"):
        return [
            EdgeStore(tmp_path / name, SCHEMA, optimize_after_writes=0, indexed_fields=fields)
            for name, fields in (("plain", {}), ("indexed", EVERY_KEY))
        ]
    return [
        RemoteStore(QdrantClient(path=str(tmp_path / name)), "items", SCHEMA, indexed_fields=fields)
        for name, fields in (("plain", {}), ("indexed", EVERY_KEY))
    ]


@pytest.mark.parametrize("kind", ["edge", "edge-arrays", "remote-local"])
def test_filter_results_are_the_same_with_and_without_indexes(kind, tmp_path, items, monkeypatch):
    """Keyword, number (int and float stored alike), range, bool and `in` filters: the indexed store answers exactly
    as the unindexed one and as brute force. The embedded store answers the filters no index serves from its
    metadata index (store/edge/exact.py): `edge` with each key's values in a dict, `edge-arrays` in arrays over the
    rows. (qdrant-client's local mode ignores indexes: there this checks only that declaring them changes no answer.)"""
    if kind == "edge-arrays":
        monkeypatch.setattr(metadata_index, "DENSE_MIN", 1)
    plain, indexed = _store_pair(kind, tmp_path)
    try:
        reference = Reference()
        populate(plain, Reference(), items)
        populate(indexed, reference, items)
        for name, (conditions, exclude) in SEARCHES.items():
            for seed, limit in ((0, 10), (2, 1000)):
                vector = query_vector(seed)
                expected_ids, expected_scores = reference.search(vector, limit, conditions, exclude)
                with_index = indexed.search(vector, limit, conditions, exclude)
                without = plain.search(vector, limit, conditions, exclude)
                assert with_index.ids == without.ids == expected_ids, name
                np.testing.assert_allclose(with_index.scores, expected_scores, atol=1e-5)
            if conditions:
                assert plain.delete_where(conditions) == indexed.delete_where(conditions), name
                populate(plain, Reference(), items)
                populate(indexed, Reference(), items)
    finally:
        plain.close()
        indexed.close()
