"""What stands between the service and a Qdrant server that is slow or down: a bound on the calls in flight and a
circuit breaker, so a hung server costs each caller at most one call timeout, then nothing.

- At most `max_in_flight` calls wait on the server at once; one more fails at once (503), so callers never queue
  behind a hung server without bound (each waiting call holds a thread).
- After `failures` outages in a row (no answer within the call timeout, refused connection, HTTP 5xx) the breaker
  opens: every call fails at once for `open_s` seconds, with the last outage as the reason. Then one call at a time
  tries the server (half-open); its answer closes the breaker, its failure opens it again.

Written by hand: pybreaker, the common library, holds its lock for the whole guarded call, so one hung call would
block every other caller, which is the very stall this exists to prevent."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import KW_ONLY, dataclass

from metricsearch.core.errors import StoreUnavailableError


@dataclass(eq=False)
class CircuitBreaker:
    where: str
    """The server as messages name it."""
    _: KW_ONLY
    max_in_flight: int
    failures: int
    """Outages in a row that open the breaker."""
    open_s: float
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._lock = threading.Lock()  # held only to read and update the counters below, never across a call
        self._in_flight = 0
        self._failed = 0
        self._open_until: float | None = None
        self._trial_running = False
        self._last_outage = ""

    @property
    def reason(self) -> str | None:
        """Why calls fail fast now (the breaker is open), or None."""
        with self._lock:
            if self._open_until is None:
                return None
            return self._fast_failure(self.clock()).args[0]

    @contextmanager
    def call(self) -> Iterator[None]:
        """One server call: StoreUnavailableError at once when the breaker is open or too many calls are in flight;
        the call's own StoreUnavailableError counts as an outage, any other outcome as an answer."""
        trial = self._enter()
        try:
            yield
        except StoreUnavailableError as e:
            self._leave(trial, outage=str(e))
            raise
        except BaseException:
            self._leave(trial, outage=None)
            raise
        self._leave(trial, outage=None)

    def _enter(self) -> bool:
        with self._lock:
            now = self.clock()
            trial = False
            if self._open_until is not None:
                if now < self._open_until or self._trial_running:
                    raise self._fast_failure(now)
                trial = self._trial_running = True
            if self._in_flight >= self.max_in_flight:
                if trial:
                    self._trial_running = False
                raise StoreUnavailableError(
                    f"{self.max_in_flight} calls to {self.where} are waiting for its answer already "
                    "(MS_QDRANT_MAX_IN_FLIGHT): it is slow; retry shortly",
                    retry_after_s=1,
                )
            self._in_flight += 1
            return trial

    def _leave(self, trial: bool, outage: str | None) -> None:
        with self._lock:
            self._in_flight -= 1
            if trial:
                self._trial_running = False
            if outage is None:
                self._failed, self._open_until = 0, None
                return
            self._failed += 1
            self._last_outage = outage
            if trial or self._failed >= self.failures:
                self._open_until = self.clock() + self.open_s

    def _fast_failure(self, now: float) -> StoreUnavailableError:
        wait = max(0.0, (self._open_until or now) - now)
        return StoreUnavailableError(
            f"{self.where} failed {self._failed} calls in a row, so calls fail fast until one gets through (the "
            f"next try in {wait:.1f} s); the last failure: {self._last_outage}",
            retry_after_s=max(1, math.ceil(wait)),
        )
