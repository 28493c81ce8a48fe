"""One bundle's request path over one store: `answer(request)` serves /similar and every query of /similar/batch
alike (the answer cache for a plain query by id, then the queries, then the ranker); `similar` and `similar_batch`
add what a request needs around it (its text limits, its texts encoded through the query batcher, the thread it
runs in). Routes only translate HTTP to these calls, so a request crosses routes -> engine -> store once."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import anyio
import anyio.to_thread

from metricsearch.core.bundle import Manifest
from metricsearch.core.errors import (
    InvalidInputError,
    MetricSearchError,
    NotFoundError,
    PayloadTooLargeError,
    StoreUnavailableError,
    TimedOutError,
)
from metricsearch.core.lexical import lexical_fields
from metricsearch.core.records import Match
from metricsearch.core.rerank import Reranker
from metricsearch.core.schemas import SimilarRequest
from metricsearch.encoder import Encoder
from metricsearch.service.batcher import QueryBatcher
from metricsearch.service.cache import AnswerCache
from metricsearch.service.engine.indexer import Indexer, IndexResult
from metricsearch.service.engine.layout import FieldLayout
from metricsearch.service.engine.lexical_scores import LexicalScores
from metricsearch.service.engine.limits import Limits
from metricsearch.service.engine.queries import Query, QueryBuilder, TextQuery
from metricsearch.service.engine.ranker import Options, Ranker
from metricsearch.service.engine.recheck import Recheck
from metricsearch.service.engine.statistics import Statistics
from metricsearch.service.store.base import Condition, Store, StoredItem

QUERY_FAULTS = (InvalidInputError, NotFoundError, PayloadTooLargeError)
"""A batch query's own mistakes, answered in its place; anything else (overload, store down) fails the whole batch,
since every query would meet it."""

T = TypeVar("T")


def answer_key(item_id: str, k: int, conditions: Sequence[Condition], exclude_ids: Sequence[str]) -> bytes:
    """A fixed-size key of the normalised request: a large filter costs its hash, not its size, in the cache."""
    request = repr((item_id, k, tuple(conditions), tuple(exclude_ids))).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(request, digest_size=16).digest()


class StoreCalls:
    """Where a request that calls the store runs. `threads=None` (the embedded engine): on the event loop, since the
    engine holds the GIL for each call (about 2 ms, QDRANT_EDGE.md), so a thread hop would add latency without adding
    throughput. `threads=n` (a Qdrant server, whose calls wait on the network up to MS_QDRANT_TIMEOUT_S): in worker
    threads, at most n at once, and one more fails at once (503) rather than queue behind a slow server."""

    def __init__(self, threads: int | None = None, where: str = "the store") -> None:
        self._limiter = anyio.CapacityLimiter(threads) if threads else None
        self._where = where

    async def run(self, call: Callable[..., T], *args: object) -> T:
        if self._limiter is None:
            return call(*args)
        if self._limiter.available_tokens < 1:
            raise StoreUnavailableError(
                f"{self._limiter.total_tokens:g} requests are waiting for {self._where} already "
                "(MS_QDRANT_MAX_IN_FLIGHT): it is slow; retry shortly",
                retry_after_s=1,
            )
        return await anyio.to_thread.run_sync(call, *args, limiter=self._limiter)


@dataclass(frozen=True)
class Answered:
    """One query of a batch, answered: its matches and the milliseconds its ranking took."""

    matches: list[Match]
    took_ms: float


def text_query(request: SimilarRequest) -> TextQuery | None:
    """The request's text query; None for a query by id or ids."""
    if request.id is not None or request.positive_ids is not None:
        return None
    return TextQuery(request.text, request.title, request.description)


