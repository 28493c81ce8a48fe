"""One bundle's objects, built once from the settings (no per-request setup): its encoder, the store it fits, the
query batcher, the answer cache and the engine around them. A model rollout builds a second one for its new bundle;
which one is served is the lifecycle's business (service/lifecycle.py), not a runtime's."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from functools import cached_property

import orjson

from metricsearch.core.bundle import Bundle, load_bundle
from metricsearch.encoder import Encoder
from metricsearch.service.batcher import QueryBatcher
from metricsearch.service.cache import AnswerCache, EmbeddingCache
from metricsearch.service.config import Settings
from metricsearch.service.engine import Engine, IndexResult, Limits, StoreCalls, vector_schema
from metricsearch.service.metrics import Metrics
from metricsearch.service.store import open_store, store_traits
from metricsearch.service.store.base import Store

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: Settings
    bundle: Bundle
    encoder: Encoder
    store: Store
    batcher: QueryBatcher
    engine: Engine

    @cached_property
    def model_json(self) -> bytes:
        """The bundle's name as JSON, in every /similar answer."""
        return orjson.dumps(self.bundle.manifest.name)

    def close(self) -> None:
        self.engine.close()
        self.store.close()


def open_runtime(settings: Settings, metrics: Metrics) -> Runtime:
    """Load and check the bundle the settings name, open the store it fits and build the engine around them. Raises
    BundleError or StoreMismatchError with a message naming what to fix."""
    bundle = load_bundle(settings.bundle_dir)
    cores = len(os.sched_getaffinity(0))
    workers = settings.index_workers or max(1, cores // (settings.intra_op_threads or cores))
    encoder = Encoder(
        bundle,
        settings.providers,
        settings.intra_op_threads,
        settings.encoder_backend,
        workers,
        precision=settings.encoder_precision,
        min_overlap=settings.min_neighbour_overlap,
    )
    traits = store_traits(settings)
    answers = AnswerCache(
        settings.answer_cache_size if traits.cache_answers else 0,
        *metrics.cache_counters("answer"),
        metrics.answers_checked(),
        max_bytes=int(settings.answer_cache_mb * 2**20),
    )

    def auto_indexed(outcome: str) -> None:
        """A payload index built changes a filtered search's candidates (the exact scan gives way to the index's
        search), so answers cached before it may differ from what the store now answers."""
        metrics.auto_indexes.labels(outcome).inc()
        if outcome == "built":
            answers.clear()

    # A Qdrant server that is down at start-up is waited for: the service starts unready (/readyz 503) and recovers
    # when Qdrant answers, so pods need not be started in order.
    store = open_store(settings, vector_schema(bundle), wait_for_server=True, on_auto_index=auto_indexed)
    batcher = QueryBatcher(
        lambda texts: encoder.encode(texts, batch_size=len(texts)),
        window_s=settings.query_batch_window_ms / 1000,
        max_tokens=settings.query_batch_max_tokens,
        queue_size=settings.query_queue_size,
        max_length=encoder.max_length,
        on_batch=metrics.encode_batch_texts.observe,
        on_drop=metrics.dropped_queries.inc,
        cache=EmbeddingCache(
            settings.embedding_cache_size,
            bundle.identity,
            *metrics.cache_counters("embedding"),
            max_bytes=int(settings.embedding_cache_mb * 2**20),
        ),
    )

    def count_indexed(result: IndexResult) -> None:
        metrics.indexed_items.labels("written").inc(result.indexed)
        metrics.indexed_items.labels("unchanged").inc(result.unchanged)

    engine = Engine(
        bundle.manifest,
        encoder,
        store,
        candidates_min=settings.candidates_min,
        candidates_factor=settings.candidates_factor,
        max_candidates=settings.max_candidates,
        batcher=batcher,
        answers=answers,
        timeout_s=settings.request_timeout_s,
        store_calls=StoreCalls(traits.call_threads, traits.where),
        limits=Limits(settings, encoder.max_length),
        index_batch_size=settings.index_batch_size,
        on_indexed=count_indexed,
    )
    _warm_statistics(engine)
    return Runtime(settings, bundle, encoder, store, batcher, engine)


def _warm_statistics(engine: Engine) -> None:
    """Before the first request rather than by it."""
    started = time.perf_counter()
    stats = engine.statistics.warm()
    if stats is not None:
        ms = round(1000 * (time.perf_counter() - started), 1)
        log.info("component statistics estimated", extra={"pairs": stats.pairs, "ms": ms})
