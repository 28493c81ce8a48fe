"""The Store on a Qdrant server or cluster (or qdrant-client's local mode, which speaks the same API: tests).

The collection records the bundle that built it in its metadata; a server too old for collection metadata loses
that record, and then only the vector names and sizes are checked. A service may start while Qdrant is down: the
collection is opened (or created) by the first call that finds the server answering, so readiness recovers without
a restart when Qdrant comes back. Once open, a collection that vanishes (the server lost or deleted its data) is an
error state, never recreated empty behind the users' back: it is unready until the collection is back (a restored
snapshot) or the service restarts, which creates it empty to re-index.

A model rollout (service/rollout.py, `Generations` here) keeps the served name `<collection>` and moves what it names:
the plain collection `<collection>` a first start creates, then after each swap a collection `<collection>.r<n>`
behind the alias `<collection>`. The store resolves the name when it opens (`served_collection`) and from then on
works on that collection, so a store a swap retired keeps working on its own until it is closed.

Search reads candidates' ids, scores and listings; their vectors (all the rerank needs besides) come from a
byte-bounded cache keyed by (point, content hash), and only the points it lacks are read with their vectors, in one
more call: a warm service moves no vectors as JSON, where every search used to read each candidate's (with a
second-order bundle, tens of thousands of floats per candidate).

Every call goes through a CallGuard (guard.py): a bound on the calls in flight and a circuit breaker, so a hung
server costs each caller one call timeout at most, then 503 at once. The calls are blocking: the service makes them
off the event loop (service/search.py), so a slow server never stalls /healthz.

Snapshots are the server's own collection snapshots (create, download, delete on the server), restored by uploading
one. A snapshot (a tar) holds the collection's config.json with the metadata that records the bundle: restore checks
it before the upload replaces the collection."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import tarfile
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

import httpx
import numpy as np
from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from metricsearch.core.errors import InvalidInputError, StoreMismatchError, StoreUnavailableError
from metricsearch.core.lexical import SparseVector
from metricsearch.core.records import point_id
from metricsearch.service.cache import VectorCache
from metricsearch.service.config import Settings
from metricsearch.service.store import base
from metricsearch.service.store.atomic import written_whole
from metricsearch.service.store.auto_index import AutoIndex
from metricsearch.service.store.base import (
    AnyOf,
    Condition,
    Equals,
    SearchResult,
    SnapshotReport,
    StoredItem,
    VectorSchema,
)
from metricsearch.service.store.guard import CallGuard
from metricsearch.service.store.payload import (
    aligned_scores,
    any_of_parts,
    check_schema,
    from_payload,
    is_number,
    metadata_path,
    one_of_numbers,
    search_result,
    sparse_lists,
    stored_kinds,
    sync_indexes,
    to_payload,
    vector_lists,
)

logger = logging.getLogger(__name__)

METADATA_KEY = "metricsearch"
"""Key of the collection metadata that records the bundle which built the collection."""
_TRANSFER_TIMEOUT_S = 600
_TRANSFER_CHUNK = 1 << 16
_TRANSFER_ERRORS = (httpx.HTTPError, ResponseHandlingException, UnexpectedResponse, OSError)
_LISTED = ["id", "title", "metadata", "content_hash"]
"""What a search reads of each candidate's payload: its listing and the hash that keys its vectors."""
NEXT = ".next"
"""Suffix of the alias a swap away from a plain collection points first (Generations)."""


def is_generation(name: str) -> bool:
    """A collection a model rollout made, `<collection>.r<n>`: opened by that name, never through an alias."""
    return re.fullmatch(r".+\.r\d+", name) is not None


def served_collection(client: QdrantClient, name: str) -> str | None:
    """The collection that serves the name `name`: the target of the alias `<name>.next` while a swap away from the
    plain collection `<name>` is unfinished, else of the alias `<name>`, else the plain collection; None if none."""
    aliases = {a.alias_name: a.collection_name for a in client.get_aliases().aliases}
    target = aliases.get(name + NEXT) or aliases.get(name)
    if target is not None:
        return target
    return name if client.collection_exists(name) else None


