"""Load against a running service: the service started as `metricsearch serve` on 127.0.0.1, timed requests through the
project's own client (metricsearch.client), and wrk for throughput, whose C client costs the shared cores little
next to the server."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import psutil

from metricsearch.client import Client
from metricsearch.service import ServiceProcess

BENCH_ENV = {"MS_OPTIMIZE_AFTER_WRITES": "0"}
"""No HNSW rebuild behind a timed run: the synthetic stores come with theirs built."""
WRK_SCRIPT = """
local bodies = dofile("{bodies}")
local n = 0
local get = {get}
wrk.method = get and "GET" or "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  n = n + 1
  local item = bodies[(n - 1) % #bodies + 1]
  if get then return wrk.format(nil, item) end
  return wrk.format(nil, "/similar", nil, item)
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RESULT {{"requests":%d,"duration_us":%d,"errors":%d,"non2xx":%d,"p50_us":%d,"p99_us":%d}}\\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99)))
end
"""


@contextmanager
def serving(bundle: Path, data_dir: Path, env: dict[str, str] | None = None, timeout_s: float = 300) -> Iterator:
    """A started service on data_dir (ServiceProcess), stopped on the way out."""
    service = ServiceProcess(bundle, data_dir, {**BENCH_ENV, **(env or {})})
    service.start(timeout_s=timeout_s)
    try:
        yield service
    finally:
        service.stop()


def build_child(service: ServiceProcess) -> psutil.Process | None:
    """The service's running HNSW optimiser (store/edge/optimize.py, a child process), None while no build runs."""
    try:
        children = psutil.Process(service.process.pid).children()
    except psutil.Error:
        return None
    for child in children:
        try:
            if child.status() != psutil.STATUS_ZOMBIE and any(a.endswith("optimize.py") for a in child.cmdline()):
                return child
        except psutil.Error:
            continue
    return None


def statistics_refreshing(service: ServiceProcess) -> bool:
    """Whether the service estimates its catalog statistics anew in the background (its /metrics gauge)."""
    with service.client() as client:
        metrics = client.get("/metrics").text
    return "metricsearch_statistics_refresh_running 1.0" in metrics


def wait_for_builds(service: ServiceProcess, timeout_s: float, quiet_s: float = 10.0) -> float:
    """Seconds until the service's background work is done: no HNSW optimiser and no statistics estimate seen for
    quiet_s (a build copies the shard before it starts one, and swaps the result in after it)."""
    started = last_seen = time.monotonic()
    while time.monotonic() - last_seen < quiet_s:
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"background builds or statistics estimates still running after {timeout_s:.0f} s")
        if build_child(service) is not None or statistics_refreshing(service):
            last_seen = time.monotonic()
        time.sleep(0.5)
    return round(last_seen - started, 1)


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if len(values) else float("nan")


def timed(client: Client, bodies: Sequence[dict], seconds: float = float("inf")) -> tuple[list[float], list[float]]:
    """Sequential POST /similar over `bodies` (for at most `seconds`): round-trip and the service's took_ms, in ms."""
    latencies, took = [], []
    deadline = time.monotonic() + seconds
    for body in bodies:
        if time.monotonic() >= deadline:
            break
        started = time.perf_counter()
        answer = client.similar(body)
        latencies.append((time.perf_counter() - started) * 1000)
        took.append(answer.took_ms)
    return latencies, took


def has_wrk() -> bool:
    return shutil.which("wrk") is not None


def wrk(url: str, bodies: Sequence[bytes], connections: int, seconds: float, workdir: Path, get: bool = False) -> dict:
    """One bounded wrk run (1 thread) over `bodies` in turn (POST /similar bodies, or with `get` the paths of GET
    requests): requests, errors, req/s, and p50 and p99 from wrk's own histogram."""
    lua = workdir / "bodies.lua"
    lua.write_text("return {" + ",".join(f"[==[{b.decode()}]==]" for b in bodies) + "}")
    script = workdir / "run.lua"
    script.write_text(WRK_SCRIPT.format(bodies=lua, get=str(get).lower()))
    done = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "10s", "-s", str(script), url],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stdout[-2000:]} {done.stderr[-2000:]}")
    result = json.loads(line.removeprefix("RESULT "))
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    result["p50"], result["p99"] = result["p50_us"] / 1000, result["p99_us"] / 1000
    return result
