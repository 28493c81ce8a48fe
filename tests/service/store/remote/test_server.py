"""The client the server store's rollout and snapshot calls use (store/remote/server.py): it reaches the server the
settings name, also with a sub-second MS_QDRANT_TIMEOUT_S (qdrant-client takes whole seconds, and a timeout of 0
fails every call)."""

from __future__ import annotations

from qdrant_client import models as qm

from metricsearch.service.config import Settings
from metricsearch.service.store.remote.server import client
from tests.service.qdrant_rest import QdrantRest


def test_a_client_for_the_settings_reaches_their_server_with_a_sub_second_timeout():
    with QdrantRest() as server:
        server.local.create_collection("items", vectors_config=qm.VectorParams(size=2, distance=qm.Distance.COSINE))
        settings = Settings(qdrant_url=server.url, qdrant_timeout_s=0.3)
        reached = client(settings, settings.qdrant_timeout_s)
        try:
            assert [c.name for c in reached.get_collections().collections] == ["items"]
        finally:
            reached.close()
