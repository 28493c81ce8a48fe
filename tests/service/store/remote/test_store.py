"""The server store alone (store/remote/store.py): the settings open it on the collection they name with the traits
the service sized itself by before opening it, and a server that does not answer is an error that names it. What it
answers is held to the embedded store and to brute force by the congruence tests (test_congruence.py); its parts are
tested beside it: opening and outages (test_connection.py), candidate vectors (test_vectors.py), rollout aliases
(test_aliases.py)."""

from __future__ import annotations

import pytest
from qdrant_client.http.exceptions import ResponseHandlingException

from metricsearch.core.errors import StoreUnavailableError
from metricsearch.service.config import Settings
from metricsearch.service.store import RemoteStore, StoreTraits, open_store, store_traits
from tests.service.qdrant_rest import QdrantRest
from tests.service.store.conftest import SCHEMA


def test_the_settings_open_their_collection_with_the_traits_known_before_it_opens(tmp_path):
    """The service sizes its call threads and turns its answer cache off from store_traits, before any store opens."""
    with QdrantRest() as server:
        settings = Settings(qdrant_url=server.url, collection="things", qdrant_max_in_flight=3, bundle_dir=tmp_path)
        store = RemoteStore.from_settings(settings, SCHEMA)
        try:
            wanted = StoreTraits(cache_answers=False, call_threads=3, where=f"Qdrant at {server.url}")
            assert store.traits == store_traits(settings) == wanted, "other replicas write: no answer is cached"
            assert store.location == store.collection == "things"
            assert [c.name for c in server.local.get_collections().collections] == ["things"]
        finally:
            store.close()


def test_unreachable_server(local_store, monkeypatch):
    with pytest.raises(StoreUnavailableError, match=r"http://127\.0\.0\.1:9"):
        open_store(Settings(qdrant_url="http://127.0.0.1:9", qdrant_timeout_s=1), SCHEMA)

    def refused(*args, **kwargs):
        raise ResponseHandlingException(ConnectionRefusedError(111, "Connection refused"))

    monkeypatch.setattr(local_store._client, "collection_exists", refused)
    monkeypatch.setattr(local_store._client, "count", refused)
    assert local_store.readiness() is not None
    with pytest.raises(StoreUnavailableError, match="does not answer"):
        local_store.count()
