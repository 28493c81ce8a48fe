"""The served name's collections on a Qdrant server as a model rollout moves them (remote/aliases.py), over
real REST calls (tests/service/qdrant_rest.py): the store opens what the aliases name (`.next` first), a swap
away from the plain collection goes through `.next` and is finished by deleting the plain one, later swaps move the
alias `items`, and a collection behind the alias that vanishes is not created again."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from metricsearch.core.errors import StoreMismatchError, StoreUnavailableError
from metricsearch.service.config import Settings
from metricsearch.service.store import RemoteStore
from metricsearch.service.store.remote.aliases import Aliases
from metricsearch.service.store.remote.breaker import CircuitBreaker
from tests.service.qdrant_rest import QdrantRest
from tests.service.store.conftest import SCHEMA


def layout(server: QdrantRest) -> tuple[set[str], dict[str, str]]:
    collections = {c.name for c in server.local.get_collections().collections}
    return collections, {a.alias_name: a.collection_name for a in server.local.get_aliases().aliases}


def stored_ids(url: str, name: str) -> set[str]:
    store = RemoteStore.connect(url, name, SCHEMA)
    try:
        page, _ = store.scroll(None, 100)
        return {item.id for item in page}
    finally:
        store.close()


def filled(url: str, name: str, items) -> None:
    store = RemoteStore.connect(url, name, SCHEMA)
    try:
        store.upsert(items)
    finally:
        store.close()


def test_swaps_from_the_plain_collection_then_behind_the_alias(items):
    with QdrantRest() as server:
        settings = Settings(qdrant_url=server.url, collection="items")
        filled(server.url, "items", items(range(3)))  # a first start: the plain collection, no alias
        assert layout(server) == ({"items"}, {})
        filled(server.url, "items.r1", items(range(5)))  # a rollout's collection, by its own name
        assert layout(server) == ({"items", "items.r1"}, {})
        with Aliases(settings) as generations:
            assert generations.served() == "items"
            assert sorted(generations.names()) == ["items", "items.r1"]
            generations.point("items.r1")  # Qdrant allows no alias named like a collection: `.next` first
            assert layout(server) == ({"items", "items.r1"}, {"items.next": "items.r1"})
            assert generations.served() == "items.r1"
            assert len(stored_ids(server.url, "items")) == 5  # a store opening the name follows `.next`
            generations.drop("items")  # the plain collection retired: the alias `items` takes over
            assert layout(server) == ({"items.r1"}, {"items": "items.r1"})
            assert len(stored_ids(server.url, "items")) == 5

            filled(server.url, "items.r2", items(range(7)))
            generations.point("items.r2")
            assert layout(server) == ({"items.r1", "items.r2"}, {"items": "items.r2"})
            filled(server.url, "items.r3", items(range(1)))  # a rollout's collection a crash left
            generations.remove_leftovers()
            assert layout(server) == ({"items.r2"}, {"items": "items.r2"})
            assert len(stored_ids(server.url, "items")) == 7


def test_a_start_finishes_a_first_swap_a_crash_interrupted(items):
    """Killed after `.next` was pointed and before the plain collection was deleted: the leftovers step finishes."""
    with QdrantRest() as server:
        filled(server.url, "items", items(range(3)))
        filled(server.url, "items.r1", items(range(4)))
        filled(server.url, "items.r2", items(range(1)))  # and the collection of a later rollout, unfinished
        with Aliases(Settings(qdrant_url=server.url, collection="items")) as generations:
            generations.point("items.r1")
            generations.remove_leftovers()
        assert layout(server) == ({"items.r1"}, {"items": "items.r1"})


def test_a_collection_of_another_bundle_behind_the_alias_names_the_fix(items):
    """What a replica that did not run the rollout meets when it opens the name after the swap with its old bundle."""
    with QdrantRest() as server:
        filled(server.url, "items", items(range(3)))
        store = RemoteStore.connect(server.url, "items.r1", replace(SCHEMA, identity="other-bundle@2"))
        store.close()
        with Aliases(Settings(qdrant_url=server.url, collection="items")) as generations:
            generations.point("items.r1")
        with pytest.raises(StoreMismatchError, match=r"'items.r1'.*other-bundle@2.*swapped it in as 'items'"):
            RemoteStore.connect(server.url, "items", SCHEMA)
        with pytest.raises(StoreMismatchError, match="Set MS_COLLECTION"):
            RemoteStore.connect(server.url, "items.r1", SCHEMA)


def test_a_collection_behind_the_alias_that_vanishes_is_not_created_again(items):
    with QdrantRest() as server:
        filled(server.url, "items", items(range(3)))
        filled(server.url, "items.r1", items(range(4)))
        with Aliases(Settings(qdrant_url=server.url, collection="items")) as generations:
            generations.point("items.r1")
            generations.drop("items")
        guard = CircuitBreaker("Qdrant", max_in_flight=4, failures=3, open_s=0.05)
        store = RemoteStore.connect(server.url, "items", SCHEMA, breaker=guard)
        try:
            assert store.collection == "items.r1" and store.count() == 4
            server.local.delete_collection("items.r1")  # its alias goes with it
            assert "vanished" in store.readiness()
            with pytest.raises(StoreUnavailableError, match="vanished"):
                store.upsert(items(range(2)))
            assert layout(server) == (set(), {})

            filled(server.url, "items", items(range(2)))  # back, as a restore makes it (a plain collection)
            time.sleep(0.1)  # the breaker's next try
            assert store.readiness() is None and store.collection == "items" and store.count() == 2
        finally:
            store.close()
