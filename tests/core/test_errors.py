"""The one error root (core/errors.py): every error metricsearch reports is a MetricSearchError, so the service maps
it to an HTTP answer and the CLI to exit code 1 in one place each, and the ones a client may retry say when."""

from __future__ import annotations

import inspect

import pytest

from metricsearch.core import errors

KINDS = [kind for _, kind in inspect.getmembers(errors, inspect.isclass) if issubclass(kind, Exception)]


def test_every_error_of_the_module_is_under_the_one_root():
    assert len(KINDS) > 10 and all(issubclass(kind, errors.MetricSearchError) for kind in KINDS)


@pytest.mark.parametrize(
    ("kind", "retry_after_s"),
    [(errors.OverloadedError, 1), (errors.TimedOutError, 1), (errors.StoreUnavailableError, 2)],
)
def test_an_error_a_retry_may_get_past_says_when_and_keeps_its_message(kind, retry_after_s):
    error = kind("the queue is full: retry shortly")
    assert error.retry_after_s == retry_after_s and str(error) == "the queue is full: retry shortly"
    assert errors.OverloadedError("busy", retry_after_s=5).retry_after_s == 5


def test_not_ready_is_a_store_outage_so_every_handler_of_one_handles_the_other():
    assert issubclass(errors.NotReadyError, errors.StoreUnavailableError)
    assert errors.NotReadyError("the store does not answer").retry_after_s == 2
