"""The Store on a Qdrant server or cluster (or qdrant-client's local mode, which speaks the same API: tests).

The collection records the bundle that built it in its metadata (collection.py); a server too old for collection
metadata loses that record, and then only the vector names and sizes are checked. A service may start while Qdrant is
down: the collection is opened (or created) by the first call that finds the server answering, so readiness recovers
without a restart when Qdrant comes back. Once open, a collection that vanishes (the server lost or deleted its data)
is an error state, never recreated empty behind the users' back: it is unready until the collection is back (a
restored snapshot) or the service restarts, which creates it empty to re-index.

A model rollout keeps the served name `<collection>` and moves what it names (aliases.py). The store resolves the
name when it opens (`served_collection`) and from then on works on that collection, so a store a swap retired keeps
working on its own until it is closed.

Search reads candidates' ids, scores and listings; their vectors (all the rerank needs besides) come from a cache
(vectors.py).

Every call goes through a CircuitBreaker (breaker.py): a bound on the calls in flight and a circuit breaker, so a
hung server costs each caller one call timeout at most, then 503 at once. The calls are blocking: the service makes
them off the event loop (StoreTraits.call_threads), so a slow server never stalls /healthz."""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from metricsearch.core.errors import InvalidInputError, StoreMismatchError, StoreUnavailableError
from metricsearch.core.lexical import SparseVector
from metricsearch.core.records import point_id
from metricsearch.service.config import Settings
from metricsearch.service.store import base
from metricsearch.service.store.auto_index import AutoIndex
from metricsearch.service.store.base import (
    Condition,
    Listing,
    SearchResult,
    SnapshotReport,
    StoredItem,
    StoreTraits,
    VectorSchema,
)
from metricsearch.service.store.payload import (
    aligned_scores,
    from_payload,
    metadata_path,
    search_result,
    sparse_lists,
    stored_kinds,
    to_payload,
    vector_lists,
)
from metricsearch.service.store.remote import snapshot
from metricsearch.service.store.remote.breaker import CircuitBreaker
from metricsearch.service.store.remote.collection import collection_layout
from metricsearch.service.store.remote.connection import OpenCollection
from metricsearch.service.store.remote.filters import client_filter
from metricsearch.service.store.remote.server import api_key
from metricsearch.service.store.remote.vectors import LISTED, CandidateVectors

