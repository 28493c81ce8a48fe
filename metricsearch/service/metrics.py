"""Prometheus metrics of one service instance, in their own registry (one per app, so tests can build several)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self, item_count: Callable[[], float]) -> None:
        self.registry = CollectorRegistry()
        self.request_seconds = Histogram(
            "metricsearch_request_seconds",
            "HTTP request latency by route template, method and status",
            ["route", "method", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.encode_batch_texts = Histogram(
            "metricsearch_query_batch_texts",
            "texts per batched query-encoder call",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=self.registry,
        )
        self.dropped_queries = Counter(
            "metricsearch_query_dropped",
            "text queries dropped before encoding: their request timed out (MS_REQUEST_TIMEOUT_S) or was cancelled",
            registry=self.registry,
        )
        self.indexed_items = Counter(
            "metricsearch_indexed_items", "items written by /index", ["outcome"], registry=self.registry
        )
        self.rejected = Counter(
            "metricsearch_rejected_requests", "requests refused by status code", ["status"], registry=self.registry
        )
        self.cache_lookups = Counter(
            "metricsearch_cache_lookups",
            "cache lookups by cache (embedding: query texts; answer: /similar by id) and outcome (hit, miss)",
            ["cache", "outcome"],
            registry=self.registry,
        )
        items = Gauge("metricsearch_items", "items in the store", registry=self.registry)
        items.set_function(item_count)

    def cache_counters(self, cache: str) -> tuple[Callable[[], None], Callable[[], None]]:
        """(on_hit, on_miss) callbacks of one cache, bound once so a lookup costs one increment."""
        return self.cache_lookups.labels(cache, "hit").inc, self.cache_lookups.labels(cache, "miss").inc