class RemoteStore:
    """The Store on one collection; creates it (named cosine vectors, `shards` x `replication` on a cluster) when
    missing, and keeps payload indexes on the metadata keys of `indexed_fields` ({key: type}, payload.sync_indexes;
    None leaves the collection's indexes as they are; `auto_index_max`: with `indexed_fields`, learn up to this many
    more from filters and keep those learned before, auto_index.py). `collection` is a served name (resolved when
    the store opens, see served_collection) or a rollout's `<collection>.r<n>`; a collection it creates records the
    bundle's identity and `bundle_dir` (the bundle a restart serves it with, service/rollout.py). Owns `client` from
    the start: closed by close() or when opening fails. `url` only names the server in error messages. With
    `wait_for_server`, a server that does not answer yet is not an error: every call retries opening the collection
    (and raises StoreUnavailableError until it can)."""

    lexical_in_process = False  # lexical_scores: a query to the server

    def __init__(
        self,
        client: QdrantClient,
        collection: str,
        schema: VectorSchema,
        *,
        url: str | None = None,
        shards: int | None = None,
        replication: int | None = None,
        wait_for_server: bool = False,
        guard: CallGuard | None = None,
        vector_cache_mb: float = 256,
        indexed_fields: Mapping[str, str] | None = None,
        auto_index_max: int | None = None,
        on_auto_index: Callable[[str], None] | None = None,
        bundle_dir: Path | None = None,
    ) -> None:
        self._client = client
        self._indexed_fields = indexed_fields
        self._auto_index_max = auto_index_max
        self._vectors = VectorCache(int(vector_cache_mb * 2**20))
        self._name = collection
        self._collection = collection
        """The collection itself, once the store opened it (`_name` resolved)."""
        self._bundle_dir = bundle_dir
        self._schema = schema
        self._url = url or "the Qdrant server"
        self._layout = collection_layout(shards, replication)
        self._guard = guard or CallGuard(
            f"Qdrant at {url}" if url else self._url, max_in_flight=16, failures=3, open_s=2.0
        )
        self.auto_index = AutoIndex(
            limit=auto_index_max or 0,
            kinds=self.metadata_kinds,
            create=self.create_index,
            where=f"collection {collection!r} on {self._url}",
            on_outcome=on_auto_index,
        )
        self._open_lock = threading.Lock()
        self._opened = False
        self._vanished = False
        """Set once the open collection disappeared: it is not created again by this process."""
        try:
            with self._guard.call():
                self._ensure_open()
        except StoreUnavailableError as e:
            if not wait_for_server:
                client.close()
                raise
            logger.warning("%s; not ready until it answers (readiness probes and requests retry)", e)
        except BaseException:
            client.close()
            raise

    @classmethod
    def connect(
        cls,
        url: str,
        collection: str,
        schema: VectorSchema,
        *,
        api_key: str | None = None,
        timeout_s: float = 5.0,
        shards: int | None = None,
        replication: int | None = None,
        wait_for_server: bool = False,
        guard: CallGuard | None = None,
        vector_cache_mb: float = 256,
        indexed_fields: Mapping[str, str] | None = None,
        auto_index_max: int | None = None,
        on_auto_index: Callable[[str], None] | None = None,
        bundle_dir: Path | None = None,
    ) -> RemoteStore:
        client = QdrantClient(url=url, api_key=api_key, timeout=math.ceil(timeout_s), check_compatibility=False)
        return cls(
            client,
            collection,
            schema,
            url=url,
            shards=shards,
            replication=replication,
            wait_for_server=wait_for_server,
            guard=guard,
            vector_cache_mb=vector_cache_mb,
            indexed_fields=indexed_fields,
            auto_index_max=auto_index_max,
            on_auto_index=on_auto_index,
            bundle_dir=bundle_dir,
        )

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        schema: VectorSchema,
        *,
        wait_for_server: bool = False,
        on_auto_index: Callable[[str], None] | None = None,
    ) -> RemoteStore:
        assert settings.qdrant_url is not None, "the server store needs MS_QDRANT_URL"
        return cls.connect(
            settings.qdrant_url,
            settings.collection,
            schema,
            api_key=_api_key(settings),
            timeout_s=settings.qdrant_timeout_s,
            shards=settings.qdrant_shards,
            replication=settings.qdrant_replication,
            wait_for_server=wait_for_server,
            guard=CallGuard(
                f"Qdrant at {settings.qdrant_url}",
                max_in_flight=settings.qdrant_max_in_flight,
                failures=settings.qdrant_breaker_failures,
                open_s=settings.qdrant_breaker_open_s,
            ),
            vector_cache_mb=settings.qdrant_vector_cache_mb,
            indexed_fields=settings.indexed_fields,
            auto_index_max=settings.auto_index_max if settings.auto_index else None,
            on_auto_index=on_auto_index,
            bundle_dir=settings.bundle_dir.resolve(),
        )

    # --- snapshots: a client of their own, not an open store, which would create a missing collection

    @classmethod
    def create_snapshot(cls, settings: Settings, schema: VectorSchema, target: Path) -> SnapshotReport:
        client, url, headers = _transfer_client(settings)
        collection = settings.collection
        try:
            snapshot = client.create_snapshot(collection, wait=True)
            if snapshot is None:
                raise StoreUnavailableError(f"Qdrant at {url} made no snapshot of {collection!r}")
            try:
                with (
                    written_whole(target) as partial,
                    httpx.stream(
                        "GET",
                        f"{url}/collections/{collection}/snapshots/{snapshot.name}",
                        headers=headers,
                        timeout=_TRANSFER_TIMEOUT_S,
                    ) as response,
                ):
                    response.raise_for_status()
                    with partial.open("wb") as f:
                        for block in response.iter_bytes(_TRANSFER_CHUNK):
                            f.write(block)
            finally:
                client.delete_snapshot(collection, snapshot.name, wait=True)
            items = client.count(collection, exact=True).count
        except _TRANSFER_ERRORS as e:
            raise StoreUnavailableError(f"snapshot of {collection!r} on {url} failed: {e}") from e
        finally:
            client.close()
        return SnapshotReport(target, items, target.stat().st_size)

    @classmethod
    def restore_snapshot(
        cls, settings: Settings, schema: VectorSchema, source: Path, *, overwrite: bool = False
    ) -> SnapshotReport:
        """Upload the snapshot; the server recovers the collection from it (replacing it is Qdrant's part)."""
        _check_server_snapshot(source, schema)
        client, url, headers = _transfer_client(settings)
        collection = settings.collection
        try:
            if client.collection_exists(collection) and not overwrite:
                raise InvalidInputError(f"collection {collection!r} exists on {url}: pass --overwrite to replace it")
            with source.open("rb") as f:
                response = httpx.post(
                    f"{url}/collections/{collection}/snapshots/upload",
                    params={"priority": "snapshot", "wait": "true"},
                    files={"snapshot": (source.name, f)},
                    headers=headers,
                    timeout=_TRANSFER_TIMEOUT_S,
                )
            response.raise_for_status()
            items = client.count(collection, exact=True).count
        except _TRANSFER_ERRORS as e:
            raise StoreUnavailableError(f"restore of {collection!r} on {url} failed: {e}") from e
        finally:
            client.close()
        return SnapshotReport(source, items, source.stat().st_size)

    # --- Store

    def upsert(self, items: Sequence[StoredItem]) -> None:
        if not items:
            return
        points = [
            qm.PointStruct(id=point_id(it.id), vector=self._point_vectors(it), payload=to_payload(it)) for it in items
        ]
        with self._serving():
            self._client.upsert(self._collection, points=points, wait=True)

    def _point_vectors(self, item: StoredItem) -> dict[str, Any]:
        sparse = sparse_lists(item, self._schema.sparse)
        return {
            **vector_lists(item, self._schema.sizes),
            **{name: qm.SparseVector(indices=i, values=v) for name, (i, v) in sparse.items()},
        }

    def get(self, ids: Sequence[str], *, with_vectors: bool = False) -> dict[str, StoredItem]:
        point_ids = list(dict.fromkeys(point_id(i) for i in ids))
        if not point_ids:
            return {}
        with self._serving():
            records = self._client.retrieve(
                self._collection, ids=point_ids, with_payload=True, with_vectors=with_vectors
            )
        vectors = (r.vector if with_vectors else None for r in records)
        items = (from_payload(r.payload or {}, v, self._schema.sizes) for r, v in zip(records, vectors, strict=True))  # type: ignore[arg-type]
        return {item.id: item for item in items}

    def delete(self, ids: Sequence[str]) -> int:
        point_ids = list(dict.fromkeys(point_id(i) for i in ids))
        if not point_ids:
            return 0
        with self._serving():
            found = self._client.retrieve(self._collection, ids=point_ids, with_payload=False, with_vectors=False)
            if found:
                self._client.delete(
                    self._collection, points_selector=qm.PointIdsList(points=[r.id for r in found]), wait=True
                )
        return len(found)

    def delete_where(self, conditions: Sequence[Condition]) -> int:
        where = _filter(conditions, ())
        if where is None:
            raise InvalidInputError("a delete by filter needs at least one condition")
        deleted = 0
        with self._serving():
            while True:
                records, _ = self._client.scroll(
                    self._collection,
                    scroll_filter=where,
                    limit=base.DELETE_PAGE,
                    with_payload=False,
                    with_vectors=False,
                )
                if not records:
                    break
                selector = qm.PointIdsList(points=[r.id for r in records])
                self._client.delete(self._collection, points_selector=selector, wait=True)
                deleted += len(records)
        if deleted:  # a filter that matched: its keys are held, so an index on them can serve it
            self.auto_index.saw(conditions)
        return deleted

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
        where = _filter(conditions, exclude_ids)
        dense = np.asarray(vector, dtype=np.float32).tolist()
        sparse = [(name, _sparse(query)) for name, query in (lexical or {}).items() if len(query)]
        # A result shows the version of the item it was scored on: vectors cached or read under the hash of the
        # payload they come with (without the cache, one call reads both together).
        read = {"with_payload": _LISTED, "with_vectors": not self._vectors.enabled and list(self._schema.sizes)}
        with self._serving():
            if sparse:  # the union of every prefetch's hits (RRF orders them; the rerank scores them)
                stages = [qm.Prefetch(query=dense, using=self._schema.ann, filter=where, limit=limit)]
                lexical_limit = base.lexical_limit(limit)
                stages += [qm.Prefetch(query=q, using=name, filter=where, limit=lexical_limit) for name, q in sparse]
                response = self._client.query_points(
                    self._collection,
                    prefetch=stages,
                    query=qm.FusionQuery(fusion=qm.Fusion.RRF),
                    limit=sum(stage.limit for stage in stages),
                    **read,
                )
            else:
                response = self._client.query_points(
                    self._collection, query=dense, using=self._schema.ann, query_filter=where, limit=limit, **read
                )
        if response.points:  # as in the embedded store: a filter that found nothing may be on keys no item holds
            self.auto_index.saw(conditions)
        hits = self._with_vectors(response.points) if self._vectors.enabled else response.points
        found = search_result(hits, self._schema.sizes)
        # A second call (a query's prefetch scores only its own hits): an item written in between is scored as it is
        # now, beside the vectors read with its hit.
        return replace(found, lexical=self.lexical_scores(scored, found.points, using)) if scored else found

    def _with_vectors(self, hits: Sequence[qm.ScoredPoint]) -> list[_Hit]:
        """The hits with their vectors, from the cache or, for the points it lacks, read in one call: a point
        updated meanwhile comes back as it is now (payload and vectors together), a point deleted meanwhile not at
        all."""
        found: dict[str, _Hit] = {}
        for hit in hits:
            content_hash = (hit.payload or {}).get("content_hash")
            vectors = self._vectors.get(self._collection, str(hit.id), content_hash) if content_hash else None
            if vectors is not None:
                found[str(hit.id)] = _Hit(hit.id, hit.score, hit.payload, vectors)
        missing = [hit.id for hit in hits if str(hit.id) not in found]
        if missing:
            with self._serving():
                records = self._client.retrieve(
                    self._collection, ids=missing, with_payload=_LISTED, with_vectors=list(self._schema.sizes)
                )
            score = {str(hit.id): hit.score for hit in hits}
            for record in records:
                named = record.vector if isinstance(record.vector, Mapping) else {}
                vectors = {name: np.asarray(named[name], dtype=np.float32) for name in self._schema.sizes}
                payload = record.payload or {}
                self._vectors.put(self._collection, str(record.id), payload.get("content_hash", ""), vectors)
                found[str(record.id)] = _Hit(record.id, score[str(record.id)], payload, vectors)
        return [found[str(hit.id)] for hit in hits if str(hit.id) in found]

    def sample(self, n: int) -> list[StoredItem]:
        with self._serving():
            records, _ = self._client.scroll(
                self._collection, limit=n, with_payload=True, with_vectors=list(self._schema.sizes)
            )
        return [from_payload(r.payload or {}, r.vector, self._schema.sizes) for r in records]  # type: ignore[arg-type]

    def scroll(self, offset: str | None, limit: int) -> tuple[list[StoredItem], str | None]:
        with self._serving():
            records, following = self._client.scroll(
                self._collection, offset=offset, limit=limit, with_payload=True, with_vectors=False
            )
        return [from_payload(r.payload or {}) for r in records], None if following is None else str(following)

    def points(self, ids: Sequence[str]) -> list[str]:
        return [point_id(i) for i in ids]

    def lexical_scores(
        self, queries: Mapping[str, SparseVector], points: Sequence[str], using: Mapping[str, str] | None = None
    ) -> dict[str, np.ndarray]:
        named = {name: query for name, query in queries.items() if len(query)}
        using = using or {}
        scores = {name: np.zeros(len(points)) for name in queries}
        if not named or not points:
            return scores
        only = qm.Filter(must=[qm.HasIdCondition(has_id=list(points))])
        requests = [
            qm.QueryRequest(
                query=_sparse(query), using=using.get(name, name), filter=only, limit=len(points), with_payload=False
            )
            for name, query in named.items()
        ]
        with self._serving():
            answers = self._client.query_batch_points(self._collection, requests=requests)
        scores.update({name: aligned_scores(a.points, points) for name, a in zip(named, answers, strict=True)})
        return scores

    def metadata_kinds(self, key: str) -> set[str]:
        """A guarded call a page, so requests keep their share of the calls in flight."""
        path = metadata_path(key)
        holding = qm.Filter(must_not=[qm.IsEmptyCondition(is_empty=qm.PayloadField(key=path))])

        def read_page(offset: object) -> tuple[list[dict | None], object]:
            with self._serving():
                records, offset = self._client.scroll(
                    self._collection, scroll_filter=holding, limit=1000, offset=offset, with_payload=[path]
                )
            return [record.payload for record in records], offset

        return stored_kinds(key, read_page)

    def create_index(self, key: str, kind: str) -> None:
        """Not waited for: the server builds it in the background, and a build over a large collection could outlast
        MS_QDRANT_TIMEOUT_S and count as an outage against the breaker. Filters answer the same meanwhile."""
        with self._serving(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Payload indexes have no effect")  # local mode (tests)
            self._client.create_payload_index(
                self._collection, metadata_path(key), qm.PayloadSchemaType(kind), wait=False
            )

    def count(self) -> int:
        with self._serving():
            return self._client.count(self._collection, exact=True).count

    def readiness(self) -> str | None:
        """None when the collection answers; else why not, at once while the breaker is open."""
        try:
            with self._serving():
                exists = self._client.collection_exists(self._collection)
                if not exists:
                    self._lost()
        except (StoreUnavailableError, StoreMismatchError) as e:
            logger.warning("not ready: %s", e)
            return str(e)
        return None

    def flush(self) -> None:
        """Nothing to do: writes wait for the server's acknowledgement, and its WAL makes them durable."""

    def optimize_now(self) -> None:
        """Nothing to do: the server's optimizer indexes new points by itself."""

    def close(self) -> None:
        self.auto_index.close()
        self._client.close()

    @property
    def collection(self) -> str:
        """The collection this store works on: its name resolved (a model rollout drops it once retired)."""
        return self._collection

    # --- collection

    @contextmanager
    def _serving(self) -> Iterator[None]:
        """One guarded call: the collection open, and server outages raised as StoreUnavailableError."""
        with self._guard.call():
            self._ensure_open()
            with self._answering():
                yield

    def _ensure_open(self) -> None:
        if self._opened:
            return
        with self._open_lock, self._answering():
            if not self._opened:
                self._open_collection()
                self._opened = True

    def _open_collection(self) -> None:
        served = None if is_generation(self._name) else served_collection(self._client, self._name)
        self._collection = served or self._name
        if not self._client.collection_exists(self._collection):
            if self._vanished:
                self._lost()
            try:
                self._create_collection()
                self._sync_indexes({})
                return
            except UnexpectedResponse as e:
                if e.status_code != 409:
                    raise
                # Another replica, started at the same time, created it first: check it like any existing one.
        info = self._client.get_collection(self._collection)
        params = info.config
        vectors = params.params.vectors
        named = vectors if isinstance(vectors, Mapping) else {"": vectors} if vectors is not None else {}
        where = f"Collection {self._collection!r} on {self._url}"
        not_cosine = {name: p.distance for name, p in named.items() if p.distance != qm.Distance.COSINE}
        if not_cosine:
            raise StoreMismatchError(
                f"{where} uses distances {not_cosine}; metricsearch needs Cosine. Set MS_COLLECTION to another name."
            )
        self._warn_on_other_layout(params.params)
        check_collection(
            (params.metadata or {}).get(METADATA_KEY),
            {name: p.size for name, p in named.items()},
            self._schema,
            where=where,
            fix=f"A model rollout swapped it in as {self._name!r}: restart the service, which serves it with the "
            "bundle it records (that bundle's folder must exist here), or set MS_BUNDLE_DIR to that bundle."
            if self._collection != self._name
            else "Set MS_COLLECTION to a new collection name to index with this bundle, "
            "or delete the collection and re-index the catalog with it.",
        )
        self._sync_indexes(
            {path: index.data_type.value for path, index in (info.payload_schema or {}).items() if index.data_type}
        )

    def _sync_indexes(self, existing: Mapping[str, str]) -> None:
        """Every replica does this at open; Qdrant keeps an index that exists with its type, so they agree."""
        if self._indexed_fields is None:
            return
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Payload indexes have no effect")  # local mode (tests)
            indexed = sync_indexes(
                existing,
                self._indexed_fields,
                create=lambda path, kind: self._client.create_payload_index(
                    self._collection, path, qm.PayloadSchemaType(kind), wait=True
                ),
                drop=lambda path: self._client.delete_payload_index(self._collection, path, wait=True),
                where=f"collection {self._collection!r} on {self._url}",
                keep_undeclared=self._auto_index_max is not None,
            )
        if self._auto_index_max is not None:
            self.auto_index.known(indexed, self._indexed_fields)

    def _warn_on_other_layout(self, params: qm.CollectionParams) -> None:
        """The service never reshards an existing collection; say so when the settings ask for another layout."""
        built = {"shard_number": params.shard_number, "replication_factor": params.replication_factor}
        differ = {k: (built[k], v) for k, v in self._layout.items() if built[k] is not None and built[k] != v}
        if differ:
            logger.warning(
                "collection %r on %s keeps its layout %s (built, asked); MS_QDRANT_SHARDS and MS_QDRANT_REPLICATION "
                "apply only when the service creates the collection (Qdrant's API changes replication of a live one)",
                self._collection,
                self._url,
                differ,
            )

    def _create_collection(self) -> None:
        self._client.create_collection(
            self._collection,
            vectors_config={
                # Vectors only read back for the rerank (second-order factors) need no HNSW graph.
                name: qm.VectorParams(
                    size=size,
                    distance=qm.Distance.COSINE,
                    hnsw_config=None if name == self._schema.ann else qm.HnswConfigDiff(m=0),
                )
                for name, size in self._schema.sizes.items()
            },
            sparse_vectors_config={
                name: qm.SparseVectorParams(modifier=qm.Modifier.IDF) for name in self._schema.sparse
            }
            or None,
            metadata={METADATA_KEY: self._record()},
            **self._layout,
        )
        with warnings.catch_warnings():
            # qdrant-client's local mode (tests) warns that it ignores payload indexes.
            warnings.filterwarnings("ignore", message="Payload indexes have no effect")
            self._client.create_payload_index(self._collection, "id", qm.PayloadSchemaType.KEYWORD, wait=True)

    def _record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"identity": self._schema.identity, "sizes": dict(self._schema.sizes)}
        return record | ({"bundle_dir": str(self._bundle_dir)} if self._bundle_dir else {})

    @contextmanager
    def _answering(self) -> Iterator[None]:
        """Server-side outages and refused keys become StoreUnavailableError (503); request errors stay bugs."""
        try:
            yield
        except UnexpectedResponse as e:
            if e.status_code == 404 and self._opened:
                self._lost()
            if e.status_code in (401, 403):
                raise StoreUnavailableError(
                    f"Qdrant at {self._url} refused the API key (HTTP {e.status_code}): set MS_QDRANT_API_KEY"
                ) from e
            if e.status_code is not None and e.status_code >= 500:
                raise StoreUnavailableError(f"Qdrant at {self._url} failed (HTTP {e.status_code}); retry later") from e
            raise
        except (ResponseHandlingException, httpx.TransportError, ConnectionError) as e:
            raise StoreUnavailableError(
                f"Qdrant at {self._url} does not answer ({e}): check MS_QDRANT_URL and that the server is up"
            ) from e

    def _lost(self) -> NoReturn:
        """The open collection is gone: an error state until it is back, never silently created empty again."""
        first = self._opened  # logged once per loss, not on every call that finds it still gone
        self._vanished, self._opened = True, False
        message = (
            f"collection {self._collection!r} vanished from Qdrant at {self._url} after this service opened it (its "
            "data was deleted or lost): restore a snapshot (`metricsearch snapshot restore`) and the service serves "
            "it again, or restart the service to create it empty and re-index the catalog"
        )
        if first:
            logger.error(message)
        raise StoreUnavailableError(message)


