"""qdrant-client's filter classes (store/remote/filters.py), sent as the server store sends them, over real REST calls
(tests/service/qdrant_rest.py parses each body with qdrant-client's REST models, so a filter that does not serialize
fails): on the payloads the server store writes, with values of every kind under one key, the filter `client_filter`
builds keeps exactly the items brute force keeps (true is not 1, 1 equals 1.0, "1" is neither), and leaves out the
excluded ids. The same values in the embedded engine: tests/service/store/edge/test_filters.py."""

from __future__ import annotations

import pytest
from qdrant_client import QdrantClient

from metricsearch.service.store import RemoteStore
from metricsearch.service.store.base import AnyOf, Range
from metricsearch.service.store.remote.filters import client_filter
from tests.service.qdrant_rest import QdrantRest
from tests.service.store.conftest import SCHEMA, matches
from tests.service.store.edge.test_exact import ASKED, MIXED, item

STORED = {f"i{n}": {"m": value} for n, value in enumerate(MIXED)}


@pytest.fixture(scope="module")
def client():
    """A client of a server the server store wrote STORED to (collection `items`)."""
    with QdrantRest() as server:
        store = RemoteStore.connect(server.url, "items", SCHEMA)
        store.upsert([item(int(i[1:]), meta, 0) for i, meta in STORED.items()])
        store.close()
        reader = QdrantClient(url=server.url, check_compatibility=False)
        yield reader
        reader.close()


def kept_by_server(client: QdrantClient, conditions, exclude_ids=()) -> set[str]:
    records, following = client.scroll(
        "items", scroll_filter=client_filter(conditions, exclude_ids), limit=1000, with_payload=["id"]
    )
    assert following is None
    return {record.payload["id"] for record in records}


def kept_by_brute_force(conditions, exclude_ids=()) -> set[str]:
    return {i for i, meta in STORED.items() if i not in exclude_ids and all(matches(meta, c) for c in conditions)}


@pytest.mark.parametrize("condition", ASKED, ids=repr)
def test_the_server_keeps_what_brute_force_keeps_for_every_kind_of_value(client, condition):
    assert kept_by_server(client, [condition]) == kept_by_brute_force([condition])


def test_every_condition_is_met_and_no_excluded_id_kept(client):
    assert kept_by_server(client, [], ["i0", "i3", "no-such-item"]) == set(STORED) - {"i0", "i3"}
    both = [AnyOf("m", (1, "x")), Range("m", gte=1)]
    assert kept_by_server(client, both) == kept_by_brute_force(both) == {"i2", "i3"}
    assert kept_by_server(client, both[:1], ["i2"]) == kept_by_brute_force(both[:1], ["i2"]) == {"i3", "i7", "i8"}
