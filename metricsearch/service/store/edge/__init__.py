"""The embedded store: one qdrant-edge shard on local disk, owned by this process (store.py and its parts)."""

from metricsearch.service.store.edge.store import EdgeStore

__all__ = ["EdgeStore"]