class Engine:
    """The indexer, the query builder, the ranker and the catalog statistics of one bundle over one store."""

    def __init__(
        self,
        manifest: Manifest,
        encoder: Encoder,
        store: Store,
        *,
        candidates_min: int,
        candidates_factor: int,
        max_candidates: int = 5000,
        batcher: QueryBatcher | None = None,
        answers: AnswerCache | None = None,
        timeout_s: float = 10.0,
        store_calls: StoreCalls | None = None,
        limits: Limits | None = None,
        index_batch_size: int = 64,
        on_indexed: Callable[[IndexResult], None] | None = None,
    ) -> None:
        """`answers`: the answer cache (None: none); `limits`: the request size limits (None: unlimited);
        `on_indexed`: counts what each /index request wrote (the metrics)."""
        self.manifest = manifest
        self.encoder = encoder
        self.store = store
        self.answers = AnswerCache(0) if answers is None else answers  # an empty cache is falsy
        self.timeout_s = timeout_s
        self.store_calls = StoreCalls() if store_calls is None else store_calls
        self.limits = limits
        self.rerank = Reranker(manifest)
        self.layout = FieldLayout(manifest, encoder)
        lexical = lexical_fields(manifest)
        scores = LexicalScores(lexical, self.layout.fields, store) if lexical else None
        self.statistics = Statistics(store, self.layout, self.rerank, scores, on_change=self.answers.clear)
        self.indexer = Indexer(
            store,
            encoder,
            self.layout,
            lexical,
            self.statistics,
            limits=limits,
            batch_size=index_batch_size,
            answers=self.answers,
            on_indexed=on_indexed,
        )
        self.queries = QueryBuilder(store, self.layout, lexical, batcher, timeout_s)
        self.ranker = Ranker(
            store,
            self.layout,
            self.rerank,
            scores,
            self.statistics,
            candidates_min=candidates_min,
            candidates_factor=candidates_factor,
            max_candidates=max_candidates,
        )
        self.recheck = Recheck(store, self.ranker, self.rerank, scores, self.statistics, self.answers)

    # ---------------------------------------------------------------- one query
    def answer(self, request: SimilarRequest, text: Query | None = None) -> list[Match]:
        """The ranking a request asks for, in the calling thread; `text`: its text query, encoded (`similar` does
        that; None for a query by id or ids)."""
        conditions = request.conditions()
        if text is None and request.id is not None and request.plain:
            return self._cached(request.id, request.k, conditions, request.exclude_ids)
        exclude = list(request.exclude_ids)
        negatives: list[Query] = []
        if text is not None:
            positives = [text]
        elif request.id is not None:
            positives = [self.queries.of_id(request.id)]
            exclude.append(request.id)
        else:
            positive_ids, negative_ids = request.positive_ids or [], request.negative_ids or []
            positives = self.queries.of_ids(positive_ids, "positive id")
            negatives = self.queries.of_ids(negative_ids, "negative id")
            exclude += [*positive_ids, *negative_ids]
        return self.ranker.rank(positives, request.k, conditions, exclude, negatives, Options.of(request))

    def similar_to_item(
        self, item_id: str, k: int, conditions: Sequence[Condition] = (), exclude_ids: Sequence[str] = ()
    ) -> list[Match]:
        """More like a stored item, from its stored vectors; the item itself is never among the results."""
        return self.ranker.rank([self.queries.of_id(item_id)], k, conditions, [*exclude_ids, item_id])

    def _cached(self, item_id: str, k: int, conditions: Sequence[Condition], exclude_ids: Sequence[str]) -> list[Match]:
        """`similar_to_item`, answered from the answer cache until a write can change the answer (cache.py); an
        unfiltered one is checked after writes of texts (recheck.py)."""
        if not self.answers.enabled:
            return self.similar_to_item(item_id, k, conditions, exclude_ids)
        key = answer_key(item_id, k, conditions, exclude_ids)
        generation = self.answers.generation  # before the read: see cache.py
        cached = self.answers.lookup(key)
        if cached is not None and cached.written == frozenset():
            return cached.matches
        if conditions:  # a filtered answer is not checked: a write of texts drops it
            if cached is not None:
                self.answers.rechecked(False)
            matches = self.similar_to_item(item_id, k, conditions, exclude_ids)
            self.answers.put(generation, key, matches, [condition.key for condition in conditions])
            return matches
        query = self.queries.of_id(item_id)
        if cached is not None:
            checked = self.recheck.checked(item_id, query, k, exclude_ids, cached)
            quiet = self.answers.quiet_since(generation)  # else a write landed meanwhile: the check may predate it
            self.answers.rechecked(checked is not None and quiet)
            if checked is not None and quiet:
                matches, margin = checked
                self.answers.put(generation, key, matches, margin=margin)
                return matches
            if not quiet:  # the ranking anew reads the store after that write, and may be kept
                generation = self.answers.generation
                query = self.queries.of_id(item_id)
        matches, margin = self.recheck.rank(query, k, [*exclude_ids, item_id])
        self.answers.put(generation, key, matches, margin=margin)
        return matches

    def get(self, item_id: str) -> StoredItem:
        found = self.store.get([item_id]).get(item_id)
        if found is None:
            raise NotFoundError(f"no item with id {item_id!r}")
        return found

    # ---------------------------------------------------------------- requests
    async def similar(self, request: SimilarRequest) -> list[Match]:
        """A /similar request: a plain one where store calls run (see StoreCalls), one with more options in a worker
        thread, since it may rank thousands of candidates against several queries."""
        query = text_query(request)
        text = None
        if query is not None:
            self._check_texts(request, "query")
            [text] = await self.queries.of_texts([query])
        if request.plain:
            return await self.store_calls.run(self.answer, request, text)
        return await anyio.to_thread.run_sync(self.answer, request, text)

    async def similar_batch(self, requests: Mapping[int, SimilarRequest]) -> dict[int, Answered | MetricSearchError]:
        """Several /similar requests: each one's answer, or the error of its own mistake (QUERY_FAULTS) or of the
        time left. Their texts are encoded in one encoder call; they are ranked in turn in one worker thread until
        MS_REQUEST_TIMEOUT_S, since a batch of the costliest queries could otherwise hold a worker for minutes."""
        deadline = time.monotonic() + self.timeout_s
        results: dict[int, Answered | MetricSearchError] = {}
        texts: dict[int, TextQuery] = {}
        for n, request in requests.items():
            query = text_query(request)
            if query is None:
                continue
            try:
                self._check_texts(request, f"queries.{n}")
            except PayloadTooLargeError as exc:
                results[n] = exc
                continue
            texts[n] = query
        encoded = dict(zip(texts, await self.queries.of_texts(list(texts.values())), strict=True)) if texts else {}
        todo = {n: r for n, r in requests.items() if n not in results}
        results |= await anyio.to_thread.run_sync(self._answer_all, todo, encoded, deadline)
        return results

    def _answer_all(
        self, requests: Mapping[int, SimilarRequest], encoded: Mapping[int, Query], deadline: float
    ) -> dict[int, Answered | MetricSearchError]:
        results: dict[int, Answered | MetricSearchError] = {}
        for n, request in requests.items():
            if time.monotonic() >= deadline:
                results[n] = TimedOutError(
                    f"queries.{n}: not answered, the batch ran past {self.timeout_s:g} s "
                    "(MS_REQUEST_TIMEOUT_S): send the queries left in smaller batches"
                )
                continue
            started = time.perf_counter()
            try:
                matches = self.answer(request, encoded.get(n))
            except QUERY_FAULTS as exc:
                results[n] = exc
                continue
            results[n] = Answered(matches, round((time.perf_counter() - started) * 1000, 3))
        return results

    def _check_texts(self, request: SimilarRequest, where: str) -> None:
        if self.limits is not None:
            self.limits.check_texts(request.title, request.text or request.description, where)

    def close(self) -> None:
        """Stop a background statistics estimate, before the store closes."""
        self.statistics.close()
