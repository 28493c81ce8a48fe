"""Prometheus metrics of one service instance, in their own registry (one per app, so tests can build several):
requests and their latency through prometheus-fastapi-instrumentator (the `http_*` series operators know), and
ours for what it cannot see (the query queue, the caches, the encoder's batches, the store's size)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_fastapi_instrumentator import Instrumentator
from prometheus_fastapi_instrumentator import metrics as http

# For a service answering in milliseconds: a warm /similar takes 1-5 ms; 2.5 s is far past any latency objective
# (a request waiting longer for the encoder gets 503 after MS_REQUEST_TIMEOUT_S; +Inf counts those).
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    def __init__(self, item_count: Callable[[], float]) -> None:
        self.registry = CollectorRegistry()
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
        self.auto_indexes = Counter(
            "metricsearch_auto_indexes",
            "metadata keys a filter used without a payload index, by what the store did (MS_AUTO_INDEX): built an "
            "index, refused (no stored item holds the key, or its values mix types), failed",
            ["outcome"],
            registry=self.registry,
        )
        self.cache_lookups = Counter(
            "metricsearch_cache_lookups",
            "cache lookups by cache (embedding: query texts; answer: /similar by id) and outcome (hit, miss; checked: "
            "an answer served after writes once checked)",
            ["cache", "outcome"],
            registry=self.registry,
        )
        items = Gauge("metricsearch_items", "items in the store", registry=self.registry)
        items.set_function(item_count)
        self.queue_depth = Gauge(
            "metricsearch_query_queue_depth",
            "text queries waiting to be encoded (429 at MS_QUERY_QUEUE_SIZE)",
            registry=self.registry,
        )
        self.statistics_refresh = Gauge(
            "metricsearch_statistics_refresh_running",
            "1 while the catalog statistics are estimated anew in the background, paced to a share of one core; "
            "requests rank with the previous ones meanwhile",
            registry=self.registry,
        )

    @contextmanager
    def served_on(self, host: str, port: int) -> Iterator[None]:
        """These metrics on a port of their own (MS_METRICS_PORT), by prometheus_client's HTTP server in a thread, so
        a NetworkPolicy can open it to Prometheus alone; a port already taken fails the start-up."""
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        try:
            yield
        finally:
            server.shutdown()
            server.server_close()
            thread.join()

    def http(self) -> Instrumentator:
        """`http_requests_total` and `http_request_duration_seconds` by handler (the route template, "none" for a
        path no route has, so ids and probes of random paths do not explode the label set), method and exact status;
        /metrics itself is not counted."""
        return Instrumentator(
            should_group_status_codes=False, excluded_handlers=["^/metrics$"], registry=self.registry
        ).add(
            http.requests(registry=self.registry),
            http.latency(buckets=LATENCY_BUCKETS, registry=self.registry),
        )

    def cache_counters(self, cache: str) -> tuple[Callable[[], None], Callable[[], None]]:
        """(on_hit, on_miss) callbacks of one cache, bound once so a lookup costs one increment."""
        return self.cache_lookups.labels(cache, "hit").inc, self.cache_lookups.labels(cache, "miss").inc

    def answers_checked(self) -> Callable[[], None]:
        """The answer cache's on_checked callback: an answer served after writes, once checked."""
        return self.cache_lookups.labels("answer", "checked").inc
