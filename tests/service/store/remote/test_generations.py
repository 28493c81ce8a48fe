"""A server store's collections over model rollouts (store/remote/generations.py), over real REST calls
(tests/service/qdrant_rest.py): the next rollout's name, a commit that a restart follows, the bundle a collection
records served after a restart, and a retired store dropped. The rollout itself is tested end to end in
tests/service/test_rollout_server.py."""

from __future__ import annotations

from metricsearch.service.config import Settings
from metricsearch.service.store import RemoteStore, generations
from tests.service.qdrant_rest import QdrantRest
from tests.service.store.conftest import SCHEMA


def test_a_commit_is_served_after_a_restart_and_a_retired_store_dropped(tmp_path, items):
    with QdrantRest() as server:
        settings = Settings(qdrant_url=server.url, collection="items", bundle_dir=tmp_path)
        collections = generations(settings)
        assert collections.serving() == settings, "nothing swapped in: MS_BUNDLE_DIR"
        first = RemoteStore.connect(server.url, "items", SCHEMA)
        first.upsert(items(range(3)))
        assert collections.next_name() == "items.r1"
        new = settings.model_copy(update={"collection": "items.r1"})
        second = RemoteStore.connect(server.url, "items.r1", SCHEMA, bundle_dir=tmp_path)
        second.upsert(items(range(5)))
        collections.commit(new)
        first.close()
        collections.drop(first)  # the plain collection retired: the alias `items` names the new one
        reopened = RemoteStore.connect(server.url, "items", SCHEMA)
        try:
            assert reopened.collection == "items.r1" and reopened.count() == 5
            assert collections.next_name() == "items.r2"
            assert generations(settings).serving() == settings, "the recorded bundle is MS_BUNDLE_DIR"
        finally:
            reopened.close()
            second.close()
