"""The Store on an embedded qdrant-edge shard on local disk, owned by this process (its WAL is the lock). Its parts:
the live shard and the order of writes (writes.py), the background HNSW build (build.py), the files (layout.py),
snapshots (snapshot.py), the in-memory copies searches read (in_memory.py) and how a search is answered
(planner.py)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
from qdrant_edge import CountRequest, Filter, IsEmptyCondition, Point, ScrollRequest, SearchParams, UpdateOperation
from qdrant_edge import SparseVector as EdgeSparseVector

from metricsearch.core.errors import InvalidInputError, StoreUnavailableError
from metricsearch.core.lexical import SparseVector
from metricsearch.service.config import Settings
from metricsearch.service.store import base
from metricsearch.service.store.auto_index import AutoIndex
from metricsearch.service.store.base import (
    Condition,
    SearchResult,
    SnapshotReport,
    StoredItem,
    StoreTraits,
    VectorSchema,
)
from metricsearch.service.store.edge import exact, layout, planner, snapshot
from metricsearch.service.store.edge.build import HnswBuild
from metricsearch.service.store.edge.filters import edge_filter
from metricsearch.service.store.edge.in_memory import InMemoryCopy
from metricsearch.service.store.edge.writes import LiveShard
from metricsearch.service.store.payload import (
    from_payload,
    metadata_indexes,
    metadata_path,
    sparse_lists,
    stored_kinds,
    sync_indexes,
    to_payload,
    vector_lists,
)

logger = logging.getLogger(__name__)


class EdgeStore:
    """The Store on an embedded qdrant-edge shard at `path`.

    `optimize_after_writes`: points written since the last build that start a background HNSW build (0 = never);
    `indexing_threshold_kb`: the engine's indexing threshold (MS_INDEXING_THRESHOLD_KB), lowered in tests to get HNSW
    from a few points;
    `sync_writes`: fsync before a write returns (writes.py); `indexed_fields`: the metadata keys to keep payload
    indexes on, {key: type} (payload.sync_indexes), None to leave the store's indexes as they are (snapshot
    commands); `auto_index_max`: with `indexed_fields`, learn up to this many more from filters and keep those
    learned before (auto_index.py; None: off, undeclared indexes are dropped)."""

    traits = StoreTraits(cache_answers=True, call_threads=None, where="the embedded store", one_process=True)
    """Only this process writes the shard (its WAL is the lock), and a call holds the GIL throughout (about 2 ms):
    run inline."""
    lexical_in_process = True  # lexical_scores: the term rows (term_rows.py)

    def __init__(
        self,
        path: Path,
        schema: VectorSchema,
        *,
        optimize_after_writes: int = 5000,
        indexing_threshold_kb: int | None = None,
        checkpoint_interval_s: float = 60.0,
        sync_writes: bool = False,
        indexed_fields: Mapping[str, str] | None = None,
        auto_index_max: int | None = None,
        on_auto_index: Callable[[str], None] | None = None,
    ) -> None:
        self._path = Path(path)
        self._schema = schema
        config = layout.engine_config(schema, indexing_threshold_kb)
        try:
            generation, store_format = layout.live_generation(self._path, schema)
            if store_format < layout.FORMAT:
                generation = layout.upgrade(self._path, generation, config, schema)
            shard = layout.open_shard(self._path, layout.shard_dir(self._path, generation), config)
        except OSError as e:
            raise StoreUnavailableError(
                f"cannot use {self._path} for the embedded store ({e.strerror or e}): set MS_DATA_DIR to a folder "
                "this user can write"
            ) from e
        self._live = LiveShard(
            self._path, shard, generation, sync_writes=sync_writes, checkpoint_interval_s=checkpoint_interval_s
        )
        self._build = HnswBuild(
            self._live,
            schema,
            config,
            optimize_after_writes=optimize_after_writes,
            threshold_kb=indexing_threshold_kb or layout.DEFAULT_INDEXING_THRESHOLD_KB,
        )
        layout.remove_stale_generations(self._path, generation)
        self.auto_index = AutoIndex(
            limit=auto_index_max or 0,
            kinds=self.metadata_kinds,
            create=self.create_index,
            where=f"the embedded store at {self._path}",
            on_outcome=on_auto_index,
        )
        if indexed_fields is not None:
            indexed = self._sync_indexes(indexed_fields, keep_learned=auto_index_max is not None)
            if auto_index_max is not None:
                self.auto_index.known(indexed, indexed_fields)
        self._payload_indexes = self._read_payload_indexes()
        self._copy = InMemoryCopy(schema)
        self._copy.load(shard)
        with self._live.write_lock:
            self._build.start_if_unindexed()

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        schema: VectorSchema,
        *,
        wait_for_server: bool = False,
        on_auto_index: Callable[[str], None] | None = None,
    ) -> EdgeStore:
        """The store under `data_dir/collection` (`wait_for_server` is for a server: this store is always there)."""
        return cls(
            settings.data_dir / settings.collection,
            schema,
            optimize_after_writes=settings.optimize_after_writes,
            indexing_threshold_kb=settings.indexing_threshold_kb,
            checkpoint_interval_s=settings.checkpoint_interval_s,
            sync_writes=settings.sync_writes,
            indexed_fields=settings.indexed_fields,
            auto_index_max=settings.auto_index_max if settings.auto_index else None,
            on_auto_index=on_auto_index,
        )

    @classmethod
    def create_snapshot(cls, settings: Settings, schema: VectorSchema, target: Path) -> SnapshotReport:
        store = cls(settings.data_dir / settings.collection, schema, optimize_after_writes=0)
        try:
            items = snapshot.write(store._live, store.count, target)
        finally:
            store.close()
        return SnapshotReport(target, items, target.stat().st_size)

    @classmethod
    def restore_snapshot(
        cls, settings: Settings, schema: VectorSchema, source: Path, *, overwrite: bool = False
    ) -> SnapshotReport:
        def count_at(path: Path) -> int:
            restored = cls(path, schema, optimize_after_writes=0)
            try:
                return restored.count()
            finally:
                restored.close()

        path = settings.data_dir / settings.collection
        items = snapshot.restore(path, schema, source, overwrite=overwrite, count_at=count_at)
        return SnapshotReport(path, items, source.stat().st_size)

    # --- writes

    def upsert(self, items: Sequence[StoredItem]) -> None:
        if not items:
            return
        keys = self.points([it.id for it in items])
        points = [Point(key, self._point_vectors(it), to_payload(it)) for key, it in zip(keys, items, strict=True)]
        with self._live.write_lock:
            self._refuse_shared_keys(keys, items)
            written = self._apply(
                UpdateOperation.upsert_points(points), len(points), functools.partial(self._copy.put, keys, items)
            )
        self._live.sync(written)

    def _refuse_shared_keys(self, keys: Sequence[int], items: Sequence[StoredItem]) -> None:
        """Two item ids of one point key (layout.point_key): the second would replace the first, so it is refused.
        Under the write lock, so no write between the check and the upsert changes what a key holds."""
        owners: dict[int, str] = {}
        for key, item in zip(keys, items, strict=True):
            if owners.setdefault(key, item.id) != item.id:
                raise InvalidInputError(f"items {owners[key]!r} and {item.id!r} share a point key: rename one")
        with self._live.lock:
            held = [key for key in owners if key in self._copy.vectors]
            listings = self._copy.vectors.entries(held)
        for key, listing in zip(held, listings, strict=True):
            if listing.id != owners[key]:
                raise InvalidInputError(
                    f"item {owners[key]!r} shares a point key with the stored item {listing.id!r}: rename it"
                )

    def _point_vectors(self, item: StoredItem) -> dict[str, object]:
        sparse = sparse_lists(item, self._schema.sparse)
        return {
            **vector_lists(item, self._schema.sizes),
            **{name: EdgeSparseVector(indices, values) for name, (indices, values) in sparse.items()},
        }

    def delete(self, ids: Sequence[str]) -> int:
        point_ids = list(dict.fromkeys(self.points(ids)))
        if not point_ids:
            return 0
        live = self._live
        with live.write_lock:
            with live.lock:
                found = [r.id for r in live.shard.retrieve(point_ids, False, False)]
            if not found:
                return 0
            written = self._apply(self._deletion(found), len(found), self._forgetting(found))
        live.sync(written)
        return len(found)

    def delete_where(self, conditions: Sequence[Condition]) -> int:
        if not conditions:
            raise InvalidInputError("a delete by filter needs at least one condition")
        for condition in conditions:  # a key that cannot be filtered on is refused, whether an item holds it or not
            metadata_path(condition.key)
        deleted = written = 0
        with self._live.write_lock:
            for found in self._pages_to_delete(conditions):
                written = self._apply(self._deletion(found), len(found), self._forgetting(found))
                deleted += len(found)
        if written:
            self._live.sync(written)
        if deleted:  # a filter that matched: its keys are held, so an index on them can serve it
            self.auto_index.saw(conditions)
        return deleted

    def _pages_to_delete(self, conditions: Sequence[Condition]) -> Iterator[list[int]]:
        """The points meeting the conditions, a page at a time: by the engine where payload indexes serve the filter
        (each page read after the one before it was deleted), else all at once from the metadata index, since the
        engine would read every point's payload for each page."""
        live, copy = self._live, self._copy
        if planner.in_process(conditions, self._payload_indexes):
            with live.lock:
                points = copy.vectors.points_at(copy.metadata.matching(conditions))
            for start in range(0, len(points), base.DELETE_PAGE):
                yield points[start : start + base.DELETE_PAGE]
            return
        request = ScrollRequest(
            limit=base.DELETE_PAGE, filter=edge_filter(conditions, ()), with_payload=False, with_vector=False
        )
        while not copy.metadata.matches_nothing(conditions):  # else every point would be checked, to find none
            with live.lock:
                records, _ = live.shard.scroll(request)
            if not records:
                return
            yield [r.id for r in records]

    def _deletion(self, points: Sequence[int]) -> UpdateOperation:
        return UpdateOperation.delete_points(list(points))

    def _forgetting(self, points: Sequence[int]) -> Callable[[], None]:
        return functools.partial(self._copy.forget, list(points))

    def create_index(self, key: str, kind: str) -> None:
        """A write like any other: journaled, so a running HNSW build's copy gets the index too and its swap does
        not lose it. The engine builds it under the lock every search takes, so searches wait for the build
        (docs/operations.md, "Indexed filters")."""
        operation = UpdateOperation.create_field_index(metadata_path(key), layout.schema_type(kind))
        with self._live.write_lock:
            if self._live.closed:
                raise StoreUnavailableError(f"the embedded store at {self._path} is closed")
            written = self._apply(operation, 0, lambda: None)
            self._payload_indexes = {**self._payload_indexes, key: kind}
        self._live.sync(written)

    def _apply(self, operation: UpdateOperation, n_points: int, also: Callable[[], None]) -> int:
        """One write to the shard and the in-memory copies; the caller holds the write lock."""
        written = self._live.apply(operation, also)
        self._build.wrote(n_points)
        return written

    # --- reads

    def get(self, ids: Sequence[str], *, with_vectors: bool = False) -> dict[str, StoredItem]:
        point_ids = list(dict.fromkeys(self.points(ids)))
        if not point_ids:
            return {}
        copy = self._copy
        with self._live.lock:
            records = self._live.shard.retrieve(point_ids, True, False)
            # With the vectors, those the in-memory copies hold: the dense ones as searches read them as candidates
            # (the engine's come back as lists of floats, 0.08 ms an item), the sparse ones as the term rows hold
            # them, so an item's query needs no analysis of its texts.
            if with_vectors:
                rows = copy.vectors.row_of([r.id for r in records])
                dense = copy.vectors.take(rows)[1]
                sparse = [copy.terms.vectors(row) for row in rows.tolist()]
        if not with_vectors:
            return {item.id: item for item in (from_payload(r.payload) for r in records)}
        items = (
            from_payload(r.payload, {name: matrix[at] for name, matrix in dense.items()}, None, terms)
            for at, (r, terms) in enumerate(zip(records, sparse, strict=True))
        )
        return {item.id: item for item in items}

    def search(
        self,
        vector: np.ndarray,
        limit: int,
        conditions: Sequence[Condition] = (),
        exclude_ids: Sequence[str] = (),
        lexical: Mapping[str, SparseVector] | None = None,
        scored: Mapping[str, SparseVector] | None = None,
        using: Mapping[str, str] | None = None,
    ) -> SearchResult:
        for condition in conditions:  # a key that cannot be filtered on is refused, whether an item holds it or not
            metadata_path(condition.key)
        copy = self._copy
        with self._live.lock:
            # No item can match: spare the engine's check of every point, and the filter's building (a number list's
            # conditions cost about 18 us a value).
            if copy.metadata.matches_nothing(conditions):
                nothing = np.empty(0, np.int64)
                lexical_scores = copy.terms.scores(scored or {}, nothing, using)
                return SearchResult([], np.empty(0, np.float32), copy.vectors.take(nothing)[1], [], lexical_scores)
            # Each lexical query cut to its strongest terms by the term rows' frequencies (term_rows.py).
            cut = {name: copy.terms.strongest(name, query, limit) for name, query in (lexical or {}).items()}
            cut = {name: query for name, query in cut.items() if len(query)}
            if not planner.in_process(conditions, self._payload_indexes):
                kept = len(copy.metadata.matching(conditions)) if conditions else None
                params = planner.engine_params(limit, kept, len(copy.vectors))
                points, scores = self._engine_hits(vector, limit, conditions, exclude_ids, cut, params)
            else:  # the points meeting a filter no payload index serves, from the metadata index, searched exactly
                rows = copy.metadata.matching(conditions)
                excluded = copy.vectors.rows(self.points(exclude_ids))
                rows = rows[~np.isin(rows, excluded)] if excluded else rows
                points, scores = exact.search(copy.vectors, copy.terms, rows, vector, self._schema.ann, limit, cut)
            # The hits' rows, read once: their listings, vectors and lexical scores of one version of each item.
            rows = copy.vectors.row_of(points)
            listings, vectors = copy.vectors.take(rows)
            lexical_scores = copy.terms.scores(scored or {}, rows, using)
        if points:  # a filter that matched: its keys are held, so an index on them can serve it (a search that found
            # nothing may filter on keys no item holds, whose look at the data would check every point)
            self.auto_index.saw(conditions)
        return SearchResult(listings=listings, scores=scores, vectors=vectors, points=points, lexical=lexical_scores)

    def _engine_hits(
        self,
        vector: np.ndarray,
        limit: int,
        conditions: Sequence[Condition],
        exclude_ids: Sequence[str],
        lexical: Mapping[str, SparseVector],
        params: SearchParams,
    ) -> tuple[list[int], np.ndarray]:
        """The engine's search (planner.engine_request), its hits' points and scores best first; under the lock. A
        few excluded ids (a by-id query's own item) are dropped from the hits of a search that asks for as many more,
        not filtered out: a must_not filter costs the engine more than those few candidates do. The nearest are then
        cut back to `limit`; a union keeps the few more it may hold (base.Store.search)."""
        dropped = set(self.points(exclude_ids)) if planner.dropped_rather_than_filtered(exclude_ids) else set()
        where = edge_filter(conditions, () if dropped else exclude_ids)
        request = planner.engine_request(vector, self._schema.ann, limit, len(dropped), where, params, lexical)
        hits = self._live.shard.query(request)
        points = [hit.id for hit in hits]
        scores = np.fromiter([hit.score for hit in hits], dtype=np.float32, count=len(hits))
        if not dropped.isdisjoint(points):
            kept = [n for n, point in enumerate(points) if point not in dropped]
            points, scores = [points[n] for n in kept], scores[kept]
        if not lexical:
            points, scores = points[:limit], scores[:limit]
        return points, scores

    def sample(self, n: int) -> list[StoredItem]:
        request = ScrollRequest(limit=n, with_payload=True, with_vector=list(self._schema.sizes))
        with self._live.lock:
            records, _ = self._live.shard.scroll(request)
        return [from_payload(r.payload, r.vector, self._schema.sizes) for r in records]

    def scroll(self, offset: str | None, limit: int) -> tuple[list[StoredItem], str | None]:
        start = None if offset is None else int(offset)  # the point key of the page's first item, as returned below
        request = ScrollRequest(offset=start, limit=limit, with_payload=True, with_vector=False)
        with self._live.lock:
            records, following = self._live.shard.scroll(request)
        return [from_payload(r.payload) for r in records], None if following is None else str(following)

    def points(self, ids: Sequence[str]) -> list[int]:
        """Each item's point key (layout.point_key): its point in the shard and in the in-memory copies."""
        return [layout.point_key(i) for i in ids]

    def lexical_scores(
        self, queries: Mapping[str, SparseVector], points: Sequence[int], using: Mapping[str, str] | None = None
    ) -> dict[str, np.ndarray]:
        """From the term rows (term_rows.py), read under the lock that orders them with writes."""
        with self._live.lock:
            return self._copy.terms.scores(queries, self._copy.vectors.row_of(points), using)

    def listed(
        self, ids: Sequence[str], scored: Mapping[str, SparseVector], using: Mapping[str, str] | None = None
    ) -> SearchResult:
        """From the in-memory copies, read once under the lock as a search's hits are."""
        points = self.points(list(dict.fromkeys(ids)))
        copy = self._copy
        with self._live.lock:
            rows = copy.vectors.row_of(points)
            rows = rows[rows >= 0]
            listings, vectors = copy.vectors.take(rows)
            lexical_scores = copy.terms.scores(scored, rows, using) if scored else {}
            points = copy.vectors.points_at(rows)
        return SearchResult(listings, np.zeros(len(rows), np.float32), vectors, points, lexical_scores)

    def term_idf(
        self, queries: Mapping[str, SparseVector], using: Mapping[str, str] | None = None
    ) -> dict[str, np.ndarray]:
        with self._live.lock:
            return self._copy.terms.idf(queries, using)

    def metadata_kinds(self, key: str) -> set[str]:
        """Read a page at a time under the lock, like a search, so searches go on between pages."""
        path = metadata_path(key)
        holding = Filter(must_not=[IsEmptyCondition(path)])

        def read_page(offset: object) -> tuple[list[dict], object]:
            request = ScrollRequest(offset=offset, limit=2048, filter=holding, with_payload=[path], with_vector=False)
            with self._live.lock:
                records, offset = self._live.shard.scroll(request)
            return [record.payload for record in records], offset

        return stored_kinds(key, read_page)

    def count(self) -> int:
        with self._live.lock:
            return self._live.shard.count(CountRequest())

    def readiness(self) -> str | None:
        if self._live.closed:
            return f"the embedded store at {self._path} is closed"
        try:
            with self._live.lock:
                self._live.shard.info()
        except Exception as e:
            logger.warning("embedded store at %s does not answer", self._path, exc_info=True)
            return f"the embedded store at {self._path} does not answer ({e})"
        return None

    @property
    def location(self) -> str:
        return str(self._path)

    # --- durability and maintenance

    def flush(self) -> None:
        with self._live.lock:
            self._live.flush()

    def close(self) -> None:
        """Stop a running build (its copy is discarded), then flush and release the shard and its WAL lock. An
        automatic index build under way is waited for (it takes the write lock)."""
        self.auto_index.close()
        live = self._live
        with live.write_lock:
            if live.closed:
                return
            live.closed = True
        self._build.stop()
        with live.write_lock, live.lock:
            live.flush()
            live.shard.close()

    @property
    def has_hnsw(self) -> bool:
        """Whether the live shard holds an HNSW index (searches on a plain segment are brute force)."""
        with self._live.lock:
            return self._build.dense_indexed(self._live.shard.info().indexed_vectors_count) > 0

    def optimize_now(self) -> None:
        """Start a background HNSW build now (no-op while one runs), e.g. after a bulk load."""
        with self._live.write_lock:
            self._build.start()

    def wait_for_maintenance(self, timeout: float | None = None) -> bool:
        """Wait for a running build to finish; True when none runs any more."""
        return self._build.wait(timeout)

    # --- payload indexes

    def _sync_indexes(self, declared: Mapping[str, str], *, keep_learned: bool) -> dict[str, str]:
        """At open, before any build copies the shard (its segments carry the indexes into every generation)."""
        shard = self._live.shard
        existing = {path: layout.index_type(info.data_type) for path, info in shard.info().payload_schema.items()}
        return sync_indexes(
            existing,
            declared,
            create=lambda path, kind: shard.update(UpdateOperation.create_field_index(path, layout.schema_type(kind))),
            drop=lambda path: shard.update(UpdateOperation.delete_field_index(path)),
            where=f"the embedded store at {self._path}",
            keep_undeclared=keep_learned,
        )

    def _read_payload_indexes(self) -> dict[str, str]:
        """The metadata keys with a payload index, {key: type}: the filters the engine answers without reading every
        point."""
        schema = self._live.shard.info().payload_schema
        return metadata_indexes({path: layout.index_type(info.data_type) for path, info in schema.items()})