@dataclass(frozen=True)
class _Hit:
    """A scored point with its vectors from the cache or a read of its own (payload.search_result's Hit)."""

    id: Any
    score: float
    payload: Any
    vector: Mapping[str, np.ndarray]


def check_collection(
    record: Mapping[str, Any] | None, built_sizes: Mapping[str, int], schema: VectorSchema, *, where: str, fix: str
) -> None:
    """Refuse a collection (or a snapshot of one) that records another bundle, from its `METADATA_KEY` metadata
    record and vector sizes. One that records none (created elsewhere, or by a server without collection metadata)
    is accepted when its sizes fit."""
    if record is None and dict(built_sizes) == dict(schema.sizes):
        logger.warning("%s records no bundle; its vector sizes fit, so it is used as is", where)
        return
    check_schema((record or {}).get("identity", "(none recorded)"), built_sizes, schema, where=where, fix=fix)


def _api_key(settings: Settings) -> str | None:
    return settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None


def _transfer_client(settings: Settings) -> tuple[QdrantClient, str, dict[str, str]]:
    """A client with a timeout long enough for snapshot transfers, the server's URL and the headers for the REST
    calls made without the client (streamed download, multipart upload)."""
    assert settings.qdrant_url is not None, "the server store needs MS_QDRANT_URL"
    api_key = _api_key(settings)
    client = QdrantClient(
        url=settings.qdrant_url, api_key=api_key, timeout=_TRANSFER_TIMEOUT_S, check_compatibility=False
    )
    return client, settings.qdrant_url.rstrip("/"), ({"api-key": api_key} if api_key else {})


