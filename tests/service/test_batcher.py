"""The query micro-batcher: concurrent queries share encoder calls; a full queue refuses with 429's error; queries
nobody waits for any more are never encoded."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from metricsearch.core.errors import OverloadedError
from metricsearch.service.batcher import QueryBatcher


class RecordingEncoder:
    """Encodes text i as the vector [len(text)], recording each call's batch."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.calls: list[list[str]] = []
        self.gate = gate

    def __call__(self, texts):
        if self.gate is not None:
            self.gate.wait(5)
        self.calls.append(list(texts))
        return np.array([[float(len(t))] for t in texts], dtype=np.float32)


def _batcher(encoder, **overrides) -> QueryBatcher:
    options = {"window_s": 0.05, "max_tokens": 10_000, "queue_size": 100, "max_length": 256} | overrides
    return QueryBatcher(encoder, **options)


def test_concurrent_queries_are_batched_and_answered_in_order():
    encoder = RecordingEncoder()

    async def run():
        batcher = _batcher(encoder)
        batcher.start()
        texts = [["a" * n] for n in range(1, 9)] + [["bb", "ccc"]]
        results = await asyncio.gather(*(batcher.encode(t) for t in texts))
        await batcher.stop()
        return texts, results

    texts, results = asyncio.run(run())
    for sent, got in zip(texts, results, strict=True):
        assert got[:, 0].tolist() == [len(t) for t in sent]
    assert len(encoder.calls) < len(texts)  # at least some sharing
    assert sum(len(c) for c in encoder.calls) == 10


def test_token_budget_splits_batches():
    encoder = RecordingEncoder()

    async def run():
        batcher = _batcher(encoder, max_tokens=40)
        batcher.start()
        await asyncio.gather(*(batcher.encode(["x" * 60]) for _ in range(6)))  # ~22 tokens each
        await batcher.stop()

    asyncio.run(run())
    assert all(len(call) == 1 for call in encoder.calls)
    assert sum(len(c) for c in encoder.calls) == 6


def test_full_queue_is_refused_and_its_depth_is_reported():
    gate = threading.Event()
    encoder = RecordingEncoder(gate)

    async def run():
        batcher = _batcher(encoder, queue_size=2, window_s=0.0)
        batcher.start()
        first = asyncio.ensure_future(batcher.encode(["held"]))
        await asyncio.sleep(0.05)  # the worker took it and blocks in the encoder
        assert batcher.waiting() == 0  # the held one is being encoded, not waiting
        waiting = [asyncio.ensure_future(batcher.encode(["w"])) for _ in range(2)]
        await asyncio.sleep(0)
        assert batcher.waiting() == 2  # what /metrics reports as metricsearch_query_queue_depth
        with pytest.raises(OverloadedError, match="retry"):
            await batcher.encode(["one too many"])
        gate.set()
        await asyncio.gather(first, *waiting)
        assert batcher.waiting() == 0
        await batcher.stop()

    asyncio.run(run())


def test_encoder_failure_reaches_every_waiting_query_and_worker_survives():
    calls = {"n": 0}

    def flaky(texts):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("boom")
        return np.ones((len(texts), 1), dtype=np.float32)

    async def run():
        batcher = _batcher(flaky, window_s=0.0)
        batcher.start()
        with pytest.raises(RuntimeError, match="boom"):
            await batcher.encode(["a"])
        ok = await batcher.encode(["b"])
        await batcher.stop()
        return ok

    assert asyncio.run(run()).shape == (1, 1)


def test_expired_or_cancelled_queries_are_never_encoded():
    gate = threading.Event()
    encoder = RecordingEncoder(gate)
    dropped = []

    async def run():
        batcher = _batcher(encoder, window_s=0.0, on_drop=dropped.append)
        batcher.start()
        first = asyncio.ensure_future(batcher.encode(["held"]))
        await asyncio.sleep(0.05)  # the worker took it and blocks in the encoder
        for n in range(5):  # they wait behind it longer than their timeout
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(batcher.encode([f"expired {n}"]), 0.01)
        gone = asyncio.ensure_future(batcher.encode(["client went away"]))
        live = asyncio.ensure_future(batcher.encode(["still wanted"]))
        await asyncio.sleep(0)
        gone.cancel()
        gate.set()
        await first
        assert (await live)[:, 0].tolist() == [len("still wanted")]
        await batcher.stop()

    asyncio.run(run())
    assert [t for call in encoder.calls for t in call] == ["held", "still wanted"]
    assert sum(dropped) == 6
