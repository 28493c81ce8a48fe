"""Everything one service instance holds, built once at start-up from the settings (no per-request setup)."""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from functools import cached_property

import orjson
from threadpoolctl import threadpool_limits

from metricsearch.core.bundle import Bundle, check_agreement, load_bundle
from metricsearch.core.errors import StoreMismatchError, StoreUnavailableError
from metricsearch.encoder import Encoder
from metricsearch.service.batcher import QueryBatcher
from metricsearch.service.cache import AnswerCache, EmbeddingCache
from metricsearch.service.catalog import Catalog, vector_schema
from metricsearch.service.config import Settings
from metricsearch.service.metrics import Metrics
from metricsearch.service.recommend import Recommender
from metricsearch.service.rollout import Rollout, remove_leftovers, serving_settings
from metricsearch.service.search import Search, StoreCalls
from metricsearch.service.store import open_store
from metricsearch.service.store.base import Store

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: Settings
    bundle: Bundle
    encoder: Encoder
    store: Store
    catalog: Catalog
    batcher: QueryBatcher
    metrics: Metrics
    answers: AnswerCache
    search: Search
    rollout: Rollout
    """Shared by the runtime a rollout swaps in: it knows which runtime is live (`rollout.live`)."""

    @cached_property
    def model_json(self) -> bytes:
        """The bundle's name as JSON, in every /similar answer."""
        return orjson.dumps(self.bundle.manifest.name)

    @cached_property
    def recommender(self) -> Recommender:
        """/similar requests with options beyond a query, k, filter and exclude_ids (service/recommend.py)."""
        return Recommender(self.catalog, self.settings.max_candidates)

    def close(self) -> None:
        self.catalog.wait_for_stats()
        self.store.close()


def build_runtime(settings: Settings) -> Runtime:
    """Load and check the bundle, open the store it fits, wire the use cases. Raises BundleError or
    StoreMismatchError with a message naming what to fix. A model rollout that was swapped in decides the bundle and
    the store folder (service/rollout.py); what an interrupted one left is removed once the live store is ours."""
    # BLAS threads would fight the request threads for 2 cores (measured: 42 vs 417 req/s); the reranks are small.
    threadpool_limits(limits=1)
    served = serving_settings(settings)
    rollout = Rollout(settings, served, lambda new: open_runtime(new, metrics, rollout))
    metrics = Metrics(item_count=lambda: _item_count(rollout.live.store))
    runtime = rollout.live = open_runtime(served, metrics, rollout)
    metrics.queue_depth.set_function(lambda: rollout.live.batcher.waiting())  # the live one, after a swap too
    remove_leftovers(settings, served)
    log.info("runtime ready", extra={"bundle": runtime.bundle.manifest.name, "items": _item_count(runtime.store)})
    return runtime


def open_runtime(settings: Settings, metrics: Metrics, rollout: Rollout) -> Runtime:
    """The bundle the settings name and the store it fits, with the use cases around them: what a rollout opens for
    its new bundle, too."""
    bundle = load_bundle(settings.bundle_dir)
    check_agreement(bundle, settings.min_neighbour_overlap)
    cores = len(os.sched_getaffinity(0))
    workers = settings.index_workers or max(1, cores // (settings.intra_op_threads or cores))
    encoder = Encoder(bundle, settings.providers, settings.intra_op_threads, settings.encoder_backend, workers)
    # A Qdrant server that is down at start-up is waited for: the service starts unready (/readyz 503) and recovers
    # when Qdrant answers, so pods need not be started in order.
    store = open_store(
        settings,
        vector_schema(bundle),
        wait_for_server=True,
        on_auto_index=lambda outcome: metrics.auto_indexes.labels(outcome).inc(),
    )
    # A Qdrant server may be written by other replicas, whose writes this process never sees: no answer cache there.
    answers = AnswerCache(
        0 if settings.qdrant_url else settings.answer_cache_size,
        *metrics.cache_counters("answer"),
        max_bytes=int(settings.answer_cache_mb * 2**20),
    )
    catalog = Catalog(
        bundle.manifest,
        encoder,
        store,
        candidates_min=settings.candidates_min,
        candidates_factor=settings.candidates_factor,
        on_write=answers.bump,
    )
    _warm_stats(catalog)
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
    # A server's calls wait on the network: off the event loop, as many at once as the store lets wait on Qdrant.
    threads = settings.qdrant_max_in_flight if settings.qdrant_url else None
    search = Search(
        catalog, batcher, answers, settings.request_timeout_s, StoreCalls(threads, f"Qdrant at {settings.qdrant_url}")
    )
    return Runtime(settings, bundle, encoder, store, catalog, batcher, metrics, answers, search, rollout)


def _warm_stats(catalog: Catalog) -> None:
    """Before the first request rather than by it (about 0.2 s at 100k items)."""
    started = time.perf_counter()
    stats = catalog.warm_stats()
    if stats is not None:
        ms = round(1000 * (time.perf_counter() - started), 1)
        log.info("component statistics estimated", extra={"pairs": stats.pairs, "ms": ms})


def _item_count(store: Store) -> float:
    """NaN while the store does not answer, so /metrics and the start-up log keep working through an outage."""
    try:
        return store.count()
    except (StoreUnavailableError, StoreMismatchError):
        return math.nan
