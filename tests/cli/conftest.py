from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess]:
    """`metricsearch ARGS...` in a fresh process, as a user runs it; `env` adds variables."""

    def run(*args: str | Path, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        # A wide terminal keeps typer's boxed usage errors on one line, so messages can be matched whole.
        variables = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "400"}
        return subprocess.run(
            [sys.executable, "-m", "metricsearch.cli", *map(str, args)],
            cwd=ROOT,
            env={**variables, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


@pytest.fixture
def small_catalog(tmp_path) -> Path:
    """Three items with a metadata column."""
    path = tmp_path / "c.csv"
    path.write_text(
        "id,title,description,brand\n"
        "a,red cotton shirt,a soft red shirt,acme\n"
        "b,blue cotton shirt,a soft blue shirt,acme\n"
        "c,leather boots,brown boots for winter,boota\n"
    )
    return path
