"""ServiceProcess runs the service of the checkout it is given (a bench serves an earlier commit beside this one)."""

from __future__ import annotations

import pytest

from metricsearch.service import ServiceProcess

FAKE_CLI = "import os, pathlib; pathlib.Path(os.environ['MS_DATA_DIR'], 'served-by').write_text(__file__)\n"


def test_a_service_process_runs_the_code_it_is_given(tmp_path):
    code = tmp_path / "checkout"
    (code / "metricsearch").mkdir(parents=True)
    (code / "metricsearch/__init__.py").write_text("")
    (code / "metricsearch/cli.py").write_text(FAKE_CLI)  # "serves" by saying which file it is, then exits
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    service = ServiceProcess(tmp_path / "bundle", data_dir, {}, code=code)
    with pytest.raises(RuntimeError, match="exited with 0"):
        service.start(timeout_s=30)
    assert (data_dir / "served-by").read_text() == str(code / "metricsearch/cli.py")
