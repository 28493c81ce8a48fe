"""MS_QDRANT_SHARDS and MS_QDRANT_REPLICATION reach Qdrant's create_collection when the service creates its
collection, and only then. qdrant-client's local mode accepts and ignores both (it has no cluster), so the client
here is a real local-mode client that records the arguments of each create_collection call before running it;
everything from the settings to that call is the service's own code (open_store, RemoteStore.connect)."""

from __future__ import annotations

from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from metricsearch.service.config import Settings
from metricsearch.service.store import open_store
from tests.service.store.conftest import SCHEMA

URL = "http://qdrant.test:6333"


class RecordingClient(QdrantClient):
    """Local mode on `path`, keeping the keyword arguments of every create_collection call."""

    def __init__(self, path: Path) -> None:
        super().__init__(path=str(path))
        self.created: list[dict] = []

    def create_collection(self, collection_name: str, **kwargs):
        self.created.append({"collection_name": collection_name, **kwargs})
        return super().create_collection(collection_name, **kwargs)


@pytest.fixture
def clients(tmp_path, monkeypatch) -> list[RecordingClient]:
    """Every client RemoteStore.connect makes, in order; each opens the same local storage folder."""
    made: list[RecordingClient] = []

    def connect(*, url: str, **_options) -> RecordingClient:
        assert url == URL
        made.append(RecordingClient(tmp_path / "qdrant"))
        return made[-1]

    monkeypatch.setattr("metricsearch.service.store.remote.store.QdrantClient", connect)
    return made


def _open(**layout: int):
    return open_store(Settings(qdrant_url=URL, collection="items", **layout), SCHEMA)


def test_configured_shards_and_replication_are_passed_to_create_collection(clients):
    store = _open(qdrant_shards=6, qdrant_replication=2)
    store.close()
    ((call,),) = [c.created for c in clients]
    assert call["collection_name"] == "items"
    assert (call["shard_number"], call["replication_factor"]) == (6, 2)
    assert set(call["vectors_config"]) == set(SCHEMA.sizes)


def test_unset_layout_leaves_qdrants_defaults(clients):
    _open(qdrant_shards=3).close()
    ((call,),) = [c.created for c in clients]
    assert call["shard_number"] == 3 and "replication_factor" not in call


def test_no_layout_passes_neither(clients):
    _open().close()
    ((call,),) = [c.created for c in clients]
    assert not {"shard_number", "replication_factor"} & set(call)


def test_an_existing_collection_is_not_recreated_with_another_layout(clients):
    _open(qdrant_shards=6, qdrant_replication=2).close()
    store = _open(qdrant_shards=2, qdrant_replication=1)
    try:
        assert store.readiness() is None
    finally:
        store.close()
    assert [len(c.created) for c in clients] == [1, 0], "the second start must use the collection it found"
