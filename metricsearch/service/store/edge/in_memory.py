"""The in-memory copies the embedded store keeps beside its shard, each point at one row: its vectors and listing
(VectorRows), its sparse terms (TermRows) and its metadata (MetadataIndex). The store changes them with each write,
under the lock of the shard's update, so a search reads one version of every item. They cannot go stale: one
process owns the shard, and every write passes through it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from qdrant_edge import EdgeShard, ScrollRequest

from metricsearch.service.store.base import Listing, StoredItem, VectorSchema
from metricsearch.service.store.edge.metadata_index import MetadataIndex
from metricsearch.service.store.edge.term_rows import TermRows
from metricsearch.service.store.edge.vector_rows import VectorRows
from metricsearch.service.store.payload import listing


class InMemoryCopy:
    def __init__(self, schema: VectorSchema) -> None:
        self.vectors: VectorRows[Listing] = VectorRows(schema.sizes)
        self.terms = TermRows(schema.sparse)
        self.metadata = MetadataIndex()
        self._schema = schema

    def put(self, keys: Sequence[int], items: Sequence[StoredItem]) -> None:
        """Insert or replace the items at points `keys`; the metadata index loses the replaced items' metadata and
        counts each point's last item once (an id given twice is one point)."""
        vectors = {name: np.asarray([it.vectors[name] for it in items], np.float32) for name in self._schema.sizes}
        listings = [Listing(it.id, it.title, it.metadata) for it in items]
        latest = dict(zip(keys, items, strict=True))
        replaced = list(latest)
        self.metadata.remove(self.vectors.rows(replaced), [e.metadata for e in self.vectors.entries(replaced)])
        self.vectors.put(keys, listings, vectors)
        rows = self.vectors.rows(replaced)
        self.metadata.add(rows, [it.metadata for it in latest.values()])
        self.terms.put(rows, [it.sparse for it in latest.values()])

    def forget(self, keys: Sequence[int]) -> None:
        """Deleted points leave every copy."""
        rows = self.vectors.rows(keys)
        self.metadata.remove(rows, [entry.metadata for entry in self.vectors.entries(keys)])
        self.terms.remove(rows)
        self.vectors.remove(keys)

    def load(self, shard: EdgeShard) -> None:
        """Read every point's vectors, terms and listing once at open: 19-23 s for 100k points of the default bundle
        (768 floats and up to three sparse vectors each) on 2 cores, where reading each record's `vector` seven
        times (once for the dense vector, twice per sparse one) took 30-31 s."""
        sizes, sparse = self._schema.sizes, self._schema.sparse
        offset = None
        while True:
            records, offset = shard.scroll(
                ScrollRequest(
                    offset=offset, limit=2048, with_payload=["id", "title", "metadata"], with_vector=[*sizes, *sparse]
                )
            )
            if records:
                points = [r.id for r in records]
                stored = [r.vector for r in records]  # read once: each read converts every vector of the point anew
                vectors = {name: np.array([v[name] for v in stored], dtype=np.float32) for name in sizes}
                listings = [listing(r.payload) for r in records]
                self.vectors.put(points, listings, vectors)
                rows = self.vectors.rows(points)
                self.terms.put(rows, [{n: v[n] for n in sparse if n in v} for v in stored])
                self.metadata.add(rows, [entry.metadata for entry in listings])
            if offset is None:
                return