class Generations:
    """The collections a served name `<collection>` has on the server, as a model rollout moves it.

    Rollouts make `<collection>.r<n>`; after a swap the alias `<collection>` names the one served. A first start
    (and every deployment from before rollouts) serves the plain collection `<collection>` as generation 0, as is:
    moving it behind an alias at start-up would copy every point, and tools that read it by name keep working. The
    alias `<collection>` cannot be made while that plain collection holds the name, and the plain one stays for the
    requests that began on it (RETIRE_AFTER_S), so the first swap points the alias `<collection>.next` at the new
    collection instead (the commit point: `served_collection` prefers it); dropping the retired plain collection
    then moves the alias to `<collection>` (`finish`, one update). A crash between leaves `.next`, which the next
    start follows and finishes."""

    def __init__(self, settings: Settings) -> None:
        assert settings.qdrant_url is not None, "the server store needs MS_QDRANT_URL"
        self._name = settings.collection
        self._url = settings.qdrant_url
        self._client = QdrantClient(
            url=settings.qdrant_url,
            api_key=_api_key(settings),
            timeout=math.ceil(settings.qdrant_timeout_s),
            check_compatibility=False,
        )

    def __enter__(self) -> Generations:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()

    @contextmanager
    def _calls(self) -> Iterator[None]:
        try:
            yield
        except _TRANSFER_ERRORS as e:
            raise StoreUnavailableError(f"model rollout on Qdrant at {self._url} failed: {e}") from e

    def served(self) -> str | None:
        with self._calls():
            return served_collection(self._client, self._name)

    def record(self, collection: str) -> Mapping[str, Any]:
        """What the collection records of the bundle that built it (RemoteStore._record), {} when nothing."""
        with self._calls():
            metadata = self._client.get_collection(collection).config.metadata or {}
        record = metadata.get(METADATA_KEY)
        return record if isinstance(record, Mapping) else {}

    def names(self) -> list[str]:
        """The plain collection and the rollouts' collections of this name that exist."""
        with self._calls():
            names = [c.name for c in self._client.get_collections().collections]
        return [n for n in names if n == self._name or re.fullmatch(rf"{re.escape(self._name)}\.r\d+", n)]

    def point(self, target: str) -> None:
        """Serve `target` from now on: one alias update, atomic on the server."""
        with self._calls():
            aliases = self._aliases()
            plain = self._name not in aliases and self._client.collection_exists(self._name)
            pointers = [self._name + NEXT] if plain else [self._name, self._name + NEXT]
            operations: list[qm.AliasOperations] = [_delete_alias(a) for a in pointers if a in aliases]
            operations.append(_create_alias(pointers[0], target))
            self._client.update_collection_aliases(change_aliases_operations=operations)

    def drop(self, collection: str) -> None:
        """Delete a collection no longer served (a retired or aborted one)."""
        with self._calls():
            self._client.delete_collection(collection)
        if collection == self._name:
            self.finish()

    def remove_leftovers(self) -> None:
        """Delete what an interrupted rollout left (a half-built collection, one a swap retired) and finish a swap
        away from the plain collection."""
        served = self.served()
        if served is None:  # nothing served (a vanished collection): nothing here is known to be a leftover
            return
        for name in self.names():
            if name not in (served, self._name):
                logger.info("dropping collection %r on %s, left by a model rollout", name, self._url)
                self.drop(name)
        self.finish()

    def finish(self) -> None:
        """After a swap away from the plain collection: drop it, and move the alias `.next` to the served name."""
        with self._calls():
            aliases = self._aliases()
            target = aliases.get(self._name + NEXT)
            if target is None:
                return
            if self._name not in aliases and self._client.collection_exists(self._name):
                self._client.delete_collection(self._name)
            operations = [_delete_alias(self._name + NEXT)]
            operations += [_delete_alias(self._name)] if self._name in aliases else []
            operations.append(_create_alias(self._name, target))
            self._client.update_collection_aliases(change_aliases_operations=operations)

    def _aliases(self) -> dict[str, str]:
        return {a.alias_name: a.collection_name for a in self._client.get_aliases().aliases}


