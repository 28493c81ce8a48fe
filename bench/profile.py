"""Where a `/similar` request's time goes, per request kind: py-spy samples the real service (`metricsearch serve`,
answer and embedding caches off) while one keep-alive client sends one request after another. Writes BENCHMARKS.md's
"Hot path profile, N items" section.

    .venv/bin/python -m bench.profile [--items 100000] [--seconds 8] [--rate 200] [--store-dir DIR]

py-spy records with --idle and --threads: every thread is sampled at every tick, busy or not, so a stage's samples /
the rate / the requests served is its milliseconds a request, and the event loop's stages add up to its whole time,
idle included. A sample's stage is the innermost frame that a stage names (STAGES): a stage is its code's inclusive
time less the stages nested in it. The embedded engine is native code, which py-spy samples in the Python frame that
called it: a sample whose innermost frame is a line calling the shard (ENGINE_CALL) is the engine's. On a loaded
machine a thread waiting for a core is sampled where it stands.
"""

from __future__ import annotations

import argparse
import linecache
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.catalog import reused_store
from bench.data import wine_items
from bench.load import percentile, serving, timed
from bench.report import BENCHMARKS, ROOT, command, table, write_section
from metricsearch.client import Client

PY_SPY = Path(sys.executable).with_name("py-spy")
SERVICE_ENV = {"MS_ANSWER_CACHE_SIZE": "0", "MS_EMBEDDING_CACHE_SIZE": "0"}
IDLE = "idle, or in uvloop's native loop (socket I/O)"
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def _in(*parts: str) -> Callable[[str], bool]:
    return lambda file: any(part in file for part in parts)


ENGINE = "store: qdrant-edge engine (native)"
ENGINE_CALL = re.compile(r"\bshard\.(query|retrieve|scroll|count|info|update|flush)\(")
"""A source line that calls the embedded engine (a qdrant_edge.EdgeShard method)."""
STAGES: list[tuple[str, Callable[[str], bool]]] = [
    ("encoder: tokenizer", _in("tokenizers/")),
    ("encoder: ONNX Runtime or OpenVINO", _in("onnxruntime/", "openvino/")),
    ("encoder: padding, pooling, normalise", _in("metricsearch/encoder")),
    ("store: metricsearch's side (service/store/)", _in("metricsearch/service/store/")),
    ("ranking math (metricsearch/core/)", _in("metricsearch/core/")),
    ("HTTP routes and middleware (service/api/)", _in("metricsearch/service/api/", "metricsearch/service/server")),
    ("service core: query, ranking, caches, metrics (service/)", _in("metricsearch/service/")),
    ("request parsing and validation (pydantic)", _in("pydantic")),
    ("HTTP server (uvicorn, starlette, fastapi)", _in("uvicorn/", "starlette/", "fastapi/", "httptools", "anyio/")),
    ("metrics and logs libraries", _in("prometheus", "logging/")),
    ("asyncio event loop", _in("asyncio/")),
]
_IDLE_FUNCS = {("select", "selectors.py"), ("wait", "threading.py"), ("get", "queue.py"), ("_worker", "thread.py")}
_IDLE_FUNCS |= {("run", "runners.py"), ("run_until_complete", "base_events.py")}


@dataclass
class Profile:
    """One kind's samples: per thread (the event loop, the others) and stage, and the leaf frames of busy samples."""

    stages: dict[str, Counter[str]] = field(default_factory=dict)
    leaves: Counter[str] = field(default_factory=Counter)

    @classmethod
    def from_raw(cls, raw: str) -> Profile:
        profile = cls()
        for line in raw.splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            thread, *texts = stack.split(";")
            group = "event loop" if thread.endswith("MainThread") else "other threads"
            frames = [m.groups() for m in map(_FRAME.match, texts) if m]
            stage = stage_of(frames)
            profile.stages.setdefault(group, Counter())[stage] += int(count)
            if stage != IDLE and frames:
                func, file, line_no = frames[-1]
                file = file.rpartition("site-packages/")[2].rpartition(f"{ROOT}/")[2]
                profile.leaves[f"{func} ({file}:{line_no})"] += int(count)
        return profile

    def busy(self) -> int:
        return sum(n for c in self.stages.values() for s, n in c.items() if s != IDLE)


def stage_of(frames: list[tuple[str, str, str]]) -> str:
    if not frames:
        return IDLE
    func, file, line = frames[-1]
    if any(func.rpartition(".")[2] == name and file.endswith(path) for name, path in _IDLE_FUNCS):
        return IDLE
    if line and "metricsearch/service/store/" in file and ENGINE_CALL.search(linecache.getline(file, int(line))):
        return ENGINE
    for _, file, _ in reversed(frames):
        for name, matches in STAGES:
            if matches(file):
                return name
    return "other"


