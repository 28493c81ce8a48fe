"""The only package that talks to Qdrant, and the one place that tells the engines apart (`qdrant_url` set or not):
`store_type` picks the embedded shard or a Qdrant server, and every class-level operation (open, snapshot create and
restore) goes through the class it picks; `generations` gives what a model rollout asks of that engine."""

from __future__ import annotations

from collections.abc import Callable

from metricsearch.service.config import Settings
from metricsearch.service.store.base import Generations, Store, StoreTraits, VectorSchema
from metricsearch.service.store.edge import EdgeStore
from metricsearch.service.store.edge.generations import Folders
from metricsearch.service.store.remote import RemoteStore, server_traits
from metricsearch.service.store.remote.generations import Collections

__all__ = [
    "EdgeStore",
    "Generations",
    "RemoteStore",
    "Store",
    "StoreTraits",
    "generations",
    "open_store",
    "store_traits",
    "store_type",
]


def store_type(settings: Settings) -> type[Store]:
    """The embedded store under `data_dir/collection` when no `qdrant_url` is set, else the server's collection."""
    return EdgeStore if settings.qdrant_url is None else RemoteStore


def store_traits(settings: Settings) -> StoreTraits:
    """The traits of the store the settings name (Store.traits), known without opening it."""
    if settings.qdrant_url is None:
        return EdgeStore.traits
    return server_traits(f"Qdrant at {settings.qdrant_url}", settings.qdrant_max_in_flight)


def generations(settings: Settings) -> Generations:
    """The stores of the collection the settings name, as model rollouts add and retire them."""
    return Folders(settings) if settings.qdrant_url is None else Collections(settings)


def open_store(
    settings: Settings,
    schema: VectorSchema,
    *,
    wait_for_server: bool = False,
    on_auto_index: Callable[[str], None] | None = None,
) -> Store:
    """A server that does not answer raises StoreUnavailableError, unless `wait_for_server` (the service: it starts
    unready and opens the collection once Qdrant answers); `on_auto_index`: Store.from_settings."""
    return store_type(settings).from_settings(
        settings, schema, wait_for_server=wait_for_server, on_auto_index=on_auto_index
    )
