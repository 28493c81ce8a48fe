"""The embedded store: one qdrant-edge shard on local disk, owned by this process (its WAL is the lock).

qdrant-edge builds HNSW only on an explicit `optimize()`, which holds the GIL for seconds: run in a thread it would
freeze every request (QDRANT_EDGE.md). So a background build copies the flushed shard to the next generation
folder, a child process (edge_optimize.py) optimises the copy, and the copy replaces the live shard after replaying
the writes made meanwhile. Queries use the live shard throughout; a failed build leaves it in place.

Layout: `<path>/store.json` names the bundle that built the store and the live generation `<path>/shard-<n>/`.

Snapshots: a .tar.gz of `store.json` and the live shard folder, read after a flush with writes held back, so it is
consistent. Both snapshot commands open the store themselves, and its WAL lock refuses them while a service holds it
(stop the service first): nothing ever reads or replaces files under a running engine. A restore unpacks next to
the store, checks the snapshot was made for the configured bundle, loads it, and only then swaps it in the way a
build's copy goes live: as a new generation that `store.json`, replaced by one atomic rename, names. Until that
rename the old store is whole; after it the new one is, and the old generation is removed. The engine preallocates
sparse files, so a restore writes zero blocks back as holes.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeOptimizersConfig,
    EdgeShard,
    EdgeSparseVectorParams,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    HasIdCondition,
    HasVectorCondition,
    HnswIndexConfig,
    IsEmptyCondition,
    MatchAny,
    MatchValue,
    Modifier,
    PayloadSchemaType,
    Point,
    Prefetch,
    Query,
    QueryRequest,
    RangeFloat,
    ScrollRequest,
    SearchParams,
    UpdateOperation,
)
from qdrant_edge import Fusion as EdgeFusion
from qdrant_edge import SparseVector as EdgeSparseVector

from metricsearch.core.errors import InvalidInputError, StoreMismatchError, StoreUnavailableError
from metricsearch.core.lexical import SparseVector
from metricsearch.core.records import point_id
from metricsearch.service.config import Settings
from metricsearch.service.store import base, exact
from metricsearch.service.store.atomic import fsync_tree, written_whole
from metricsearch.service.store.auto_index import AutoIndex
from metricsearch.service.store.base import (
    AnyOf,
    Condition,
    Equals,
    Listing,
    SearchResult,
    SnapshotReport,
    StoredItem,
    VectorSchema,
)
from metricsearch.service.store.census import MetadataCensus, served_by_indexes
from metricsearch.service.store.mirror import VectorMirror
from metricsearch.service.store.payload import (
    any_of_parts,
    check_schema,
    from_payload,
    is_number,
    listing,
    metadata_indexes,
    metadata_path,
    one_of_numbers,
    sparse_lists,
    stored_kinds,
    sync_indexes,
    to_payload,
    vector_lists,
)
from metricsearch.service.store.terms import TermMirror

logger = logging.getLogger(__name__)

SIDECAR = "store.json"
DEFAULT_INDEXING_THRESHOLD_KB = 10_000
"""The engine's default: below it (per vector name) optimize() builds no HNSW, so a build is not worth starting."""
DROPPED_MAX = 16
"""Up to this many excluded ids are dropped from a search's hits rather than filtered out by the engine: at 100k
points a must_not has_id filter cost 0.3 ms of a 1.2 ms dense search (0.45 ms with a lexical prefetch), where a
candidate more costs about 0.03 ms to read and rerank (BENCHMARKS.md "Candidates: recall and cost")."""

EXACT_FILTERED_MAX = 20_000
"""A search whose filter keeps at most this many points (the census counts them) compares each of them, through the
filter's payload indexes, rather than walking the HNSW graph: past the engine's own full-scan threshold (about 3,300
points of 768 floats) the walk meets too few of the points a filter keeps. At 100k synthetic items, limit 100, a
filter keeping 10% / 20% / 50% found 0.22 / 0.37 / 0.56 of its exact 100 nearest by the walk (3.5-4.2 ms; 0.78
unfiltered), and all of them compared in 8.3 / 13.4 ms for 10% / 20%. The cost grows with the points kept, hence the
bound (BENCHMARKS.md, "Filtered search")."""
FILTERED_EF_MAX = 8
"""The widest beam a filtered walk gets, in multiples of its limit. At 100k synthetic items, limit 100, the default
walk (a beam of the limit) found 0.46 / 0.60 / 0.72 of a filter's exact 100 nearest when it kept 30% / 50% / 80% of
the items, against 0.75 unfiltered; beams of 400 found 0.80 / 0.89 / 0.95 in 4.0-6.9 ms (2 ms by default)."""
_FORMAT = 1
_NO_GRAPH = HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10_000)
"""For vectors only read back for reranking: no HNSW graph, a third less build time (20k x 2 x 384: 15 s, not 23)."""
_SHARD_DIR = re.compile(r"^shard-(\d+)$")
_COPY_CHUNK = 1 << 20
_UNPACK_CHUNK = 1 << 16
"""Extraction block: an all-zero one becomes a hole, so it is small enough to find the holes between extents."""


def optimizer_command(shard_dir: Path) -> list[str]:
    """The child process that optimises a shard copy (a function so tests can make it fail)."""
    return [sys.executable, str(Path(__file__).with_name("edge_optimize.py")), str(shard_dir), str(os.getpid())]


