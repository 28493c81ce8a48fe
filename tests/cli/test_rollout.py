"""`metricsearch rollout` reports a rollout in one line (its runs against a service: tests/service/test_rollout.py),
and a service that does not answer is a runtime failure (exit code 1) naming it, not a traceback."""

from __future__ import annotations

from metricsearch.cli.rollout import progress_line
from metricsearch.core.schemas import RolloutStatus


def test_the_progress_line_says_how_far_how_fast_and_what_went_wrong():
    assert progress_line(RolloutStatus(state="none", model="v1")) == "no rollout under way; serving v1"
    copying = RolloutStatus(state="copying", model="v1", target="v2", copied=250, total=1000, items_per_s=50, eta_s=15)
    assert progress_line(copying) == "copying: v1 -> v2, 250 of 1000 items copied (25%), 50 items/s, ETA 15 s"
    failed = RolloutStatus(state="failed", model="v1", target="v2", copied=3, total=0, error="disk full")
    assert progress_line(failed) == "failed: v1 -> v2, 3 of 0 items copied; error: disk full"


def test_a_service_that_does_not_answer_exits_1(run_cli):
    result = run_cli("rollout", "status", "--url", "http://127.0.0.1:9", timeout=120)
    assert result.returncode == 1 and result.stderr.startswith("error: ") and "Traceback" not in result.stderr
