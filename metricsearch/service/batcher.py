"""Micro-batching of concurrent text queries: one encoder call serves every query that arrived within a short
window, up to a token budget, behind a bounded queue that refuses (429) rather than letting latency grow
without bound. The pattern of text-embeddings-inference's queue, written by hand because no library here
batches asyncio requests into a thread-bound ONNX call. Texts found in the embedding cache skip the queue.

A request that timed out (MS_REQUEST_TIMEOUT_S) or whose client went away has its future cancelled; its texts are
dropped before encoding, so an overloaded encoder never spends its time on answers nobody waits for."""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from metricsearch.core.errors import OverloadedError
from metricsearch.service.cache import EmbeddingCache

EncodeFn = Callable[[Sequence[str]], np.ndarray]


@dataclass
class _Pending:
    texts: list[str]
    tokens: int
    future: asyncio.Future
    # The request's context (its trace span, its request id), in which its batch's encoder call runs when it is the
    # batch's first: the encoder's spans and log lines then belong to one request that waited for them.
    context: contextvars.Context


class QueryBatcher:
    def __init__(
        self,
        encode: EncodeFn,
        *,
        window_s: float,
        max_tokens: int,
        queue_size: int,
        max_length: int,
        on_batch: Callable[[int], None] | None = None,
        on_drop: Callable[[int], None] | None = None,
        cache: EmbeddingCache | None = None,
    ) -> None:
        """`on_batch(texts)` runs before each encoder call; `on_drop(requests)` counts requests dropped unencoded."""
        self._encode = encode
        self._cache = cache
        self._window_s = window_s
        self._max_tokens = max_tokens
        self._max_length = max_length
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=queue_size)
        self._on_batch = on_batch or (lambda _n: None)
        self._on_drop = on_drop or (lambda _n: None)
        # One thread: encoder calls run one after another, each using all intra-op threads.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="query-encoder")
        self._worker: asyncio.Task | None = None
        self._carry: _Pending | None = None

    def _estimate_tokens(self, text: str) -> int:
        """A generous token count without tokenizing twice (a third of the characters, plus [CLS]/[SEP]), capped
        at the model's max length; it only bounds how many queries share one encoder call."""
        return min(self._max_length, len(text) // 3 + 2)

    async def encode(self, texts: list[str]) -> np.ndarray:
        """Vectors for `texts`: cached ones at once, the rest encoded together with whatever else is waiting; 429
        when the queue is full."""
        if self._cache is None:
            return await self._enqueue(texts)
        vectors = [self._cache.get(t) for t in texts]
        missing = [t for t, v in zip(texts, vectors, strict=True) if v is None]
        if missing:
            fresh = iter(await self._enqueue(missing))
            for n, text in enumerate(texts):
                if vectors[n] is None:
                    vectors[n] = next(fresh)
                    self._cache.put(text, vectors[n])
        return np.stack(vectors)

    async def _enqueue(self, texts: list[str]) -> np.ndarray:
        loop = asyncio.get_running_loop()
        tokens = sum(self._estimate_tokens(t) for t in texts)
        pending = _Pending(texts, tokens, loop.create_future(), contextvars.copy_context())
        try:
            self._queue.put_nowait(pending)
        except asyncio.QueueFull:
            raise OverloadedError(
                f"{self._queue.maxsize} text queries are already waiting to be encoded; retry shortly", 1
            ) from None
        return await pending.future

    def waiting(self) -> int:
        """Text queries waiting to be encoded (the queue, and one carried over to the next batch)."""
        return self._queue.qsize() + (self._carry is not None)

    def start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(self._run(), name="query-batcher")

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        self._executor.shutdown(wait=True)

    async def _next(self) -> _Pending:
        """The next request somebody still waits for (the carried one first)."""
        while True:
            pending = self._carry or await self._queue.get()
            self._carry = None
            if not self._dropped([pending]):
                return pending

    def _dropped(self, batch: list[_Pending]) -> list[_Pending]:
        """The requests of `batch` whose futures are done (cancelled: timed out, or the client went away), counted."""
        gone = [p for p in batch if p.future.done()]
        if gone:
            self._on_drop(len(gone))
        return gone

    async def _collect(self) -> list[_Pending]:
        first = await self._next()
        batch, tokens = [first], first.tokens
        deadline = time.monotonic() + self._window_s
        while tokens < self._max_tokens:
            remaining = deadline - time.monotonic()
            try:
                nxt = (
                    self._queue.get_nowait() if remaining <= 0 else await asyncio.wait_for(self._queue.get(), remaining)
                )
            except (TimeoutError, asyncio.QueueEmpty):
                break
            if self._dropped([nxt]):
                continue
            if tokens + nxt.tokens > self._max_tokens:
                self._carry = nxt
                break
            batch.append(nxt)
            tokens += nxt.tokens
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._collect()
            if self._dropped(batch):  # expired during the window
                batch = [p for p in batch if not p.future.done()]
            if not batch:
                continue
            texts = [t for p in batch for t in p.texts]
            self._on_batch(len(texts))
            try:
                vectors = await loop.run_in_executor(self._executor, batch[0].context.run, self._encode, texts)
            except Exception as exc:  # handed to every waiting request; the worker keeps serving
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(exc)
                continue
            start = 0
            for p in batch:
                if not p.future.done():  # a cancelled request (client went away) has nobody waiting
                    p.future.set_result(vectors[start : start + len(p.texts)])
                start += len(p.texts)