logger = logging.getLogger(__name__)


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
        breaker: CircuitBreaker | None = None,
        vector_cache_mb: float = 256,
        indexed_fields: Mapping[str, str] | None = None,
        auto_index_max: int | None = None,
        on_auto_index: Callable[[str], None] | None = None,
        bundle_dir: Path | None = None,
    ) -> None:
        self._client = client
        self._vectors = CandidateVectors(vector_cache_mb, schema.sizes)
        self._schema = schema
        where = url or "the Qdrant server"
        breaker = breaker or CircuitBreaker(
            f"Qdrant at {url}" if url else where, max_in_flight=16, failures=3, open_s=2.0
        )
        self.traits = server_traits(breaker.where, breaker.max_in_flight)
        self.auto_index = AutoIndex(
            limit=auto_index_max or 0,
            kinds=self.metadata_kinds,
            create=self.create_index,
            where=f"collection {collection!r} on {where}",
            on_outcome=on_auto_index,
        )

        def learned(indexed: dict[str, str]) -> None:
            if auto_index_max is not None and indexed_fields is not None:
                self.auto_index.known(indexed, indexed_fields)

        self._open = OpenCollection(
            client,
            collection,
            schema,
            url=where,
            layout=collection_layout(shards, replication),
            bundle_dir=bundle_dir,
            breaker=breaker,
            indexed_fields=indexed_fields,
            keep_learned=auto_index_max is not None,
            on_indexes=learned,
        )
        try:
            with breaker.call():
                self._open.ensure_open()
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
        **options: Any,
    ) -> RemoteStore:
        """The store on the server at `url`, through a client of its own; `options` are the constructor's."""
        client = QdrantClient(url=url, api_key=api_key, timeout=math.ceil(timeout_s), check_compatibility=False)
        return cls(client, collection, schema, url=url, **options)

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
            api_key=api_key(settings),
            timeout_s=settings.qdrant_timeout_s,
            shards=settings.qdrant_shards,
            replication=settings.qdrant_replication,
            wait_for_server=wait_for_server,
            breaker=CircuitBreaker(
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

    # --- snapshots (snapshot.py)

    @classmethod
    def create_snapshot(cls, settings: Settings, schema: VectorSchema, target: Path) -> SnapshotReport:
        items = snapshot.create(settings, target)
        return SnapshotReport(target, items, target.stat().st_size)

    @classmethod
    def restore_snapshot(
        cls, settings: Settings, schema: VectorSchema, source: Path, *, overwrite: bool = False
    ) -> SnapshotReport:
        items = snapshot.restore(settings, schema, source, overwrite=overwrite)
        return SnapshotReport(source, items, source.stat().st_size)

    # --- Store

    def upsert(self, items: Sequence[StoredItem]) -> None:
        if not items:
            return
        points = [
            qm.PointStruct(id=point_id(it.id), vector=self._point_vectors(it), payload=to_payload(it)) for it in items
        ]
        with self._open.serving():
            self._client.upsert(self.collection, points=points, wait=True)

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
        with self._open.serving():
            records = self._client.retrieve(
                self.collection, ids=point_ids, with_payload=True, with_vectors=with_vectors
            )
        vectors = (r.vector if with_vectors else None for r in records)
        items = (from_payload(r.payload or {}, v, self._schema.sizes) for r, v in zip(records, vectors, strict=True))  # type: ignore[arg-type]
        return {item.id: item for item in items}

    def delete(self, ids: Sequence[str]) -> int:
        point_ids = list(dict.fromkeys(point_id(i) for i in ids))
        if not point_ids:
            return 0
        with self._open.serving():
            found = self._client.retrieve(self.collection, ids=point_ids, with_payload=False, with_vectors=False)
            if found:
                self._client.delete(
                    self.collection, points_selector=qm.PointIdsList(points=[r.id for r in found]), wait=True
                )
        return len(found)

    def delete_where(self, conditions: Sequence[Condition]) -> int:
        where = client_filter(conditions, ())
        if where is None:
            raise InvalidInputError("a delete by filter needs at least one condition")
        deleted = 0
        with self._open.serving():
            while True:
                records, _ = self._client.scroll(
                    self.collection,
                    scroll_filter=where,
                    limit=base.DELETE_PAGE,
                    with_payload=False,
                    with_vectors=False,
                )
                if not records:
                    break
                selector = qm.PointIdsList(points=[r.id for r in records])
                self._client.delete(self.collection, points_selector=selector, wait=True)
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
        where = client_filter(conditions, exclude_ids)
        dense = np.asarray(vector, dtype=np.float32).tolist()
        sparse = [(name, _sparse(query)) for name, query in (lexical or {}).items() if len(query)]
        # A result shows the version of the item it was scored on: vectors cached or read under the hash of the
        # payload they come with (without the cache, one call reads both together).
        read = {"with_payload": LISTED, "with_vectors": not self._vectors.enabled and list(self._schema.sizes)}
        with self._open.serving():
            if sparse:  # the union of every prefetch's hits (RRF orders them; the rerank scores them)
                stages = [qm.Prefetch(query=dense, using=self._schema.ann, filter=where, limit=limit)]
                lexical_limit = base.lexical_limit(limit)
                stages += [qm.Prefetch(query=q, using=name, filter=where, limit=lexical_limit) for name, q in sparse]
                response = self._client.query_points(
                    self.collection,
                    prefetch=stages,
                    query=qm.FusionQuery(fusion=qm.Fusion.RRF),
                    limit=sum(stage.limit for stage in stages),
                    **read,
                )
            else:
                response = self._client.query_points(
                    self.collection, query=dense, using=self._schema.ann, query_filter=where, limit=limit, **read
                )
        if response.points:  # as in the embedded store: a filter that found nothing may be on keys no item holds
            self.auto_index.saw(conditions)
        if self._vectors.enabled:
            hits = self._vectors.with_vectors(self.collection, response.points, self._read_with_vectors)
        else:
            hits = response.points
        found = search_result(hits, self._schema.sizes)
        # A second call (a query's prefetch scores only its own hits): an item written in between is scored as it is
        # now, beside the vectors read with its hit.
        return replace(found, lexical=self.lexical_scores(scored, found.points, using)) if scored else found

    def _read_with_vectors(self, ids: list[Any]) -> list[qm.Record]:
        with self._open.serving():
            return self._client.retrieve(
                self.collection, ids=ids, with_payload=LISTED, with_vectors=list(self._schema.sizes)
            )

    def sample(self, n: int) -> list[StoredItem]:
        with self._open.serving():
            records, _ = self._client.scroll(
                self.collection, limit=n, with_payload=True, with_vectors=list(self._schema.sizes)
            )
        return [from_payload(r.payload or {}, r.vector, self._schema.sizes) for r in records]  # type: ignore[arg-type]

    def scroll(self, offset: str | None, limit: int) -> tuple[list[StoredItem], str | None]:
        with self._open.serving():
            records, following = self._client.scroll(
                self.collection, offset=offset, limit=limit, with_payload=True, with_vectors=False
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
        with self._open.serving():
            answers = self._client.query_batch_points(self.collection, requests=requests)
        scores.update({name: aligned_scores(a.points, points) for name, a in zip(named, answers, strict=True)})
        return scores

    def listed(
        self, ids: Sequence[str], scored: Mapping[str, SparseVector], using: Mapping[str, str] | None = None
    ) -> SearchResult:
        """Two calls, as a search's are: the points with their vectors, then their lexical scores."""
        found = list(self.get(ids, with_vectors=True).values())
        vectors = {
            name: np.array([item.vectors[name] for item in found], dtype=np.float32).reshape(len(found), size)
            for name, size in self._schema.sizes.items()
        }
        points = self.points([item.id for item in found])
        listings = [Listing(item.id, item.title, item.metadata) for item in found]
        scores = self.lexical_scores(scored, points, using) if scored else {}
        return SearchResult(listings, np.zeros(len(found), np.float32), vectors, points, scores)

    def term_idf(self, queries: Mapping[str, SparseVector], using: Mapping[str, str] | None = None) -> None:
        """None: the server computes the idf, and its answers are not cached (other replicas write it too)."""
        return None

    def metadata_kinds(self, key: str) -> set[str]:
        """A call through the breaker a page, so requests keep their share of the calls in flight."""
        path = metadata_path(key)
        holding = qm.Filter(must_not=[qm.IsEmptyCondition(is_empty=qm.PayloadField(key=path))])

        def read_page(offset: object) -> tuple[list[dict | None], object]:
            with self._open.serving():
                records, offset = self._client.scroll(
                    self.collection, scroll_filter=holding, limit=1000, offset=offset, with_payload=[path]
                )
            return [record.payload for record in records], offset

        return stored_kinds(key, read_page)

    def create_index(self, key: str, kind: str) -> None:
        """Not waited for: the server builds it in the background, and a build over a large collection could outlast
        MS_QDRANT_TIMEOUT_S and count as an outage against the breaker. Filters answer the same meanwhile."""
        with self._open.serving(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Payload indexes have no effect")  # local mode (tests)
            self._client.create_payload_index(
                self.collection, metadata_path(key), qm.PayloadSchemaType(kind), wait=False
            )

    def count(self) -> int:
        with self._open.serving():
            return self._client.count(self.collection, exact=True).count

    def readiness(self) -> str | None:
        """None when the collection answers; else why not, at once while the breaker is open."""
        try:
            with self._open.serving():
                exists = self._client.collection_exists(self.collection)
                if not exists:
                    self._open.lost()
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
        return self._open.collection

    @property
    def location(self) -> str:
        return self._open.collection


def server_traits(where: str, max_in_flight: int) -> StoreTraits:
    """Other replicas write the collection too, so no answer is cached; every call waits on the network, in a worker
    thread, as many at once as the circuit breaker lets wait."""
    return StoreTraits(cache_answers=False, call_threads=max_in_flight, where=where)


def _sparse(query: SparseVector) -> qm.SparseVector:
    return qm.SparseVector(indices=query.indices.tolist(), values=query.values.tolist())
