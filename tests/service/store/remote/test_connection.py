"""RemoteStore through a Qdrant outage: a service started while Qdrant is down opens its collection once the server
answers (no restart), reports unready meanwhile, and creates the collection with the configured cluster layout.

No Qdrant server binary can be had here (not on PyPI), so "down" is a port where nothing listens and, for recovery,
qdrant-client's local mode with its calls failing as a refused connection does, then answering again."""

from __future__ import annotations

import time

import numpy as np
import pytest
from qdrant_client import QdrantClient
from qdrant_client.http.exceptions import ResponseHandlingException

from metricsearch.core.errors import StoreUnavailableError
from metricsearch.service.config import Settings
from metricsearch.service.process import free_port
from metricsearch.service.store import RemoteStore, open_store
from metricsearch.service.store.remote.breaker import CircuitBreaker
from metricsearch.service.store.remote.collection import collection_layout
from tests.service.store.conftest import SCHEMA


def refused(*args, **kwargs):
    raise ResponseHandlingException(ConnectionRefusedError(111, "Connection refused"))


def test_cluster_layout_reaches_create_collection_only_when_set():
    assert collection_layout(None, None) == {}
    assert collection_layout(6, 2) == {"shard_number": 6, "replication_factor": 2}
    assert collection_layout(3, None) == {"shard_number": 3}


def test_settings_carry_the_cluster_layout(monkeypatch):
    monkeypatch.setenv("MS_QDRANT_SHARDS", "6")
    monkeypatch.setenv("MS_QDRANT_REPLICATION", "2")
    settings = Settings()
    assert (settings.qdrant_shards, settings.qdrant_replication) == (6, 2)
    monkeypatch.setenv("MS_QDRANT_SHARDS", "0")
    with pytest.raises(ValueError, match="qdrant_shards"):
        Settings()


def test_unreachable_server_is_waited_for_when_asked():
    url = f"http://127.0.0.1:{free_port()}"
    settings = Settings(qdrant_url=url, qdrant_timeout_s=1, qdrant_shards=6, qdrant_replication=2)
    with pytest.raises(StoreUnavailableError, match=url):
        open_store(settings, SCHEMA)

    store = open_store(settings, SCHEMA, wait_for_server=True)
    try:
        assert store.readiness() is not None
        for call in (store.count, lambda: store.get(["a"]), lambda: store.search(np.ones(8), 5)):
            with pytest.raises(StoreUnavailableError, match=f"{url} does not answer.*MS_QDRANT_URL"):
                call()
    finally:
        store.close()


def test_recovers_when_the_server_answers_again(tmp_path, items, monkeypatch):
    client = QdrantClient(path=str(tmp_path / "local"))
    monkeypatch.setattr(client, "collection_exists", refused)
    guard = CircuitBreaker("Qdrant", max_in_flight=4, failures=3, open_s=0.05)
    store = RemoteStore(client, "items", SCHEMA, shards=6, replication=2, wait_for_server=True, breaker=guard)
    try:
        assert store.readiness() is not None
        with pytest.raises(StoreUnavailableError, match="does not answer"):
            store.upsert(items(range(3)))
        assert not client.get_collections().collections, "nothing may be created while the server is down"

        monkeypatch.undo()  # Qdrant is back
        time.sleep(0.1)  # the breaker's next try
        assert store.readiness() is None
        store.upsert(items(range(5)))
        assert store.count() == 5
        assert store.search(items(range(1))[0].vectors[SCHEMA.ann], 1).ids == ["item-0"]
    finally:
        store.close()


def test_outage_after_start_then_recovery(local_store, items, monkeypatch):
    local_store.upsert(items(range(4)))
    monkeypatch.setattr(local_store._client, "count", refused)
    monkeypatch.setattr(local_store._client, "collection_exists", refused)
    assert local_store.readiness() is not None
    with pytest.raises(StoreUnavailableError):
        local_store.count()
    monkeypatch.undo()
    assert local_store.readiness() is None and local_store.count() == 4


def test_a_vanished_collection_is_an_error_state_until_it_is_back(tmp_path, items):
    """Qdrant came back without its data (e.g. new volumes): unready with what happened, never recreated empty; a
    restored collection is served again. A store opened where none exists yet (first start) creates it."""
    client = QdrantClient(path=str(tmp_path / "local"))
    guard = CircuitBreaker("Qdrant", max_in_flight=4, failures=3, open_s=0.05)
    store = RemoteStore(client, "items", SCHEMA, breaker=guard)
    try:
        store.upsert(items(range(4)))
        client.delete_collection("items")
        for _ in range(2):
            assert "vanished" in store.readiness()
            with pytest.raises(StoreUnavailableError, match=r"vanished.*snapshot restore"):
                store.upsert(items(range(2)))
        assert not client.collection_exists("items")

        RemoteStore(client, "items", SCHEMA).upsert(items(range(3)))  # the collection back, as a restore makes it
        time.sleep(0.1)  # the breaker's next try
        assert store.readiness() is None and store.count() == 3
    finally:
        store.close()
