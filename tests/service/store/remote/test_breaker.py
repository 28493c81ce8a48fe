"""The circuit breaker in front of a Qdrant server (store/remote/breaker.py): calls fail fast after outages in a row,
one trial at a time gets through once it has waited, and at most `max_in_flight` calls wait on the server."""

from __future__ import annotations

import pytest

from metricsearch.core.errors import StoreUnavailableError
from metricsearch.service.store.remote.breaker import CircuitBreaker


def test_the_breaker_fails_fast_after_outages_and_lets_one_try_through_later():
    now = [0.0]
    breaker = CircuitBreaker("Qdrant at q", max_in_flight=2, failures=2, open_s=5, clock=lambda: now[0])

    def outage():
        with breaker.call():
            raise StoreUnavailableError("Qdrant at q does not answer (timed out)")

    for _ in range(2):
        with pytest.raises(StoreUnavailableError, match="does not answer"):
            outage()
    assert "failed 2 calls in a row" in breaker.reason and "timed out" in breaker.reason
    with pytest.raises(StoreUnavailableError, match="fail fast") as refused, breaker.call():
        pytest.fail("an open breaker runs no call")
    assert refused.value.retry_after_s == 5

    now[0] = 5.0  # one trial at a time; the others still fail fast
    with breaker.call(), pytest.raises(StoreUnavailableError, match="fail fast"), breaker.call():
        pass
    assert breaker.reason is None  # the trial's answer closed it
    # Two in flight: a third fails at once.
    full = pytest.raises(StoreUnavailableError, match="MS_QDRANT_MAX_IN_FLIGHT")
    with breaker.call(), breaker.call(), full, breaker.call():
        pass
    with pytest.raises(ValueError), breaker.call():  # an error that is no outage (a bug, a 4xx) is an answer
        raise ValueError
    assert breaker.reason is None
