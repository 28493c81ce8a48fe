"""The server store: a collection on a Qdrant server or cluster (store.py and its parts)."""

from metricsearch.service.store.remote.collection import METADATA_KEY, collection_layout
from metricsearch.service.store.remote.store import RemoteStore, server_traits

__all__ = ["METADATA_KEY", "RemoteStore", "collection_layout", "server_traits"]
