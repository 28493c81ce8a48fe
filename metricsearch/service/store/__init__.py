"""The only package that talks to Qdrant: `open_store` picks the embedded shard or a Qdrant server from settings."""

from __future__ import annotations

from metricsearch.service.config import Settings
from metricsearch.service.store.base import Store, VectorSchema
from metricsearch.service.store.edge import EdgeStore
from metricsearch.service.store.remote import RemoteStore

__all__ = ["EdgeStore", "RemoteStore", "Store", "open_store"]


def open_store(settings: Settings, schema: VectorSchema, *, wait_for_server: bool = False) -> Store:
    """The embedded store under `data_dir/collection` when no `qdrant_url` is set, else the server's collection.

    A server that does not answer raises StoreUnavailableError, unless `wait_for_server` (the service: it starts
    unready and opens the collection once Qdrant answers)."""
    if settings.qdrant_url is None:
        return EdgeStore(
            settings.data_dir / settings.collection,
            schema,
            optimize_after_writes=settings.optimize_after_writes,
            sync_writes=settings.sync_writes,
        )
    api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
    return RemoteStore.connect(
        settings.qdrant_url,
        settings.collection,
        schema,
        api_key=api_key,
        timeout_s=settings.qdrant_timeout_s,
        shards=settings.qdrant_shards,
        replication=settings.qdrant_replication,
        wait_for_server=wait_for_server,
    )
