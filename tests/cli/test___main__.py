"""`python -m metricsearch.cli` (cli/__main__.py) runs the same command-line app as `metricsearch`."""

from __future__ import annotations

import subprocess
import sys


def test_the_module_runs_the_cli():
    done = subprocess.run(
        [sys.executable, "-m", "metricsearch.cli", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert all(command in done.stdout for command in ("serve", "index", "train", "export", "evaluate"))