def _create_alias(alias: str, collection: str) -> qm.CreateAliasOperation:
    return qm.CreateAliasOperation(create_alias=qm.CreateAlias(collection_name=collection, alias_name=alias))


def _delete_alias(alias: str) -> qm.DeleteAliasOperation:
    return qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=alias))


def _check_server_snapshot(source: Path, schema: VectorSchema) -> None:
    """Refuse a snapshot of another bundle's collection (or not a Qdrant collection snapshot) before anything on the
    server changes: its config.json gives the vector sizes and the bundle record (the collection's metadata)."""
    try:
        with tarfile.open(source, "r:") as archive:  # a server writes plain tar; members are skipped by seeking
            member = next((m for m in archive if os.path.normpath(m.name) == "config.json" and m.isfile()), None)
            if member is None:
                raise InvalidInputError(f"{source} holds no config.json: it is not a Qdrant collection snapshot")
            config = json.loads(archive.extractfile(member).read())
        vectors = config["params"]["vectors"]
        named = {"": vectors} if "size" in vectors else vectors
        sizes = {name: int(params["size"]) for name, params in named.items()}
    except (tarfile.TarError, EOFError, OSError, ValueError, KeyError, TypeError) as e:
        raise InvalidInputError(f"{source} is not a readable Qdrant collection snapshot ({e!r})") from e
    check_collection(
        (config.get("metadata") or {}).get(METADATA_KEY),
        sizes,
        schema,
        where=f"The snapshot {source}",
        fix="Restore it with the bundle that made it (MS_BUNDLE_DIR), or re-index the catalog.",
    )


