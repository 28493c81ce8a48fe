"""The Locust storefront mix, run for a few seconds as its own process against a real tiny-model service."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

LOCUSTFILE = Path(__file__).parents[2] / "loadtests" / "locustfile.py"
LOCUST = Path(sys.executable).with_name("locust")


def run_locust(url: str, reports: Path, env: dict[str, str]) -> dict[str, dict[str, str]]:
    """Locust's stats rows by request name, after a bounded headless run (never imported here: it crashes)."""
    reports.mkdir()
    args = ["--headless", "--host", url, "-u", "4", "-r", "4", "-t", "4s", "--stop-timeout", "5", "--only-summary"]
    done = subprocess.run(
        [LOCUST, "-f", LOCUSTFILE, *args, "--csv", reports / "smoke", "--html", reports / "smoke.html"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with (reports / "smoke_stats.csv").open() as f:
        return {row["Name"]: row for row in csv.DictReader(f)}


@pytest.mark.slow
@pytest.mark.skipif(not LOCUST.exists(), reason="the `load` extra (locust) is not installed")
def test_storefront_mix_runs_without_failures(tiny_bundle, start_service, tmp_path):
    service = start_service(tiny_bundle, MS_API_KEY="write-key")
    # A wrong key makes seeding fail: Locust exits non-zero with the service's reason instead of failing quietly.
    refused = subprocess.run(
        [LOCUST, "-f", LOCUSTFILE, "--headless", "--host", service.url, "-u", "1", "-r", "1", "-t", "2s"],
        env={**os.environ, "LOADTEST_API_KEY": "wrong", "LOADTEST_SEED_ITEMS": "5"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "403" in refused.stderr, refused.stderr[-3000:]

    stats = run_locust(
        service.url, tmp_path / "reports", {"LOADTEST_API_KEY": "write-key", "LOADTEST_SEED_ITEMS": "60"}
    )
    total = stats["Aggregated"]
    assert int(total["Request Count"]) > 20
    assert int(total["Failure Count"]) == 0, (tmp_path / "reports" / "smoke_failures.csv").read_text()
    assert int(stats["/similar by id"]["Request Count"]) > int(
        stats.get("/similar by text", {}).get("Request Count", 0)
    )
    assert (tmp_path / "reports" / "smoke.html").stat().st_size > 0
    with service.client() as client:  # the seed items were written with the write key, and answer by id
        assert client.get("/readyz").json()["items"] >= 60
        assert client.get("/items/lt-59").status_code == 200
