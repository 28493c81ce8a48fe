"""ServiceProcess, the service as a subprocess for tests and benchmarks: a service that exits at start-up is an error
carrying its log, so a failed start says why."""

from __future__ import annotations

import pytest

from metricsearch.service import ServiceProcess


def test_a_service_that_exits_at_start_up_is_an_error_with_its_log(tmp_path):
    service = ServiceProcess(tmp_path / "no-bundle", tmp_path / "data", {})
    with pytest.raises(RuntimeError, match=r"service exited with [1-9](.|\n)*no-bundle"):
        service.start(timeout_s=60)
    assert service.process is not None and service.process.poll() is not None
    service.stop()  # a process that exited already: nothing to stop
