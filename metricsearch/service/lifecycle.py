"""The running service: its settings, its metrics, the runtime it serves and the model rollout that may swap another
in. The app keeps one `Service` (app.state.service) and each request asks it for the live runtime, so a swap needs
nothing patched. Imports run one way: lifecycle -> rollout -> runtime -> engine -> store."""

from __future__ import annotations

import logging
import math
import sys

from threadpoolctl import threadpool_limits

from metricsearch.core.errors import StoreMismatchError, StoreUnavailableError
from metricsearch.service.config import Settings
from metricsearch.service.metrics import Metrics
from metricsearch.service.rollout import Rollout
from metricsearch.service.runtime import Runtime, open_runtime
from metricsearch.service.store import generations

log = logging.getLogger(__name__)

GIL_SWITCH_S = 0.0005
"""The interpreter's thread switch interval in a service process (CPython's default: 5 ms)."""


class Service:
    def __init__(self, settings: Settings) -> None:
        """Open the runtime of the store served now: the one a model rollout swapped in, if any (with the bundle that
        built it), else MS_BUNDLE_DIR's; then remove what an interrupted rollout left, once the served store is ours.
        Raises BundleError or StoreMismatchError with a message naming what to fix."""
        # BLAS threads would fight the request threads for 2 cores (measured: 42 vs 417 req/s); the reranks are small.
        threadpool_limits(limits=1)
        # A request thread that gave the GIL up (a store call, the encoder) waits up to the switch interval to get it
        # back while another thread computes in Python (a statistics estimate, an /index request's term vectors):
        # at CPython's 5 ms, by-id requests at 10k items waited up to 80 ms during an estimate, at 0.5 ms 21 ms.
        sys.setswitchinterval(GIL_SWITCH_S)
        self.settings = settings
        self.metrics = Metrics(item_count=self._item_count)
        stores = generations(settings)
        served = stores.serving()
        live = open_runtime(served, self.metrics)
        self.rollout = Rollout(settings, served, live, lambda new: open_runtime(new, self.metrics))
        self.metrics.queue_depth.set_function(lambda: self.live.batcher.waiting())  # the live one, after a swap too
        self.metrics.statistics_refresh.set_function(lambda: float(self.live.engine.statistics.refreshing))
        stores.remove_leftovers(served)
        log.info("runtime ready", extra={"bundle": live.bundle.manifest.name, "items": self._item_count()})

    @property
    def live(self) -> Runtime:
        """The runtime requests get now: a rollout's swap replaces it between two requests."""
        return self.rollout.live

    def start(self) -> None:
        """On the event loop, before the first request."""
        self.live.batcher.start()

    async def aclose(self) -> None:
        """At shutdown: drop a rollout under way, then close the live runtime."""
        await self.rollout.aclose()
        live = self.live
        await live.batcher.stop()
        live.close()

    def _item_count(self) -> float:
        """NaN while the store does not answer, so /metrics and the start-up log keep working through an outage."""
        try:
            return self.live.store.count()
        except (StoreUnavailableError, StoreMismatchError):
            return math.nan
