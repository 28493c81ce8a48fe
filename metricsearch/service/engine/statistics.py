"""The catalog statistics a fused or RecoBERT rerank normalises its components by: estimated on a sample of stored
items' pairs, so a ranking depends neither on k nor on the filter, and estimated anew in the background once writes
of STATS_REFRESH of the catalog have landed, while every request ranks with the previous ones. For a bundle with an
adaptive fusion rule, each estimate also measures the components' agreement on the catalog (no label read) and
carries the weights the rule chose with the statistics."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping

import numpy as np

from metricsearch.core.errors import StoreMismatchError, StoreUnavailableError
from metricsearch.core.fusion import (
    AGREEMENT_CANDIDATES,
    AGREEMENT_SAMPLE,
    STATS_SAMPLE,
    CatalogAgreement,
    ComponentStats,
    candidate_agreement,
)
from metricsearch.core.rerank import FieldVectors, Reranker
from metricsearch.service.engine.layout import FieldLayout
from metricsearch.service.engine.lexical_scores import LexicalScores
from metricsearch.service.store.base import Store

log = logging.getLogger(__name__)

STATS_REFRESH = 0.2
"""Writes, as a share of the items counted at the last estimate, after which the statistics are estimated anew."""
BACKGROUND_DUTY = 0.25
"""The share of its time a background estimate computes; it sleeps the rest, between sampled items. Both it and the
requests run Python under one GIL: at full speed it doubled by-id p50 at 10k items while it ran (5 s of work)."""
PACE_SLICE_S = 0.005
"""Work a paced estimate does between sleeps: about two sampled items."""


class EstimateStopped(Exception):
    """A background estimate given up because the service closes."""


class Pacer:
    """Sleeps between slices of work so that it computes `duty` of the time (1: never sleeps); once `stop` is set,
    the next call raises EstimateStopped, so a paced estimate never holds up a shutdown."""

    def __init__(self, duty: float = 1.0, stop: threading.Event | None = None) -> None:
        self.duty = duty
        self._stop = stop
        self._since = time.perf_counter()

    def __call__(self) -> None:
        if self._stop is not None and self._stop.is_set():
            raise EstimateStopped
        if self.duty >= 1:
            return
        worked = time.perf_counter() - self._since
        if worked >= PACE_SLICE_S:
            pause = worked * (1 - self.duty) / self.duty
            if self._stop is not None:
                self._stop.wait(pause)
            else:
                time.sleep(pause)
            self._since = time.perf_counter()


class Statistics:
    def __init__(
        self,
        store: Store,
        layout: FieldLayout,
        rerank: Reranker,
        lexical: LexicalScores | None,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        """`on_change` runs after a background estimate replaced the statistics: answers cached before were ranked
        with the previous ones."""
        self._store = store
        self._layout = layout
        self._rerank = rerank
        self._lexical = lexical
        self._on_change = on_change
        self._stats: ComponentStats | None = None
        self._stats_items = 0
        self._lock = threading.Lock()
        self._writes = 0
        self._writes_lock = threading.Lock()
        """Orders writer threads' counts with the refresh's subtraction (`+=` is not atomic across threads)."""
        self._refresh: threading.Thread | None = None
        """The last background refresh (`current`), which `wait` waits for."""
        self._closing = threading.Event()

    @property
    def needed(self) -> bool:
        return self._rerank.needs_stats

    def written(self, n: int) -> None:
        """Count `n` items written or deleted: past STATS_REFRESH of the catalog, the next request refreshes."""
        with self._writes_lock:
            self._writes += n

    def current(self) -> ComponentStats:
        """The statistics to rank with. Once stale, a background thread estimates them anew while requests rank with
        the previous ones; only statistics of no pairs at all (none yet, or of an empty catalog: a service started
        before its first `/index`) are estimated in the request that needs them."""
        current = self._stats
        if current is None or not current.pairs:
            return self._estimate_now()
        if self._stale() and self._lock.acquire(blocking=False):
            self._refresh = threading.Thread(target=self._refresh_in_background, name="stats-refresh", daemon=True)
            self._refresh.start()
        return current

    def warm(self) -> ComponentStats | None:
        """Estimated now if missing or stale (at start-up, before a rollout's swap) rather than by the next request;
        None for a rerank without them or a store that does not answer yet, which leaves them to a request."""
        if not self.needed:
            return None
        try:
            return self._estimate_now()
        except (StoreUnavailableError, StoreMismatchError):
            return None

    def fusion_in_use(self) -> tuple[Mapping[str, float] | None, str]:
        """The fusion weights requests rank with now and why, without estimating anything (GET /model)."""
        fusion = self._rerank.fusion
        if fusion is None:
            return None, "no fusion: the bundle's metric alone"
        stats = self._stats
        if self._rerank.rule is None:
            return fusion, "the bundle's fixed weights (fusion.chosen_by says how they were chosen)"
        if stats is None or stats.weights is None:
            return fusion, "the bundle's weights until its rule has measured the catalog (at start-up or first request)"
        return stats.weights, stats.chosen_by

    @property
    def refreshing(self) -> bool:
        """Whether a background estimate is under way (/metrics: metricsearch_statistics_refresh_running)."""
        return self._refresh is not None and self._refresh.is_alive()

    def wait(self, timeout: float = 10.0) -> None:
        """Wait for a background refresh under way to end."""
        if self._refresh is not None:
            self._refresh.join(timeout)

    def close(self) -> None:
        """Before the store closes (a shutdown, a retired rollout): a background refresh under way stops at its next
        sampled item, keeping the previous statistics."""
        self._closing.set()
        self.wait()

    def _stale(self) -> bool:
        return self._stats is None or self._writes > STATS_REFRESH * max(self._stats_items, 1)

    def _estimate_now(self) -> ComponentStats:
        """Estimated in this thread unless fresh (waits for a refresh under way, then checks again)."""
        with self._lock:
            if self._stale():
                self._renew()
            return self._stats

    def _refresh_in_background(self) -> None:
        """Runs with the lock `current()` took for it. A failure (the store closed or out of reach) leaves the
        previous statistics, and the next request past the threshold tries again."""
        try:
            self._renew(Pacer(BACKGROUND_DUTY, self._closing))
            self._on_change()
        except EstimateStopped:
            log.info("component statistics estimate stopped: the service closes")
        except Exception:
            log.warning("component statistics not estimated anew; ranking with the previous ones", exc_info=True)
        finally:
            self._lock.release()

    def _renew(self, pace: Pacer | None = None) -> None:
        """Estimate with the lock held, paced by `pace` (a background refresh); writes that land meanwhile count
        towards the next refresh."""
        pace = pace or Pacer()
        writes = self._writes
        items = self._store.count()
        stats = self._estimate(pace)
        if self._rerank.rule is not None:
            weights, why = self._rerank.rule.weights(self._agreement(stats, pace), self._rerank.fusion)
            if self._stats is None or self._stats.weights != weights:
                log.info("fusion weights chosen on the catalog", extra={"weights": weights, "why": why, "items": items})
            stats = dataclasses.replace(stats, weights=weights, chosen_by=why)
        self._stats = stats
        self._stats_items = items
        with self._writes_lock:
            self._writes -= writes

    def _estimate(self, pace: Pacer) -> ComponentStats:
        """Every sampled item as a query against the others, its components as the rerank computes them."""
        sample = self._store.sample(STATS_SAMPLE)
        if len(sample) < 2:
            return ComponentStats.estimate({})
        stored = self._layout.stored({name: np.stack([i.vectors[name] for i in sample]) for name in sample[0].vectors})
        points = self._store.points([item.id for item in sample])
        parts: dict[str, list[np.ndarray]] = {}
        for n, item in enumerate(sample):
            pace()
            query = FieldVectors(
                stored.fields[n], stored.present[n], None if stored.factors is None else stored.factors[n]
            )
            lexical = None
            if self._lexical is not None:
                terms = self._lexical.lexical.queries(item.title, item.description)
                lexical = self._lexical.score(terms, stored.present, points)
            others = np.arange(len(sample)) != n
            for name, values in self._rerank.metric_scores(query, stored, lexical)[1].items():
                parts.setdefault(name, []).append(values[others])
        return ComponentStats.estimate({name: np.concatenate(v) for name, v in parts.items()})

    def _agreement(self, stats: ComponentStats, pace: Pacer) -> CatalogAgreement:
        """The rule's components' agreement (core/fusion.py's `candidate_agreement`): each of the first
        AGREEMENT_SAMPLE items by point id against its nearest items by the ANN vector, as the store finds them,
        standardised with `stats`. No label is read."""
        names = self._rerank.rule.components
        rows, ids = [], []
        for item in self._store.sample(AGREEMENT_SAMPLE) if stats.pairs else ():
            pace()
            query = self._layout.stored_one(item.vectors)
            found = self._store.search(self._layout.packed(query), AGREEMENT_CANDIDATES, exclude_ids=[item.id])
            if not found.listings:
                continue
            candidates = self._layout.stored(found.vectors)
            lexical = None
            if self._lexical is not None:
                terms = self._lexical.lexical.queries(item.title, item.description)
                lexical = self._lexical.score(terms, candidates.present, found.points, names)
            components = self._rerank.metric_scores(query, candidates, lexical)[1]
            rows.append({name: values for name, values in components.items() if name in names})
            ids.append(found.ids)
        return candidate_agreement(rows, ids, stats, names)
