"""Each bench that needs no public dataset, run end to end at a tiny size: a bench no test runs breaks unseen when
the code it drives changes (bench.memory_bench failed for a day once the bulk encoder landed). Tiny bundle, a few
hundred synthetic items, HNSW built from the first kilobyte (MS_INDEXING_THRESHOLD_KB=1), a few wine reviews of our
own where a bench reads them, and no report written (MS_BENCH_NO_WRITE). Timings here mean nothing."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import NO_WRITE

ROOT = Path(__file__).resolve().parents[2]
WINE_COLUMNS = ("id", "title", "description")


@pytest.fixture(scope="module")
def bench_data(tmp_path_factory) -> Path:
    """MS_BENCH_DATA with the one file the synthetic benches read: wine reviews, for texts to index and query."""
    root = tmp_path_factory.mktemp("bench-data")
    wine = root / "wine_reviews_kaggle_130k_head/winemag-data-130k-v2.csv"
    wine.parent.mkdir()
    kinds = ("crisp white", "bold red", "dry rose", "sweet dessert wine", "sparkling brut")
    with wine.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(WINE_COLUMNS)
        for n in range(400):
            kind = kinds[n % len(kinds)]
            writer.writerow([n, f"Estate {n} {kind} {2000 + n % 20}", f"A {kind} with notes of fruit number {n}."])
    return root


BENCHES = {
    "hybrid_scale": ["--items", "300", "--requests", "3", "--rounds", "1", "--recall-queries", "2"],
    "memory_bench": ["--sizes", "300", "--requests", "5", "--no-write"],
    "costly_requests": ["--items", "300", "--repeats", "1", "--print-only"],
    "service_bench": ["--sizes", "300", "--requests", "5", "--index-items", "10", "--index-rounds", "1"],
    "rollout_bench": ["--items", "200", "--before", "5", "--after", "5", "--phase-s", "0.5", "--write-batch", "1"],
    "recommend_bench": ["--items", "300", "--requests", "5", "--skip-quality"],
    "durability_bench": ["--seconds", "0.5", "--preload", "100", "--no-write"],
    # Its RSS check is meaningless in 15 s: only that the mix runs without a failed request, and the report.
    "soak": ["--duration", "15s", "--seed-items", "100", "--new-id-pool", "20", "--sample-s", "1", "--max-growth", "9"],
}
BUNDLE_OPTION = {"memory_bench": "--bundles", "durability_bench": None}
MODULE = {"soak": "loadtests.soak"}


@pytest.mark.slow
@pytest.mark.parametrize("name", BENCHES)
def test_bench_runs_end_to_end(name, tiny_bundle, bench_data, tmp_path):
    option = BUNDLE_OPTION.get(name, "--bundle")
    bundle = [option, str(tiny_bundle)] if option else []
    env = {
        **os.environ,
        NO_WRITE: "1",
        "MS_BENCH_DATA": str(bench_data),
        "MS_INDEXING_THRESHOLD_KB": "1",
        "TQDM_DISABLE": "1",
    }
    reports = {path: path.read_bytes() for path in (ROOT / "BENCHMARKS.md", ROOT / "EVALUATION.md")}
    module = MODULE.get(name, f"bench.{name}")
    own = ["--reports", str(tmp_path / "reports")] if name == "soak" else []
    run = subprocess.run(
        [sys.executable, "-m", module, *BENCHES[name], *bundle, *own],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, f"{module} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    assert "|---" in run.stdout, f"{module} printed no table:\n{run.stdout[-2000:]}"
    assert {path: path.read_bytes() for path in reports} == reports, "a smoke run must leave the reports alone"
    if name == "soak":  # every RSS sample lands in the CSV, one row each after the header
        samples = (tmp_path / "reports" / "soak_rss.csv").read_text().splitlines()
        assert samples[0] == "seconds,rss_mib,anonymous_mib,file_backed_mib"
        assert len(samples) > 10, samples
