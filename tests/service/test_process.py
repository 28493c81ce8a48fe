"""ServiceProcess, the service as a subprocess for tests and benchmarks, and wait_ready, how every server they start is
waited for: a server that exits at start-up, or never answers, is an error carrying its log, so a failed start says
why."""

from __future__ import annotations

import pytest

from metricsearch.service import ServiceProcess, free_port, wait_ready


def test_a_service_that_exits_at_start_up_is_an_error_with_its_log(tmp_path):
    service = ServiceProcess(tmp_path / "no-bundle", tmp_path / "data", {})
    with pytest.raises(RuntimeError, match=r"service exited with [1-9](.|\n)*no-bundle"):
        service.start(timeout_s=60)
    assert service.process is not None and service.process.poll() is not None
    service.stop()  # a process that exited already: nothing to stop


def test_a_server_that_never_answers_is_an_error_with_its_log_once_the_time_is_up():
    nothing = f"http://127.0.0.1:{free_port()}/readyz"
    with pytest.raises(RuntimeError, match=r"not 200 after 1 s: its log"):
        wait_ready(nothing, exited=lambda: None, log=lambda: "its log", timeout_s=1)


def test_a_running_service_writes_its_threads_stacks_on_sigusr1_and_goes_on_answering(tiny_bundle, tmp_path):
    service = ServiceProcess(tiny_bundle, tmp_path / "data", {})
    service.start()
    try:
        stacks = service.thread_stacks()
        assert "Current thread" in stacks and "most recent call first" in stacks, stacks[-2000:]
        with service.client() as client:
            assert client.get("/healthz").status_code == 200
    finally:
        service.stop()