class EdgeStore:
    """The Store on an embedded qdrant-edge shard.

    `optimize_after_writes`: points written since the last build that start a background HNSW build (0 = never);
    `indexing_threshold_kb`: the engine's indexing threshold (MS_INDEXING_THRESHOLD_KB), lowered in tests to get HNSW
    from a few points;
    `sync_writes`: fsync before a write returns. Without it a returned write is in the WAL (an mmap), which
    survives a crash of this process but not of the machine (QDRANT_EDGE.md); `indexed_fields`: the metadata keys
    to keep payload indexes on, {key: type} (payload.sync_indexes), None to leave the store's indexes as they are
    (snapshot commands); `auto_index_max`: with `indexed_fields`, learn up to this many more from filters and keep
    those learned before (auto_index.py; None: off, undeclared indexes are dropped)."""

    lexical_in_process = True  # lexical_scores: the term mirror (store/terms.py)
    exhaustive_max = EXACT_FILTERED_MAX
    """Filtered searches keeping at most this many points compare each of them (EXACT_FILTERED_MAX)."""
    filtered_ef_max = FILTERED_EF_MAX
    """The widest beam of a filtered walk, in multiples of its limit (FILTERED_EF_MAX); 1: the engine's default."""
    census_filters = True
    """Whether filters no payload index serves are answered from the census; False sends every filter to the engine,
    as before the census was kept (bench.filtered_search measures both)."""

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
        self._sync_writes = sync_writes
        self._schema = schema
        self._optimize_after_writes = optimize_after_writes
        self._threshold_kb = indexing_threshold_kb or DEFAULT_INDEXING_THRESHOLD_KB
        optimizers = EdgeOptimizersConfig(indexing_threshold=indexing_threshold_kb) if indexing_threshold_kb else None
        self._config = EdgeConfig(
            vectors={
                name: EdgeVectorParams(size, Distance.Cosine, hnsw_config=None if name == schema.ann else _NO_GRAPH)
                for name, size in schema.sizes.items()
            },
            sparse_vectors={name: EdgeSparseVectorParams(modifier=Modifier.Idf) for name in schema.sparse} or None,
            optimizers=optimizers,
        )
        # _lock guards every call on the shard and is held only for that call, so the swap waits for no query.
        # _write_lock serialises writes with each other and with a build's copy and swap (order: _write_lock first).
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        # Group commit: writes are numbered as applied; one WAL fsync covers every write applied before it began.
        self._sync_lock = threading.Lock()
        self._applied = 0
        self._synced = 0
        self._journal: list[UpdateOperation] | None = None
        """Writes made since a build copied the shard, replayed into the copy before it goes live."""
        self._writes_since_build = 0
        self._checkpoint_interval_s = checkpoint_interval_s
        self._flushed_at = time.monotonic()
        self._builder: threading.Thread | None = None
        self._child: subprocess.Popen[str] | None = None
        self._closed = False
        try:
            self._generation = self._open_sidecar()
            self._shard = self._open_shard(self._shard_dir(self._generation))
        except OSError as e:
            raise StoreUnavailableError(
                f"cannot use {self._path} for the embedded store ({e.strerror or e}): set MS_DATA_DIR to a folder "
                "this user can write"
            ) from e
        self._remove_stale_generations()
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
        self._mirror, self._terms, self._census = self._load_mirrors()

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

    # --- snapshots

    @classmethod
    def create_snapshot(cls, settings: Settings, schema: VectorSchema, target: Path) -> SnapshotReport:
        store = cls(settings.data_dir / settings.collection, schema, optimize_after_writes=0)
        try:
            with (
                store._frozen() as files,
                written_whole(target) as partial,
                tarfile.open(partial, "w:gz", compresslevel=1) as archive,
            ):
                for path in files:
                    archive.add(path, arcname=path.name)
                items = store.count()
        finally:
            store.close()
        return SnapshotReport(target, items, target.stat().st_size)

    @classmethod
    def restore_snapshot(
        cls, settings: Settings, schema: VectorSchema, source: Path, *, overwrite: bool = False
    ) -> SnapshotReport:
        """Unpack next to the store, check and load the snapshot, then swap it in (module docstring). The live
        shards' WAL locks are held from the start until the swap, so no service opens the store meanwhile."""
        path = settings.data_dir / settings.collection
        occupied = path.exists() and any(path.iterdir())
        if occupied and not overwrite:
            raise InvalidInputError(f"{path} holds a store: pass --overwrite to replace it")
        staging = path.with_name(path.name + ".restoring")
        try:
            with _holding(path):
                shutil.rmtree(staging, ignore_errors=True)
                generation = _unpack(source, staging, schema)
                restored = cls(staging, schema, optimize_after_writes=0)
                items = restored.count()
                restored.close()
                if occupied:
                    old = _swap_in_snapshot(path, staging / f"shard-{generation}", schema)
                else:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    staging.rename(path)  # replaces an empty folder; refuses one a store appeared in meanwhile
                    old = []
            for shard_dir in old:  # after the locks are released: no engine holds them any more
                shutil.rmtree(shard_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return SnapshotReport(path, items, source.stat().st_size)

    # --- Store

    def upsert(self, items: Sequence[StoredItem]) -> None:
        if not items:
            return
        ids = [point_id(it.id) for it in items]
        points = [Point(pid, self._point_vectors(it), to_payload(it)) for pid, it in zip(ids, items, strict=True)]
        vectors = {name: np.asarray([it.vectors[name] for it in items], np.float32) for name in self._schema.sizes}
        listings = [Listing(it.id, it.title, it.metadata) for it in items]
        keys = [uuid.UUID(pid).int for pid in ids]

        def mirror() -> None:
            # The census loses the replaced items' metadata and counts each point's last item once (an id given
            # twice is one point, as in the mirrors).
            latest = dict(zip(keys, items, strict=True))
            replaced = list(latest)
            self._census.remove(self._mirror.rows(replaced), [e.metadata for e in self._mirror.entries(replaced)])
            self._mirror.put(keys, listings, vectors)
            rows = self._mirror.rows(replaced)
            self._census.add(rows, [it.metadata for it in latest.values()])
            self._terms.put(rows, [it.sparse for it in latest.values()])

        with self._write_lock:
            written = self._apply(UpdateOperation.upsert_points(points), len(points), mirror)
        self._sync(written)

    def _point_vectors(self, item: StoredItem) -> dict[str, object]:
        sparse = sparse_lists(item, self._schema.sparse)
        return {
            **vector_lists(item, self._schema.sizes),
            **{name: EdgeSparseVector(indices, values) for name, (indices, values) in sparse.items()},
        }

    def get(self, ids: Sequence[str], *, with_vectors: bool = False) -> dict[str, StoredItem]:
        point_ids = list(dict.fromkeys(point_id(i) for i in ids))
        if not point_ids:
            return {}
        with self._lock:
            records = self._shard.retrieve(point_ids, True, with_vectors)
            # With the vectors, the sparse ones as the term mirror holds them: an item's query (Catalog.item_query)
            # then needs no analysis of its texts.
            if with_vectors:
                rows = self._mirror.row_of([r.id.int for r in records]).tolist()
                sparse = [self._terms.vectors(row) for row in rows]
            else:
                sparse = [None] * len(records)
        items = (
            from_payload(r.payload, r.vector if with_vectors else None, self._schema.sizes, terms)
            for r, terms in zip(records, sparse, strict=True)
        )
        return {item.id: item for item in items}

    def delete(self, ids: Sequence[str]) -> int:
        point_ids = list(dict.fromkeys(point_id(i) for i in ids))
        if not point_ids:
            return 0
        with self._write_lock:
            with self._lock:
                found = [r.id for r in self._shard.retrieve(point_ids, False, False)]
            if not found:
                return 0
            written = self._apply(
                UpdateOperation.delete_points([str(p) for p in found]),
                len(found),
                functools.partial(self._forget, [p.int for p in found]),
            )
        self._sync(written)
        return len(found)

    def _forget(self, keys: list[int]) -> None:
        """Deleted points leave both in-RAM copies (vectors and terms), and the census, with the write that deletes
        them."""
        rows = self._mirror.rows(keys)
        self._census.remove(rows, [entry.metadata for entry in self._mirror.entries(keys)])
        self._terms.remove(rows)
        self._mirror.remove(keys)

    def delete_where(self, conditions: Sequence[Condition]) -> int:
        if not conditions:
            raise InvalidInputError("a delete by filter needs at least one condition")
        for condition in conditions:  # a key that cannot be filtered on is refused, whether an item holds it or not
            metadata_path(condition.key)
        deleted = written = 0
        with self._write_lock:
            for found in self._pages_to_delete(conditions):
                written = self._apply(
                    UpdateOperation.delete_points([str(p) for p in found]),
                    len(found),
                    functools.partial(self._forget, [p.int for p in found]),
                )
                deleted += len(found)
        if written:
            self._sync(written)
        if deleted:  # a filter that matched: its keys are held, so an index on them can serve it
            self.auto_index.saw(conditions)
        return deleted

    def _pages_to_delete(self, conditions: Sequence[Condition]) -> Iterator[list[uuid.UUID]]:
        """The points meeting the conditions, a page at a time: by the engine where payload indexes serve the filter
        (each page read after the one before it was deleted), else all at once from the census, since the engine would
        read every point's payload for each page."""
        if self._census_answers(conditions):
            with self._lock:
                points = self._mirror.points_at(self._census.matching(conditions))
            for start in range(0, len(points), base.DELETE_PAGE):
                yield [uuid.UUID(int=p) for p in points[start : start + base.DELETE_PAGE]]
            return
        where = _filter(conditions, ())
        request = ScrollRequest(limit=base.DELETE_PAGE, filter=where, with_payload=False, with_vector=False)
        while not self._census.matches_nothing(conditions):  # else every point would be checked, to find none
            with self._lock:
                records, _ = self._shard.scroll(request)
            if not records:
                return
            yield [r.id for r in records]

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
        with self._lock:
            # No item can match: spare the engine's check of every point, and the filter's building (a number list's
            # conditions cost about 18 us a value).
            if self._census.matches_nothing(conditions):
                nothing = np.empty(0, np.int64)
                lexical_scores = self._terms.scores(scored or {}, nothing, using)
                return SearchResult([], np.empty(0, np.float32), self._mirror.take(nothing)[1], [], lexical_scores)
            # Each lexical query cut to its strongest terms by the term mirror's frequencies (store/terms.py).
            cut = {name: self._terms.strongest(name, query, limit) for name, query in (lexical or {}).items()}
            cut = {name: query for name, query in cut.items() if len(query)}
            if not self._census_answers(conditions):
                kept = len(self._census.matching(conditions)) if conditions else None
                hits = self._engine_hits(vector, limit, conditions, exclude_ids, cut, self._walk(limit, kept))
            else:  # the points meeting a filter no payload index serves, from the census, searched exactly (exact.py)
                rows = self._census.matching(conditions)
                excluded = self._mirror.rows(self.points(exclude_ids))
                rows = rows[~np.isin(rows, excluded)] if excluded else rows
                hits = exact.search(self._mirror, self._terms, rows, vector, self._schema.ann, limit, cut)
            points = [point for point, _ in hits]
            # The hits' rows, read once: their listings, vectors and lexical scores of one version of each item.
            rows = self._mirror.row_of(points)
            listings, vectors = self._mirror.take(rows)
            lexical_scores = self._terms.scores(scored or {}, rows, using)
        if hits:  # a filter that matched: its keys are held, so an index on them can serve it (a search that found
            # nothing may filter on keys no item holds, whose look at the data would check every point)
            self.auto_index.saw(conditions)
        return SearchResult(
            listings=listings,
            scores=np.fromiter((score for _, score in hits), dtype=np.float32, count=len(hits)),
            vectors=vectors,
            points=points,
            lexical=lexical_scores,
        )

    def _census_answers(self, conditions: Sequence[Condition]) -> bool:
        """Whether the census finds the points a filter keeps: no payload index serves it (the engine would read
        every point's payload it meets)."""
        return self.census_filters and not served_by_indexes(conditions, self._payload_indexes)

    def _walk(self, limit: int, kept: int | None) -> SearchParams | None:
        """How the engine searches for the `limit` nearest of the `kept` points a filter keeps (None: no filter, its
        default HNSW walk): each of them compared when they are few (EXACT_FILTERED_MAX), else a walk whose beam is
        as many times wider than `limit` as the filter keeps fewer than all points (`filtered_ef_max` at most), so it
        meets about as many kept points as an unfiltered walk does."""
        if kept is None:
            return None
        if kept <= self.exhaustive_max:
            return SearchParams(exact=True)
        if self.filtered_ef_max <= 1:
            return None
        return SearchParams(hnsw_ef=min(self.filtered_ef_max * limit, math.ceil(limit * len(self._mirror) / kept)))

    def _engine_hits(
        self,
        vector: np.ndarray,
        limit: int,
        conditions: Sequence[Condition],
        exclude_ids: Sequence[str],
        lexical: Mapping[str, SparseVector],
        params: SearchParams | None,
    ) -> list[tuple[int, float]]:
        """The engine's ANN search with `params` (`_walk`), with a prefetch per lexical query fused by RRF; under the
        lock."""
        # A few excluded ids (a by-id query's own item) are dropped from the hits of a search that asks for as many
        # more, not filtered out: a must_not filter costs the engine more than those few candidates do. The nearest
        # are then cut back to `limit`; a union keeps the few more it may hold (base.Store.search).
        dropped = set(self.points(exclude_ids)) if len(exclude_ids) <= DROPPED_MAX else set()
        extra = len(dropped)
        where = _filter(conditions, () if dropped else exclude_ids)
        dense = Query.Nearest(np.asarray(vector, dtype=np.float32).tolist(), using=self._schema.ann)
        if lexical:  # the union of every prefetch's hits (RRF orders them; the rerank scores them)
            stages = [Prefetch(limit=limit + extra, query=dense, filter=where, params=params)]
            stages += [
                Prefetch(limit=base.lexical_limit(limit) + extra, query=_sparse_query(name, query), filter=where)
                for name, query in lexical.items()
            ]
            request = QueryRequest(
                limit=sum(stage.limit for stage in stages),
                prefetches=stages,
                query=EdgeFusion.Rrf(k=exact.RRF_K),
                with_payload=False,
            )
        else:
            request = QueryRequest(
                limit=limit + extra, query=dense, filter=where, with_payload=False, with_vector=False, params=params
            )
        hits = [(hit.id.int, hit.score) for hit in self._shard.query(request)]
        return [(point, score) for point, score in hits if point not in dropped][: None if lexical else limit]

    def sample(self, n: int) -> list[StoredItem]:
        request = ScrollRequest(limit=n, with_payload=True, with_vector=list(self._schema.sizes))
        with self._lock:
            records, _ = self._shard.scroll(request)
        return [from_payload(r.payload, r.vector, self._schema.sizes) for r in records]

    def scroll(self, offset: str | None, limit: int) -> tuple[list[StoredItem], str | None]:
        request = ScrollRequest(offset=offset, limit=limit, with_payload=True, with_vector=False)
        with self._lock:
            records, following = self._shard.scroll(request)
        return [from_payload(r.payload) for r in records], None if following is None else str(following)

    def points(self, ids: Sequence[str]) -> list[int]:
        """Each point id's UUID as an int: the key of both in-RAM copies."""
        return [uuid.UUID(point_id(i)).int for i in ids]

    def lexical_scores(
        self, queries: Mapping[str, SparseVector], points: Sequence[int], using: Mapping[str, str] | None = None
    ) -> dict[str, np.ndarray]:
        """From the term mirror (store/terms.py), read under the lock that orders it with writes."""
        with self._lock:
            return self._terms.scores(queries, self._mirror.row_of(points), using)

    def metadata_kinds(self, key: str) -> set[str]:
        """Read a page at a time under the lock, like a search, so searches go on between pages."""
        path = metadata_path(key)
        holding = Filter(must_not=[IsEmptyCondition(path)])

        def read_page(offset: object) -> tuple[list[dict], object]:
            request = ScrollRequest(offset=offset, limit=2048, filter=holding, with_payload=[path], with_vector=False)
            with self._lock:
                records, offset = self._shard.scroll(request)
            return [record.payload for record in records], offset

        return stored_kinds(key, read_page)

    def create_index(self, key: str, kind: str) -> None:
        """A write like any other: journaled, so a running HNSW build's copy gets the index too and its swap does
        not lose it. The engine builds it under the lock every search takes, so searches wait for the build
        (docs/operations.md, "Indexed filters")."""
        operation = UpdateOperation.create_field_index(metadata_path(key), _schema_type(kind))
        with self._write_lock:
            if self._closed:
                raise StoreUnavailableError(f"the embedded store at {self._path} is closed")
            written = self._apply(operation, 0, lambda: None)
            self._payload_indexes = {**self._payload_indexes, key: kind}
        self._sync(written)

    def count(self) -> int:
        with self._lock:
            return self._shard.count(CountRequest())

    def readiness(self) -> str | None:
        if self._closed:
            return f"the embedded store at {self._path} is closed"
        try:
            with self._lock:
                self._shard.info()
        except Exception as e:
            logger.warning("embedded store at %s does not answer", self._path, exc_info=True)
            return f"the embedded store at {self._path} does not answer ({e})"
        return None

    def flush(self) -> None:
        with self._lock:
            self._flush_shard()

    def _flush_shard(self) -> None:
        """The engine's flush, under the lock: it persists the segments and drops the WAL segments they cover."""
        self._shard.flush()
        self._flushed_at = time.monotonic()

    def _checkpoint_if_due(self) -> None:
        """A write's flush once checkpoint_interval_s passed since the last, under the lock. Without it a store that
        starts no build (a small catalog, or updates only) kept every write's WAL on disk, 32 MB files a restart
        replays; each flush holds the GIL for 25-114 ms (QDRANT_EDGE.md). The write is in the WAL already, so a
        failed flush is logged, not raised, and tried again an interval later."""
        if not self._checkpoint_interval_s or time.monotonic() - self._flushed_at < self._checkpoint_interval_s:
            return
        try:
            self._flush_shard()
        except Exception:
            logger.warning(
                "embedded store at %s: checkpoint flush failed; the WAL keeps the writes", self._path, exc_info=True
            )
            self._flushed_at = time.monotonic()

    @contextmanager
    def _frozen(self) -> Iterator[list[Path]]:
        """Flush, then hold writes back (reads go on) while the caller copies the yielded files: the sidecar and
        the live shard folder, together a consistent copy of the store (snapshots)."""
        with self._write_lock:
            with self._lock:
                self._flush_shard()
            yield [self._path / SIDECAR, self._shard_dir(self._generation)]

    def close(self) -> None:
        """Stop a running build (its copy is discarded), then flush and release the shard and its WAL lock. An
        automatic index build under way is waited for (it takes the write lock)."""
        self.auto_index.close()
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            child = self._child
        if child is not None and child.poll() is None:
            child.kill()
        if self._builder is not None:
            self._builder.join()
        with self._write_lock, self._lock:
            self._flush_shard()
            self._shard.close()

    # --- HNSW maintenance

    @property
    def has_hnsw(self) -> bool:
        """Whether the live shard holds an HNSW index (searches on a plain segment are brute force)."""
        with self._lock:
            return self._dense_indexed(self._shard.info().indexed_vectors_count) > 0

    def optimize_now(self) -> None:
        """Start a background HNSW build now (no-op while one runs), e.g. after a bulk load."""
        with self._write_lock:
            self._start_build()

    def wait_for_maintenance(self, timeout: float | None = None) -> bool:
        """Wait for a running build to finish; True when none runs any more."""
        builder = self._builder
        if builder is not None:
            builder.join(timeout)
        return not self._building

    @property
    def _building(self) -> bool:
        return self._builder is not None and self._builder.is_alive()

    def _apply(self, operation: UpdateOperation, n_points: int, mirror_update: Callable[[], None]) -> int:
        """One write, to the shard and the vector mirror under one lock hold (a search sees both or neither);
        the caller holds the write lock. Returns the write's number, for _sync."""
        with self._lock:
            self._shard.update(operation)
            mirror_update()
            self._checkpoint_if_due()
        self._applied += 1
        written = self._applied
        if self._journal is not None:
            self._journal.append(operation)
        self._writes_since_build += n_points
        if self._build_due():
            self._start_build()
        return written

    def _sync(self, written: int) -> None:
        """With sync_writes, return once write number `written` is fsynced. Writers that wait here while an fsync
        runs share the next one, so concurrent writes cost about one fsync each round, not one each."""
        if not self._sync_writes:
            return
        with self._sync_lock:
            if self._synced >= written:
                return
            covered = self._applied  # every write numbered up to here has returned from update()
            self._fsync_wal()
            self._synced = covered

    def _fsync_wal(self) -> None:
        """Make the live shard's WAL durable: it holds every applied write, and a load replays it (QDRANT_EDGE.md).
        fsync of the WAL files, not the engine's flush(), which holds the GIL for its whole run (25-114 ms) and so
        stalls every reader; os.fsync releases the GIL, and no lock is held, so reads go on meanwhile. The WAL is
        written through a shared mmap, whose dirty pages are the file's page cache, which fsync writes out."""
        with self._lock:
            wal = self._shard_dir(self._generation) / "wal"
        fsync_tree(wal, missing_ok=True)

    def _build_due(self) -> bool:
        if not self._optimize_after_writes or self._writes_since_build < self._optimize_after_writes:
            return False
        if self._building:
            return False
        with self._lock:
            info = self._shard.info()
            indexed = self._dense_indexed(info.indexed_vectors_count)
        # Points outside indexed segments, as float32 bytes of the ANN vector: the engine indexes a segment only
        # above its threshold, so a build below it would copy the shard for nothing. (Deleted points still count
        # as indexed, so this errs towards later builds.)
        unindexed = info.points_count - indexed // len(self._schema.sizes)
        return unindexed * self._schema.sizes[self._schema.ann] * 4 >= self._threshold_kb * 1024

    def _dense_indexed(self, indexed_vectors_count: int) -> int:
        """Dense vectors in indexed segments, out of the shard's indexed_vectors_count; the caller holds the lock. The
        engine counts every stored sparse vector as indexed too (a sparse index is always built), so those are taken
        off."""
        sparse = sum(
            self._shard.count(CountRequest(filter=Filter(must=[HasVectorCondition(name)])))
            for name in self._schema.sparse
        )
        return indexed_vectors_count - sparse

    def _start_build(self) -> None:
        if self._closed or self._building:
            return
        self._builder = threading.Thread(target=self._build, name="edge-hnsw-build", daemon=True)
        self._builder.start()

    def _build(self) -> None:
        generation = self._generation + 1
        target = self._shard_dir(generation)
        try:
            copy_ms = self._copy_live_shard(target)
            if copy_ms is None:
                return
            report = self._optimize_copy(target)
            if not report["optimized"]:
                logger.info("HNSW build of %s: nothing to optimise (%s)", self._path, report)
                return
            swap = self._swap_in(target, generation)
            if swap is not None:
                logger.info(
                    "HNSW build of %s: copy %.0f ms, child %s, swap %s (ms; writes wait during copy and swap)",
                    self._path,
                    copy_ms,
                    report,
                    swap,
                )
        except Exception:
            if not self._closed:
                logger.exception("HNSW build of %s failed; the store keeps serving its current shard", self._path)
        finally:
            if self._generation != generation:
                with self._write_lock:
                    self._journal = None
                # A leftover copy is garbage, and open() removes stale generations anyway.
                shutil.rmtree(target, ignore_errors=True)

    def _copy_live_shard(self, target: Path) -> float | None:
        """Flush and copy with writes held back, so the copy plus the journal is exactly the live shard; returns
        how long that took (ms), None when the store closed meanwhile."""
        with self._write_lock:
            if self._closed:
                return None
            started = time.perf_counter()
            with self._lock:
                self._flush_shard()
            shutil.rmtree(target, ignore_errors=True)
            _copy_tree(self._shard_dir(self._generation), target)
            self._journal = []
            self._writes_since_build = 0
            return _ms_since(started)

    def _optimize_copy(self, target: Path) -> dict[str, object]:
        command = optimizer_command(target)
        with self._write_lock:
            if self._closed:
                raise RuntimeError("store closed")
            self._child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = self._child.communicate()
        if self._child.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited with {self._child.returncode}: {err.strip()[-2000:]}")
        return json.loads(out.strip().splitlines()[-1])

    def _swap_in(self, target: Path, generation: int) -> dict[str, float] | None:
        """Load the optimised copy, replay the journal, make it live, close the old shard; returns each step's
        milliseconds (load and close hold the GIL, so queries wait for them too), None when the store closed."""
        # The copy must be on disk before store.json names it and the old generation is removed; fsync releases the
        # GIL and holds no lock, so requests go on meanwhile.
        fsync_tree(target)
        with self._write_lock:
            if self._closed:
                return None
            started = time.perf_counter()
            shard = EdgeShard.load(str(target), self._config)
            loaded = time.perf_counter()
            journal = self._journal or []
            try:
                for operation in journal:
                    shard.update(operation)
                self._write_sidecar(generation)
            except BaseException:
                shard.close()
                raise
            with self._lock:
                old, self._shard = self._shard, shard
            old_dir = self._shard_dir(self._generation)
            self._generation = generation
            self._journal = None
            replayed = time.perf_counter()
        old.close()
        timings = {
            "load": _ms_since(started, loaded),
            "replay": _ms_since(loaded, replayed),
            "writes_replayed": len(journal),
            "close_old": _ms_since(replayed),
        }
        shutil.rmtree(old_dir)
        return timings

    # --- layout

    def _shard_dir(self, generation: int) -> Path:
        return self._path / f"shard-{generation}"

    def _open_sidecar(self) -> int:
        sidecar = self._path / SIDECAR
        if sidecar.exists():
            try:
                state = json.loads(sidecar.read_text())
                identity, sizes, generation = state["identity"], state["sizes"], int(state["generation"])
            except (ValueError, KeyError, TypeError) as e:
                raise StoreMismatchError(
                    f"{sidecar} is damaged ({e!r}): restore a snapshot (`metricsearch snapshot restore`), "
                    f"or move {self._path} away and re-index the catalog"
                ) from e
            check_schema(
                identity,
                sizes,
                self._schema,
                where=f"The store at {self._path}",
                fix=f"Point MS_DATA_DIR or MS_COLLECTION elsewhere to build a new store for this bundle, "
                f"or delete {self._path} and re-index the catalog with it.",
            )
            return generation
        if self._path.exists() and any(self._path.iterdir()):
            raise StoreMismatchError(
                f"{self._path} holds files but no {SIDECAR}, so it is not a metricsearch store: "
                "point MS_DATA_DIR or MS_COLLECTION elsewhere."
            )
        self._path.mkdir(parents=True, exist_ok=True)
        self._write_sidecar(1)
        return 1

    def _write_sidecar(self, generation: int) -> None:
        _write_sidecar(self._path, self._schema, generation)

    def _open_shard(self, shard_dir: Path) -> EdgeShard:
        try:
            if shard_dir.exists():
                return EdgeShard.load(str(shard_dir), self._config)
            shard = EdgeShard.create(str(shard_dir), self._config)
        except Exception as e:
            if "WouldBlock" in str(e):
                raise StoreUnavailableError(
                    f"the embedded store at {self._path} is already open (one process owns it, its WAL is the lock); "
                    "several workers need a Qdrant server (MS_QDRANT_URL)"
                ) from e
            if isinstance(e, OSError):
                raise
            raise StoreUnavailableError(
                f"the embedded store at {shard_dir} cannot be opened ({e}): restore a snapshot "
                f"(`metricsearch snapshot restore`), or move {self._path} away and re-index the catalog"
            ) from e
        shard.update(UpdateOperation.create_field_index("id", PayloadSchemaType.Keyword))
        return shard

    def _sync_indexes(self, declared: Mapping[str, str], *, keep_learned: bool) -> dict[str, str]:
        """At open, before any build copies the shard (its segments carry the indexes into every generation)."""
        existing = {path: _index_type(info.data_type) for path, info in self._shard.info().payload_schema.items()}
        return sync_indexes(
            existing,
            declared,
            create=lambda path, kind: self._shard.update(UpdateOperation.create_field_index(path, _schema_type(kind))),
            drop=lambda path: self._shard.update(UpdateOperation.delete_field_index(path)),
            where=f"the embedded store at {self._path}",
            keep_undeclared=keep_learned,
        )

    def _read_payload_indexes(self) -> dict[str, str]:
        """The metadata keys with a payload index, {key: type}: the filters the engine answers without reading every
        point."""
        schema = self._shard.info().payload_schema
        return metadata_indexes({path: _index_type(info.data_type) for path, info in schema.items()})

    def _load_mirrors(self) -> tuple[VectorMirror[Listing], TermMirror, MetadataCensus]:
        """Read every point's vectors, terms and listing once at open (about 3 s a 100k points of 768 floats)."""
        mirror: VectorMirror[Listing] = VectorMirror(self._schema.sizes)
        terms = TermMirror(self._schema.sparse)
        census = MetadataCensus()
        offset = None
        while True:
            records, offset = self._shard.scroll(
                ScrollRequest(
                    offset=offset,
                    limit=2048,
                    with_payload=["id", "title", "metadata"],
                    with_vector=[*self._schema.sizes, *self._schema.sparse],
                )
            )
            if records:
                points = [r.id.int for r in records]
                vectors = {
                    name: np.array([r.vector[name] for r in records], dtype=np.float32) for name in self._schema.sizes
                }
                listings = [listing(r.payload) for r in records]
                mirror.put(points, listings, vectors)
                rows = mirror.rows(points)
                terms.put(rows, [{n: r.vector[n] for n in self._schema.sparse if n in r.vector} for r in records])
                census.add(rows, [entry.metadata for entry in listings])
            if offset is None:
                return mirror, terms, census

    def _remove_stale_generations(self) -> None:
        """Copies left by a build that a crash interrupted; called once the live shard's WAL lock is ours."""
        for child in self._path.iterdir():
            match = _SHARD_DIR.match(child.name)
            if match and int(match.group(1)) != self._generation:
                logger.info("removing %s, left by an interrupted HNSW build", child)
                shutil.rmtree(child)


def _write_sidecar(path: Path, schema: VectorSchema, generation: int) -> None:
    """Atomic and durable (write, fsync, rename), since it also says which generation is live."""
    state = {"format": _FORMAT, "identity": schema.identity, "sizes": dict(schema.sizes), "generation": generation}
    with written_whole(path / SIDECAR) as partial:
        partial.write_text(json.dumps(state, indent=2) + "\n")


@contextmanager
def _holding(path: Path) -> Iterator[None]:
    """Hold the WAL lock of every shard under `path`: a running service holds the live one, so this refuses a store
    in use, and no service opens it while held. A shard that does not load is no obstacle: replacing a damaged store
    is what a restore is for."""
    with ExitStack() as held:
        for shard_dir in sorted(path.glob("shard-*")):
            try:
                shard = EdgeShard.load(str(shard_dir))
            except Exception as e:
                if "WouldBlock" in str(e):
                    raise StoreUnavailableError(
                        f"{path} is open in a running service (its WAL is locked): stop the service, then restore"
                    ) from e
                logger.info("%s does not load (%s); the restore replaces it", shard_dir, e)
                continue
            held.callback(shard.close)
        yield


def _unpack(source: Path, target: Path, schema: VectorSchema) -> int:
    """Extract a snapshot made for `schema`'s bundle and return its generation; zero blocks become holes, so the
    engine's sparse files stay sparse."""
    try:
        with tarfile.open(source, "r:gz") as archive:
            for member in archive:
                member = tarfile.data_filter(member, str(target))  # no absolute paths, '..' or links out
                path = target / member.name
                if member.isdir():
                    path.mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isfile():
                    raise InvalidInputError(f"{source}: {member.name} is not a file: not a metricsearch snapshot")
                path.parent.mkdir(parents=True, exist_ok=True)
                with archive.extractfile(member) as src, path.open("wb") as dst:
                    while block := src.read(_UNPACK_CHUNK):
                        if block.count(0) == len(block):
                            dst.seek(len(block), 1)
                        else:
                            dst.write(block)
                    dst.truncate(member.size)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise InvalidInputError(f"{source} is not a readable snapshot archive ({e})") from e
    if not (target / SIDECAR).is_file():
        raise InvalidInputError(f"{source} holds no {SIDECAR}: it is not a metricsearch snapshot")
    try:
        state = json.loads((target / SIDECAR).read_text())
        identity, sizes, generation = state["identity"], state["sizes"], int(state["generation"])
    except (ValueError, KeyError, TypeError) as e:
        raise InvalidInputError(f"{source}: its {SIDECAR} is damaged ({e!r})") from e
    check_schema(
        identity,
        sizes,
        schema,
        where=f"The snapshot {source}",
        fix="Restore it with the bundle that made it (MS_BUNDLE_DIR), or re-index the catalog.",
    )
    if not (target / f"shard-{generation}").is_dir():
        raise InvalidInputError(f"{source} holds no shard-{generation}/, which its {SIDECAR} names: it is damaged")
    return generation


def _swap_in_snapshot(path: Path, staged_shard: Path, schema: VectorSchema) -> list[Path]:
    """Move the staged shard into the store as its next generation, then make that generation live by rewriting
    `store.json`: one atomic rename, before which the old store is whole and after which the new one is (the next
    open removes the other generation). Returns the old generations' folders, for the caller to remove."""
    fsync_tree(staged_shard)
    generations = {int(m.group(1)): child for child in path.iterdir() if (m := _SHARD_DIR.match(child.name))}
    generation = 1 + max(generations, default=0)
    staged_shard.rename(path / f"shard-{generation}")
    # No cleanup when this fails: whether the rename happened, only store.json says, and the next open removes
    # whichever generation it does not name.
    _write_sidecar(path, schema, generation)
    return list(generations.values())


def _index_type(data_type: PayloadSchemaType) -> str:
    """The engine's index type by the name MS_INDEXED_FIELDS gives it (`PayloadSchemaType.Float` is 'float')."""
    return str(data_type).rsplit(".", 1)[-1].lower()


def _schema_type(kind: str) -> PayloadSchemaType:
    return getattr(PayloadSchemaType, kind.capitalize())


def _sparse_query(name: str, query: SparseVector) -> Query:
    return Query.Nearest(EdgeSparseVector(query.indices.tolist(), query.values.tolist()), using=name)


def _filter(conditions: Sequence[Condition], exclude_ids: Sequence[str]) -> Filter | None:
    must = [_condition(c) for c in conditions]
    must_not = [HasIdCondition({point_id(i) for i in exclude_ids})] if exclude_ids else []
    if not must and not must_not:
        return None
    return Filter(must=must or None, must_not=must_not or None)


def _condition(condition: Condition) -> FieldCondition | Filter:
    path = metadata_path(condition.key)
    if isinstance(condition, Equals):
        if isinstance(condition.value, bool):
            # qdrant-edge 0.9 reads a Python bool as the integer 1 or 0, which never matches a stored bool;
            # numpy's bool converts as a bool.
            return FieldCondition(path, match=MatchValue(np.bool_(condition.value)))
        if is_number(condition.value):
            return FieldCondition(path, range=RangeFloat(gte=condition.value, lte=condition.value))
        return FieldCondition(path, match=MatchValue(condition.value))
    if isinstance(condition, AnyOf):
        strings, numbers = any_of_parts(condition.values)
        matches = [FieldCondition(path, match=MatchAny(strings))] if strings or not numbers else []
        if numbers:
            matches.append(
                one_of_numbers(
                    numbers,
                    lambda lo, hi: FieldCondition(path, range=RangeFloat(gte=lo, lte=hi)),
                    lambda conditions: Filter(should=conditions),
                    lambda span, inner: Filter(must=[span, inner]),
                )
            )
        return matches[0] if len(matches) == 1 else Filter(should=matches)
    return FieldCondition(path, range=RangeFloat(gte=condition.gte, lte=condition.lte))


def _ms_since(start: float, end: float | None = None) -> float:
    return round(((time.perf_counter() if end is None else end) - start) * 1000, 1)


def _copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(source, target, copy_function=_copy_sparse)


def _copy_sparse(source: str, target: str) -> None:
    """Copy only a file's data extents: the engine preallocates sparse 32 MiB files (WAL, vector chunks, payload
    pages) that a plain copy would write out in full (164 MB for a 2 MB shard)."""
    with open(source, "rb") as fin, open(target, "wb") as fout:
        src, dst = fin.fileno(), fout.fileno()
        size = os.fstat(src).st_size
        position = 0
        while position < size:
            try:
                data = os.lseek(src, position, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:  # only a hole is left
                    break
                raise
            hole = os.lseek(src, data, os.SEEK_HOLE)
            while data < hole:
                chunk = os.pread(src, min(_COPY_CHUNK, hole - data), data)
                if not chunk:
                    break
                os.pwrite(dst, chunk, data)
                data += len(chunk)
            position = hole
        os.ftruncate(dst, size)
