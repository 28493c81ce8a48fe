"""Candidates' vectors for a server store's search: the rerank needs every candidate's vectors, which as JSON cost
more than the search (with a second-order bundle, tens of thousands of floats per candidate). They come from a
byte-bounded cache keyed by (point, content hash), and only the points it lacks are read with their vectors, in one
more call: a warm service moves no vectors as JSON."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from qdrant_client import models as qm

from metricsearch.service.cache import VectorCache

LISTED = ["id", "title", "metadata", "content_hash"]
"""What a search reads of each candidate's payload: its listing and the hash that keys its vectors."""


@dataclass(frozen=True)
class _Hit:
    """A scored point with its vectors from the cache or a read of its own (payload.search_result's Hit)."""

    id: Any
    score: float
    payload: Any
    vector: Mapping[str, np.ndarray]


class CandidateVectors:
    def __init__(self, cache_mb: float, sizes: Mapping[str, int]) -> None:
        self._cache = VectorCache(int(cache_mb * 2**20))
        self._sizes = sizes

    @property
    def enabled(self) -> bool:
        """Without the cache, a search reads each hit's vectors with its payload, in one call."""
        return self._cache.enabled

    def with_vectors(
        self, collection: str, hits: Sequence[qm.ScoredPoint], read: Callable[[list[Any]], list[qm.Record]]
    ) -> list[_Hit]:
        """The hits with their vectors, from the cache or, for the points it lacks, read in one call (`read(ids)`,
        their LISTED payload and vectors): a point updated meanwhile comes back as it is now (payload and vectors
        together), a point deleted meanwhile not at all."""
        found: dict[str, _Hit] = {}
        for hit in hits:
            content_hash = (hit.payload or {}).get("content_hash")
            vectors = self._cache.get(collection, str(hit.id), content_hash) if content_hash else None
            if vectors is not None:
                found[str(hit.id)] = _Hit(hit.id, hit.score, hit.payload, vectors)
        missing = [hit.id for hit in hits if str(hit.id) not in found]
        if missing:
            score = {str(hit.id): hit.score for hit in hits}
            for record in read(missing):
                named = record.vector if isinstance(record.vector, Mapping) else {}
                vectors = {name: np.asarray(named[name], dtype=np.float32) for name in self._sizes}
                payload = record.payload or {}
                self._cache.put(collection, str(record.id), payload.get("content_hash", ""), vectors)
                found[str(record.id)] = _Hit(record.id, score[str(record.id)], payload, vectors)
        return [found[str(hit.id)] for hit in hits if str(hit.id) in found]
