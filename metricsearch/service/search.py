"""The /similar use case, whole: by a stored item's id (answered from the answer cache until the next write) or by
text (the texts to encode, the query batcher under the request timeout, the per-field layout, the search). Routes
only translate HTTP to these calls, so a request crosses each layer once. The store calls run where StoreCalls says:
on the event loop for the embedded engine, in bounded worker threads for a Qdrant server."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import anyio
import anyio.to_thread

from metricsearch.core.errors import StoreUnavailableError, TimedOutError
from metricsearch.core.lexical import SparseVector
from metricsearch.core.records import Match
from metricsearch.core.rerank import FieldVectors
from metricsearch.core.spans import span
from metricsearch.service.batcher import QueryBatcher
from metricsearch.service.cache import AnswerCache
from metricsearch.service.catalog import Catalog
from metricsearch.service.store.base import Condition


@dataclass(frozen=True)
class TextQuery:
    """A free text (stands for every field), or a title with an optional description (compared field by field)."""

    text: str | None = None
    title: str | None = None
    description: str | None = None


def answer_key(item_id: str, k: int, conditions: Sequence[Condition], exclude_ids: Sequence[str]) -> bytes:
    """A fixed-size key of the normalised request: a large filter costs its hash, not its size, in the cache."""
    request = repr((item_id, k, tuple(conditions), tuple(exclude_ids))).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(request, digest_size=16).digest()


T = TypeVar("T")


class StoreCalls:
    """Where a use case that calls the store runs. `threads=None` (the embedded engine): on the event loop, since the
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


class Search:
    def __init__(
        self,
        catalog: Catalog,
        batcher: QueryBatcher,
        answers: AnswerCache,
        timeout_s: float,
        store_calls: StoreCalls | None = None,
    ) -> None:
        self.catalog = catalog
        self.batcher = batcher
        self.answers = answers
        self.timeout_s = timeout_s
        self.store_calls = store_calls or StoreCalls()

    async def by_id(
        self, item_id: str, k: int, conditions: Sequence[Condition] = (), exclude_ids: Sequence[str] = ()
    ) -> list[Match]:
        """More like a stored item, from its stored vectors; the item itself is never among the results."""
        return await self.store_calls.run(self.by_id_here, item_id, k, conditions, exclude_ids)

    def by_id_here(
        self, item_id: str, k: int, conditions: Sequence[Condition] = (), exclude_ids: Sequence[str] = ()
    ) -> list[Match]:
        """`by_id` in the calling thread (a batch's worker thread): the answer cache, then the catalog."""
        key = answer_key(item_id, k, conditions, exclude_ids)
        generation = self.answers.generation  # before the read: see cache.py
        matches = self.answers.get(generation, key)
        if matches is None:
            matches = self.catalog.similar_to_item(item_id, k, conditions, exclude_ids)
            self.answers.put(generation, key, matches)
        return matches

    async def by_text(
        self, query: TextQuery, k: int, conditions: Sequence[Condition] = (), exclude_ids: Sequence[str] = ()
    ) -> list[Match]:
        """More like a text: encoded through the batcher with concurrent queries, then searched like a stored item."""
        [(vectors, terms)] = await self.encode([query])
        return await self.store_calls.run(self.catalog.similar, vectors, k, conditions, exclude_ids, terms)

    async def encode(self, queries: Sequence[TextQuery]) -> list[tuple[FieldVectors, dict[str, SparseVector]]]:
        """Text queries as per-field vectors and lexical vectors, all their texts in one batcher call (a batch of
        queries is one encoder call, shared with whatever else is waiting)."""
        texts = [self.catalog.query_texts(q.text, q.title, q.description) for q in queries]
        try:
            with span("encode", texts=sum(map(len, texts))):
                encoded = await asyncio.wait_for(self.batcher.encode([t for ts in texts for t in ts]), self.timeout_s)
        except TimeoutError:
            raise TimedOutError(
                f"the query waited over {self.timeout_s:g} s (MS_REQUEST_TIMEOUT_S) for the encoder, which is "
                "overloaded: retry shortly"
            ) from None
        result, start = [], 0
        for query, own in zip(queries, texts, strict=True):
            vectors = self.catalog.query_vectors_from_texts(
                encoded[start : start + len(own)], free_text=query.text is not None
            )
            result.append((vectors, self.catalog.query_terms(query.text, query.title, query.description)))
            start += len(own)
        return result
