"""The only package that talks to Qdrant: `store_type` picks the embedded shard or a Qdrant server from settings,
and every class-level operation (open, snapshot create and restore) goes through the class it picks."""

from __future__ import annotations

from collections.abc import Callable

from metricsearch.service.config import Settings
from metricsearch.service.store.base import Store, VectorSchema
from metricsearch.service.store.edge import EdgeStore
from metricsearch.service.store.remote import RemoteStore

__all__ = ["EdgeStore", "RemoteStore", "Store", "open_store", "store_type"]


def store_type(settings: Settings) -> type[Store]:
    """The embedded store under `data_dir/collection` when no `qdrant_url` is set, else the server's collection:
    the one place that tells them apart."""
    return EdgeStore if settings.qdrant_url is None else RemoteStore


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