def recorded(pid: int, rate: int, out: Path, run: Callable[[], int]) -> tuple[str, float, int]:
    """py-spy's stacks of process `pid` while `run` sends requests: (raw stacks, seconds, requests sent)."""
    log = out.with_suffix(".log")
    cmd = [str(PY_SPY), "record", "--pid", str(pid), "-r", str(rate), "-f", "raw", "-o", str(out), "-d", "600"]
    with log.open("w") as sink:
        spy = subprocess.Popen([*cmd, "--idle", "--threads", "--full-filenames"], stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while "Sampling process" not in log.read_text():
            if spy.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"py-spy did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        started = time.monotonic()
        requests = run()
        seconds = time.monotonic() - started
        spy.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
        spy.wait(timeout=60)
    finally:
        if spy.poll() is None:
            spy.kill()
            spy.wait()
    if not out.exists():
        raise RuntimeError(f"py-spy wrote nothing: {log.read_text()[-2000:]}")
    return out.read_text(), seconds, requests


def kinds(ids: list[str], texts: list[str], count: int) -> dict[str, list[list[dict]]]:
    """Per kind, its bodies for the warm-up, the unprofiled and the profiled run; every text new across them."""
    rng = np.random.default_rng(1)

    def by_id(k: int, **extra: object) -> list[list[dict]]:
        return [[{"id": ids[i], "k": k, **extra} for i in rng.integers(0, len(ids), n)] for n in (30, count, count)]

    half = (len(texts) - 30) // 2
    chunks = [texts[:30], texts[30 : 30 + half], texts[30 + half :]]
    return {
        "by id, k=10": by_id(10),
        "by id, k=100": by_id(100),
        "by id, k=10, filter on `bucket`": by_id(10, filter={"bucket": 3}),
        "by text, k=10, every text new": [[{"text": t, "k": 10} for t in chunk] for chunk in chunks],
    }


def profile_kinds(service, cases: dict[str, list[list[dict]]], args: argparse.Namespace, workdir: Path) -> dict:
    results = {}
    with Client(service.url) as client:
        for name, (warm, plain, profiled) in cases.items():
            timed(client, warm, 30)
            latencies, took = timed(client, plain, args.seconds)
            under_spy: list[float] = []

            def run(bodies: list[dict] = profiled, out: list[float] = under_spy) -> int:
                out.extend(timed(client, bodies, args.seconds)[0])
                return len(out)

            raw, seconds, requests = recorded(service.process.pid, args.rate, workdir / "stacks.txt", run)
            results[name] = {
                "p50": percentile(latencies, 50),
                "took": statistics.median(took),
                "profiled": percentile(under_spy, 50),
                "requests": requests,
                "seconds": seconds,
                "profile": Profile.from_raw(raw),
            }
    return results


def stage_table(results: dict, rate: int) -> str:
    """Per thread and stage, ms a request and share of busy samples, in each kind's column."""
    rows = []
    for group in ("event loop", "other threads"):
        seen: Counter[str] = Counter()
        for r in results.values():
            seen.update(r["profile"].stages.get(group, {}))
        for stage in [s for s, _ in seen.most_common() if s != IDLE] + ([IDLE] if group == "event loop" else []):
            row = [f"{group}: {stage}"]
            for r in results.values():
                n = r["profile"].stages.get(group, Counter())[stage]
                share = "" if stage == IDLE else f" ({n / max(r['profile'].busy(), 1):.0%})"
                row.append(f"{n / rate / max(r['requests'], 1) * 1000:.2f}{share}" if n else "")
            rows.append(row)
    rows += [
        ["**client p50, unprofiled (ms)**", *(f"**{r['p50']:.2f}**" for r in results.values())],
        ["service took_ms p50, unprofiled", *(f"{r['took']:.2f}" for r in results.values())],
        ["client p50 under py-spy (ms)", *(f"{r['profiled']:.2f}" for r in results.values())],
        ["requests profiled / seconds", *(f"{r['requests']} / {r['seconds']:.1f}" for r in results.values())],
    ]
    return table(["thread: stage", *(f"{name}: ms/req (share of busy)" for name in results)], rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles/all-minilm-l6-v2")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds of each kind's timed and profiled runs")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples a second")
    parser.add_argument("--max-requests", type=int, default=5000, help="requests of each run at most")
    parser.add_argument("--store-dir", type=Path, default=None, help="default: var/bench-<items>")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if not PY_SPY.exists():
        sys.exit(f"{PY_SPY} is missing: pip install 'py-spy>=0.4' (the dev extra)")
    store_dir = args.store_dir or ROOT / f"var/bench-{args.items}"
    ids = reused_store(args.bundle, args.items, store_dir)
    texts = list(dict.fromkeys(i["title"] for i in wine_items(3 * args.max_requests)))
    with tempfile.TemporaryDirectory(prefix="ms-profile-") as tmp, serving(args.bundle, store_dir, SERVICE_ENV) as svc:
        results = profile_kinds(svc, kinds(ids, texts, args.max_requests), args, Path(tmp))
    top = []
    for name, r in results.items():
        busy = max(r["profile"].busy(), 1)
        leaves = [[f"`{leaf}`", f"{n / busy:.1%}"] for leaf, n in r["profile"].leaves.most_common(8)]
        top += [
            f"Top self-time frames, {name} (share of busy samples, all threads):",
            "",
            table(["frame", "share"], leaves),
            "",
        ]
    body = f"""Command: {command("bench.profile", argv)}. {args.items:,} synthetic items (bench/catalog.py);
`metricsearch serve` with HNSW built and both query caches off; one keep-alive client (metricsearch.client), one
request at a time. py-spy at {args.rate} samples/s with --idle --threads. ms/req: a stage's samples / the rate /
requests served; share: of all threads' busy samples. py-spy pauses the process at each sample, so the unprofiled p50
is the one to read.

{stage_table(results, args.rate)}

{chr(10).join(top)}"""
    print(body)
    write_section(BENCHMARKS, f"Hot path profile, {args.items:,} items", body)


if __name__ == "__main__":
    main()