def collection_layout(shards: int | None, replication: int | None) -> dict[str, Any]:
    """create_collection's cluster arguments that are set: Qdrant's defaults stand for the others."""
    layout = {"shard_number": shards, "replication_factor": replication}
    return {k: v for k, v in layout.items() if v is not None}


def _sparse(query: SparseVector) -> qm.SparseVector:
    return qm.SparseVector(indices=query.indices.tolist(), values=query.values.tolist())


def _filter(conditions: Sequence[Condition], exclude_ids: Sequence[str]) -> qm.Filter | None:
    must = [_condition(c) for c in conditions]
    must_not: list[qm.Condition] = [qm.HasIdCondition(has_id=[point_id(i) for i in exclude_ids])] if exclude_ids else []
    if not must and not must_not:
        return None
    return qm.Filter(must=must or None, must_not=must_not or None)


def _condition(condition: Condition) -> qm.FieldCondition | qm.Filter:
    path = metadata_path(condition.key)
    if isinstance(condition, Equals):
        if is_number(condition.value):
            return qm.FieldCondition(key=path, range=qm.Range(gte=condition.value, lte=condition.value))
        return qm.FieldCondition(key=path, match=qm.MatchValue(value=condition.value))
    if isinstance(condition, AnyOf):
        strings, numbers = any_of_parts(condition.values)
        matches: list[qm.Condition] = (
            [qm.FieldCondition(key=path, match=qm.MatchAny(any=strings))] if strings or not numbers else []
        )
        if numbers:
            matches.append(
                one_of_numbers(
                    numbers,
                    lambda lo, hi: qm.FieldCondition(key=path, range=qm.Range(gte=lo, lte=hi)),
                    lambda conditions: qm.Filter(should=conditions),
                    lambda span, inner: qm.Filter(must=[span, inner]),
                )
            )
        return matches[0] if len(matches) == 1 else qm.Filter(should=matches)
    return qm.FieldCondition(key=path, range=qm.Range(gte=condition.gte, lte=condition.lte))
