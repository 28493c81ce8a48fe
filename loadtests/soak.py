"""Soak test: start a local service on a fresh data dir, run the Locust storefront mix (loadtests/locustfile.py) at
it for DURATION, sample the service's RSS, and fail when any request failed or RSS grew more than --max-growth
after the warm-up. `make soak DURATION=10m` runs it and writes BENCHMARKS.md's "Soak" section.

    .venv/bin/python -m loadtests.soak --duration 10m [--users 2] [--bundle bundles/all-minilm-l6-v2]

Locust runs as its own process (it cannot be imported beside the service stack). Reports land in
loadtests/reports/ (soak_stats.csv, soak.html, soak.json, soak_rss.csv: the RSS samples); the last line printed is
the verdict. The service's RSS is the serving process alone (a background HNSW build runs in a child process with its
own memory).

The service's two query caches are capped at --cache-mb each for the run: at their defaults (64 and 32 MB) they
were still filling ten minutes in (+81 MiB, +21.5%; five minutes with both caches off: +3.4%), which the
RSS check cannot tell from a leak; small, they fill during the warm-up and evict all run long.

RSS is reported split in two: anonymous memory (the heap: Python, the engine, ONNX Runtime) and file-backed pages
(the engine's memory-mapped segments and WAL, which the OS may evict). Some file-backed growth is expected in a run of
minutes: the open WAL segment, a 32 MB file, fills until it rotates out after a checkpoint (MS_CHECKPOINT_INTERVAL_S).
The service runs with MALLOC_ARENA_MAX=2, as the image and `make serve` run it: with glibc's default of an arena per
thread its heap crept 2-6 MiB a minute (docs/operations.md, "Soak").
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from bench.report import BENCHMARKS, shown_path, write_section, write_summary

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MALLOC_ARENAS = "2"
"""MALLOC_ARENA_MAX of the service unless set in the environment: as the image and `make serve` run it."""
MIN_ADDED_ITEMS = 100
"""Fewer items added after the warm-up give no per-item RSS figure: a few MiB of noise over one item read as 21 MB."""


def seconds(duration: str) -> int:
    """Locust's duration syntax ('90s', '10m', '1h30m') in seconds."""
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?", duration.strip())
    if not parts or not duration.strip():
        raise SystemExit(f"soak: bad duration {duration!r}: use e.g. 90s, 10m or 1h")
    h, m, s = (int(p or 0) for p in parts.groups())
    return h * 3600 + m * 60 + s


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_service(
    bundle: Path, data_dir: Path, port: int, log_path: Path, api_key: str, cache_mb: float
) -> subprocess.Popen:
    """`metricsearch serve` on 127.0.0.1:port (this part imports none of metricsearch: it runs it)."""
    env = {
        "MS_ANSWER_CACHE_MB": str(cache_mb),
        "MS_EMBEDDING_CACHE_MB": str(cache_mb),
        "MALLOC_ARENA_MAX": MALLOC_ARENAS,
        **os.environ,
        "MS_BUNDLE_DIR": str(bundle),
        "MS_DATA_DIR": str(data_dir),
        "MS_HOST": "127.0.0.1",
        "MS_PORT": str(port),
        "MS_API_KEY": api_key,
        "MS_LOG_LEVEL": "warning",
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen([str(BIN / "metricsearch"), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"soak: the service exited with {process.returncode}: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit(f"soak: the service was not ready within 180 s: {log_path.read_text()[-2000:]}")


def item_count(url: str) -> int | None:
    try:
        return httpx.get(f"{url}/readyz", timeout=10).json()["items"]
    except (httpx.HTTPError, ValueError, KeyError):
        return None


def aggregated(stats_csv: Path) -> dict[str, str]:
    with stats_csv.open(newline="") as f:
        return next((row for row in csv.DictReader(f) if row["Name"] == "Aggregated"), {})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="10m", help="Locust run time, e.g. 90s, 10m")
    parser.add_argument("--users", type=int, default=2, help="concurrent Locust users (closed loop, no think time)")
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles" / "all-minilm-l6-v2")
    parser.add_argument("--seed-items", type=int, default=1000, help="items indexed before the run (Locust seeds)")
    parser.add_argument(
        "--new-id-pool",
        type=int,
        default=200,
        help="distinct ids of the mix's new-item upserts: the catalog stops growing once they are all written, so "
        "RSS growth after the warm-up is a leak, not data (0 = a fresh id each time)",
    )
    parser.add_argument(
        "--cache-mb",
        type=float,
        default=2.0,
        help="MS_ANSWER_CACHE_MB and MS_EMBEDDING_CACHE_MB of the service (unless set in the environment): small, "
        "so the caches are full by the RSS baseline",
    )
    parser.add_argument(
        "--reports", type=Path, default=ROOT / "loadtests" / "reports", help="folder of Locust's and the soak's reports"
    )
    parser.add_argument("--max-growth", type=float, default=0.10, help="largest RSS growth after warm-up")
    parser.add_argument("--warmup", type=float, default=0.1, help="share of the run before the RSS baseline")
    parser.add_argument("--sample-s", type=float, default=5.0, help="seconds between RSS samples")
    args = parser.parse_args()
    run_s = seconds(args.duration)
    reports = args.reports
    reports.mkdir(parents=True, exist_ok=True)
    prefix = reports / "soak"
    api_key = os.urandom(16).hex()

    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        port = free_port()
        service = start_service(
            args.bundle, Path(tmp) / "data", port, reports / "soak-service.log", api_key, args.cache_mb
        )
        url = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        samples: list[tuple[float, int, int]] = []  # (seconds, RSS, file-backed RSS) in bytes
        try:
            memory = psutil.Process(service.pid)
            locust = subprocess.Popen(
                [
                    str(BIN / "locust"),
                    "-f",
                    str(ROOT / "loadtests" / "locustfile.py"),
                    "--headless",
                    "--host",
                    url,
                    "-u",
                    str(args.users),
                    "-r",
                    str(args.users),
                    "-t",
                    args.duration,
                    "--stop-timeout",
                    "10",
                    "--only-summary",
                    "--csv",
                    str(prefix),
                    "--html",
                    str(reports / "soak.html"),
                ],
                env={
                    **os.environ,
                    "LOADTEST_API_KEY": api_key,
                    "LOADTEST_SEED_ITEMS": str(args.seed_items),
                    "LOADTEST_NEW_ID_POOL": str(args.new_id_pool),
                },
                stdout=subprocess.DEVNULL,
                stderr=(reports / "soak-locust.log").open("wb"),
            )
            deadline = started + run_s + 600  # seeding and stopping included; never unbounded
            items_at_baseline = None
            while locust.poll() is None and time.monotonic() < deadline:
                if service.poll() is not None:
                    locust.terminate()
                    break
                rss = memory.memory_info()
                samples.append((time.monotonic() - started, rss.rss, rss.shared))
                if items_at_baseline is None and samples[-1][0] >= args.warmup * run_s:
                    items_at_baseline = item_count(url)
                elapsed = int(time.monotonic() - started)
                print(f"\r{elapsed:>5d} s  RSS {samples[-1][1] / 2**20:7.1f} MiB", end="", file=sys.stderr, flush=True)
                time.sleep(args.sample_s)
            print(file=sys.stderr)
            if locust.poll() is None:
                locust.kill()
            locust.wait(timeout=60)
            service_alive = service.poll() is None
            items_at_end = item_count(url) if service_alive else None
        finally:
            service.terminate()
            try:
                service.wait(timeout=30)
            except subprocess.TimeoutExpired:
                service.kill()

    stats = aggregated(Path(f"{prefix}_stats.csv"))
    requests, failures = int(stats.get("Request Count", 0)), int(stats.get("Failure Count", 0))
    # The baseline is the RSS once warmed up (model loaded, caches filled): the first sample past the warm-up.
    warm = [sample for sample in samples if sample[0] >= args.warmup * run_s] or samples
    baseline, peak, final = warm[0][1], max(rss for _, rss, _ in warm), warm[-1][1]
    growth = peak / baseline - 1
    half = len(warm) // 2
    with (reports / "soak_rss.csv").open("w", newline="") as f:
        rows = csv.writer(f)
        rows.writerow(["seconds", "rss_mib", "anonymous_mib", "file_backed_mib"])
        rows.writerows([f"{t:.0f}", *(f"{b / 2**20:.1f}" for b in (rss, rss - file, file))] for t, rss, file in samples)
    report = {
        "duration_s": run_s,
        "users": args.users,
        "requests": requests,
        "failures": failures,
        "requests_per_s": float(stats.get("Requests/s", 0) or 0),
        "p50_ms": float(stats.get("50%", 0) or 0),
        "p99_ms": float(stats.get("99%", 0) or 0),
        "rss_baseline_mib": round(baseline / 2**20, 1),
        "rss_peak_mib": round(peak / 2**20, 1),
        "rss_final_mib": round(final / 2**20, 1),
        "rss_growth": round(growth, 4),
        "anon_mib_per_min": round(_slope(warm, anonymous=True), 2),
        # The same over each half of the run after warm-up: a heap that levels off grows less in the second.
        "anon_mib_per_min_halves": [round(_slope(part, anonymous=True), 2) for part in (warm[: half + 1], warm[half:])],
        "file_mib_per_min": round(_slope(warm, anonymous=False), 2),
        # File-backed pages rise and fall (the WAL segment fills, then rotates out): their range says more than a slope.
        "file_mib_range": [round(f(file for _, _, file in warm) / 2**20, 1) for f in (min, max)],
        # The mix's /index adds new items, and each stored item costs memory: growth per added item tells that
        # apart from a leak (reads alone leave RSS flat).
        "items_at_baseline": items_at_baseline,
        "items_at_end": items_at_end,
        "rss_kib_per_added_item": round((peak - baseline) / 1024 / (items_at_end - items_at_baseline), 1)
        if items_at_baseline is not None and items_at_end and items_at_end - items_at_baseline >= MIN_ADDED_ITEMS
        else None,
        "service_survived": service_alive,
        "locust_exit": locust.returncode,
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }
    (reports / "soak.json").write_text(json.dumps(report, indent=2) + "\n")
    problems = []
    if requests == 0:
        problems.append(f"no requests were made (see {reports / 'soak-locust.log'})")
    if failures:
        problems.append(f"{failures} of {requests} requests failed ({reports / 'soak_failures.csv'})")
    if growth > args.max_growth:
        problems.append(f"RSS grew {growth:.1%} after warm-up (limit {args.max_growth:.0%})")
    if not service_alive:
        problems.append(f"the service died ({reports / 'soak-service.log'})")
    print(json.dumps(report, indent=2))
    verdict = "FAIL: " + "; ".join(problems) if problems else "PASS"
    section = _section(args, report, verdict)
    print(section)
    write_section(BENCHMARKS, "Soak", section)
    ours = f"{args.duration}: {failures} of {requests:,} failed; RSS {growth:+.1%} ({verdict})"
    write_summary(BENCHMARKS, "Soak", [("soak: failed requests, RSS growth after warm-up", ours, "limit +10%")])
    print(
        f"soak {verdict}: {requests} requests, {failures} failed, {report['requests_per_s']:.0f} req/s over "
        f"{run_s} s with {args.users} users; RSS {report['rss_baseline_mib']} -> peak {report['rss_peak_mib']} MiB "
        f"({growth:+.1%}) while items went {items_at_baseline} -> {items_at_end}"
    )
    return 1 if problems else 0


def _slope(samples: list[tuple[float, int, int]], anonymous: bool) -> float:
    """MiB a minute from the first sample to the last, of anonymous memory (RSS less file-backed) or file-backed."""
    (t0, rss0, file0), (t1, rss1, file1) = samples[0], samples[-1]
    grown = (rss1 - file1) - (rss0 - file0) if anonymous else file1 - file0
    return grown / 2**20 / (max(t1 - t0, 1.0) / 60)


def _section(args: argparse.Namespace, report: dict, verdict: str) -> str:
    command = (
        f"`.venv/bin/python -m loadtests.soak --duration {args.duration} --users {args.users} --bundle "
        f"{shown_path(args.bundle)} --cache-mb {args.cache_mb:g}`"
    )
    items = f"{report['items_at_baseline']:,} -> {report['items_at_end']:,}" if report["items_at_end"] else "-"
    header = [
        "duration",
        "requests",
        "failed",
        "req/s",
        "p50 / p99 ms",
        "RSS after warm-up -> peak (MiB)",
        "growth",
        "anonymous MiB/min",
        "file-backed MiB/min (range)",
        "items",
    ]
    row = [
        f"{report['duration_s']} s",
        f"{report['requests']:,}",
        str(report["failures"]),
        f"{report['requests_per_s']:.0f}",
        f"{report['p50_ms']:.0f} / {report['p99_ms']:.0f}",
        f"{report['rss_baseline_mib']} -> {report['rss_peak_mib']}",
        f"{report['rss_growth']:+.1%} (limit {args.max_growth:.0%}): {verdict}",
        "{:+.2f} (halves {:+.2f} / {:+.2f})".format(report["anon_mib_per_min"], *report["anon_mib_per_min_halves"]),
        "{:+.2f} ({:.0f}-{:.0f} MiB)".format(report["file_mib_per_min"], *report["file_mib_range"]),
        items,
    ]
    table = "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header), "| " + " | ".join(row) + " |"])
    return f"""Command: {command} (`make soak DURATION={args.duration}`), one run.
The Locust storefront mix (90% by id, 8% by text, 2% small upserts: half
re-index a seeded item, half add one of {args.new_id_pool} new ids) with {args.users} closed-loop users on
{args.seed_items:,} seeded items; the query caches capped at {args.cache_mb:g} MB each so they are full by the baseline;
MALLOC_ARENA_MAX={os.environ.get("MALLOC_ARENA_MAX", MALLOC_ARENAS)}, as the image and `make serve` run the service.

{table}

The two slopes run from the first sample after the warm-up to the last (the anonymous one also over each half of
that): anonymous memory is the heap (Python, the engine, ONNX Runtime); file-backed pages are the engine's
memory-mapped segments and WAL, which the OS may evict, and rise and fall as the open WAL segment fills and rotates
out (their range after the warm-up in brackets). Every sample: soak_rss.csv in the reports.
"""


if __name__ == "__main__":
    sys.exit(main())
