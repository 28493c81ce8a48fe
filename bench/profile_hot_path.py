"""Where a /similar request's time goes, per request kind: py-spy samples the real service (`metricsearch serve`,
answer and embedding caches off) while one keep-alive client sends one request after another. Prints a table and
writes the "Hot path profile" section of BENCHMARKS.md.

    .venv/bin/python -m bench.profile_hot_path [--items 100000] [--seconds 8] [--rate 200] [--store-dir DIR]
        [--env NAME=VALUE ...] [--no-native]

The catalog is bench/service_bench.py's synthetic one, built once into --store-dir and reused while it holds
--items items. Each kind runs a warm-up, then --seconds unprofiled (its client p50), then --seconds under py-spy.

py-spy records with --idle and --threads: every thread is sampled at every tick, busy or not, so the event loop
thread's samples are its wall time, and each stage's samples / the sampling rate / the requests served is that
stage's milliseconds per request; they add up to the event loop's whole time, its idle part included (waiting for
the client's next request, or for the encoder thread). Without --idle a parked thread would leave no trace and the
idle share could only be guessed. With --native (the default) the frames below a Python call show too: qdrant-edge's
query waiting on its own search threads, ONNX Runtime, uvloop's socket writes. A sample's stage is its innermost
frame that a stage names (STAGES), so a stage is the inclusive time of its functions less the stages nested in them.
On a loaded machine a thread that waits for a core is sampled where it stands: the stages hold wall time, not CPU.
"""

from __future__ import annotations

import argparse
import inspect
import os
import platform
import re
import shutil
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

from bench.report import machine, write_section
from bench.service_bench import ROOT, Client, percentile, reused_synthetic_store, wine_items
from metricsearch.core.bundle import load_bundle
from metricsearch.encoder import Encoder
from metricsearch.service import Catalog, ServiceProcess, Settings, open_store, vector_schema

DEFAULT_BUNDLE = ROOT / "bundles/all-minilm-l6-v2"
PY_SPY = Path(sys.executable).with_name("py-spy")
EVENT_LOOP = "MainThread"
ENCODER_THREAD = "query-encoder"
SERVICE_ENV = {
    "MS_OPTIMIZE_AFTER_WRITES": "0",
    "MS_ANSWER_CACHE_SIZE": "0",
    "MS_EMBEDDING_CACHE_SIZE": "0",
}
FLOOR_SAMPLE = 300
"""Requests (and texts) each floor is the median of."""
FLOOR_WARMUP = 50
"""Requests (and texts) before those, not counted."""
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
_TOKENIZE_LINE = next(
    start + n
    for source, start in [inspect.getsourcelines(Encoder._encode)]
    for n, text in enumerate(source)
    if "tokenizer.encode_batch" in text
)


@dataclass(frozen=True)
class Frame:
    func: str
    file: str
    line: int

    @property
    def python(self) -> bool:
        return self.file.endswith(".py")

    def __str__(self) -> str:
        """Short: the path below site-packages, the repository or the standard library; a library's file name."""
        file = self.file
        for root in ("site-packages/", f"{ROOT}/", f"python{sys.version_info[0]}.{sys.version_info[1]}/"):
            file = file.rpartition(root)[2] if root in file else file
        return f"{self.func} ({file}:{self.line})" if self.python else f"{self.func} ({Path(file).name})"


def _in(*paths: str, funcs: tuple[str, ...] = ()) -> Callable[[Frame], bool]:
    """A frame in a file whose path holds one of `paths`, in a function named starting with one of `funcs` when
    given (py-spy names `Class.method`, `outer.<locals>.<listcomp>`)."""
    return lambda f: any(p in f.file for p in paths) and (not funcs or f.func.startswith(funcs))


IDLE = "idle, or in uvloop's native loop (epoll, socket I/O)"
# A sample's stage: the first rule matching its innermost frame that any rule matches (a sample whose innermost
# Python frame waits is IDLE), so the more specific rule of a file comes first.
ENCODING: list[tuple[str, Callable[[Frame], bool]]] = [
    ("tokenizer", lambda f: "tokenizers/" in f.file or (f.file.endswith("encoder.py") and f.line == _TOKENIZE_LINE)),
    ("ONNX run", _in("onnxruntime/", "openvino/")),
    ("encoder: padding, pooling, normalise", _in("metricsearch/encoder.py", "metricsearch/core/scoring.py")),
]
"""The stages of a sample inside metricsearch/encoder.py (the query encoder's thread)."""
STAGES: list[tuple[str, Callable[[Frame], bool]]] = [
    ("query batcher + text query layout", _in("service/batcher.py")),
    ("lexical query terms (core/lexical.py)", _in("core/lexical.py")),
    ("lexical scoring (store/terms.py)", _in("store/terms.py")),
    ("candidate vectors + listings (store/mirror.py)", _in("store/mirror.py")),
    ("point ids (uuid5, UUID to str)", _in("core/records.py", "/uuid.py")),
    # qdrant-edge runs a query on its own rayon pool (native `edge-search-N` threads, 8 of them here, which py-spy
    # cannot sample) while the calling thread waits on a latch: the search's whole work, and the hand-offs
    ("store: qdrant-edge query (on its edge-search threads; the loop waits)", lambda f: "rayon_core" in f.func),
    ("store: qdrant-edge, in the event loop (conversions, setup)", _in("qdrant_edge")),
    ("store: item read by id (EdgeStore.get)", _in("store/edge.py", "store/payload.py", funcs=("EdgeStore.get",))),
    ("store: EdgeStore.search, Python side (filter, lists, hits)", _in("store/edge.py", "store/payload.py")),
    ("rerank + vector math (core/rerank, scoring, fusion)", _in("core/rerank.py", "core/scoring.py", "core/fusion.py")),
    ("catalog: query vectors, stats, matches", _in("service/catalog.py")),
    ("search use case + answer key (service/search.py)", _in("service/search.py", "service/cache.py")),
    ("result JSON (_results_json)", _in("routes/search.py", funcs=("_results_json",))),
    ("route handler (routes/search.py)", _in("routes/search.py")),
    ("request parsing + validation", _in("api/body.py", "pydantic", "core/schemas.py", "fastapi/dependencies/")),
    ("metrics, logs, spans", _in("prometheus", "service/metrics.py", "logging/", "service/logs.py", "core/spans.py")),
    (
        "HTTP/ASGI + middleware",
        _in("uvicorn/", "starlette/", "fastapi/", "httptools", "anyio/", "service/api/", "service/server.py"),
    ),
    ("asyncio event loop", _in("asyncio/")),
]
_IDLE_FRAMES = {
    ("select", "selectors.py"),
    ("wait", "threading.py"),
    ("get", "queue.py"),
    ("_worker", "concurrent/futures/thread.py"),
    # uvloop's loop is native: its epoll wait (and its socket reads and writes) sit below the frame that started it
    ("run", "asyncio/runners.py"),
    ("run_until_complete", "asyncio/base_events.py"),
}


def parse_frame(text: str, names: dict[str, str]) -> Frame:
    m = _FRAME.match(text)
    if m is None:
        return Frame(text, "", 0)
    return Frame(names.get(m["func"], m["func"]), m["file"], int(m["line"] or 0))


def demangled(raw: str) -> dict[str, str]:
    """Rust and C++ symbols of native frames, readable (c++filt, when installed), crate hashes dropped."""
    symbols = sorted(set(re.findall(r"(?:^|;)(_(?:R|ZN)[A-Za-z0-9_$.]+) \(", raw, re.M)))
    if not symbols or shutil.which("c++filt") is None:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(symbols), capture_output=True, text=True, timeout=60).stdout
    readable = [re.sub(r"\[[0-9a-f]{16}\]", "", line) for line in out.splitlines()]
    return dict(zip(symbols, readable, strict=True)) if len(readable) == len(symbols) else {}


def is_idle(frames: list[Frame]) -> bool:
    """Whether the innermost Python frame waits (native frames below it are the wait itself)."""
    innermost = next((f for f in reversed(frames) if f.python), None)
    if innermost is None:
        return True
    func = innermost.func.rpartition(".")[2]
    return any(func == name and innermost.file.endswith(path) for name, path in _IDLE_FRAMES)


def stage_of(frames: list[Frame]) -> str:
    if is_idle(frames):
        return IDLE
    rules = ENCODING if any(f.file.endswith("metricsearch/encoder.py") for f in frames) else STAGES
    for frame in reversed(frames):
        for name, matches in rules:
            if matches(frame):
                return name
    return "other"


def self_frame(frames: list[Frame]) -> Frame:
    """The innermost frame with a name: not an address, not the C library's wrapper of a system call."""
    return next((f for f in reversed(frames) if not f.func.startswith("0x") and "libc.so" not in f.file), frames[-1])


@dataclass
class Profile:
    """One kind's samples: per thread group and stage, and the leaf frames of busy samples."""

    stages: dict[str, Counter[str]] = field(default_factory=dict)
    leaves: Counter[str] = field(default_factory=Counter)

    @classmethod
    def from_raw(cls, raw: str) -> Profile:
        profile = cls()
        names = demangled(raw)
        for line in raw.splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            thread, *texts = stack.split(";")
            name = thread.partition(": ")[2]
            group = EVENT_LOOP if name == EVENT_LOOP else ENCODER_THREAD if name.startswith(ENCODER_THREAD) else "other"
            frames = [parse_frame(t, names) for t in texts]
            stage = stage_of(frames)
            profile.stages.setdefault(group, Counter())[stage] += int(count)
            if stage != IDLE:
                profile.leaves[str(self_frame(frames))] += int(count)
        return profile

    def busy(self) -> int:
        return sum(n for c in self.stages.values() for s, n in c.items() if s != IDLE)


def drive(client: Client, bodies: list[dict], seconds: float) -> tuple[list[float], list[float]]:
    """Sequential POST /similar over `bodies` for at most `seconds`: client latencies and the service's took_ms."""
    latencies, took = [], []
    deadline = time.monotonic() + seconds
    for body in bodies:
        if time.monotonic() >= deadline:
            break
        started = time.perf_counter()
        answer = client.post("/similar", body)
        latencies.append((time.perf_counter() - started) * 1000)
        took.append(answer["took_ms"])
    return latencies, took


def recorded(pid: int, rate: int, native: bool, out: Path, run: Callable[[], int]) -> tuple[str, float, int]:
    """py-spy's collapsed stacks of process `pid` while `run` sends requests; (raw stacks, seconds sampled, the
    requests `run` sent). Sampling starts before and stops right after `run`, so the seconds are `run`'s."""
    log = out.with_suffix(".log")
    cmd = [str(PY_SPY), "record", "--pid", str(pid), "-r", str(rate), "-f", "raw", "-o", str(out), "-d", "600"]
    cmd += ["--idle", "--threads", "--full-filenames", *(["--native"] if native else [])]
    with log.open("w") as sink:
        spy = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
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
    """Per kind, bodies for its three phases (warm-up, unprofiled, profiled); every text new across all phases."""
    rng = np.random.default_rng(1)

    def by_id(k: int, **extra: object) -> list[list[dict]]:
        return [[{"id": ids[i], "k": k, **extra} for i in rng.integers(0, len(ids), n)] for n in (50, count, count)]

    third = (len(texts) - 30) // 2
    chunks = [texts[:30], texts[30 : 30 + third], texts[30 + third :]]
    return {
        "by id, k=10": by_id(10),
        "by id, k=100": by_id(100),
        'by id, k=10, filter {"bucket": 3}': by_id(10, filter={"bucket": 3}),
        "by text, k=10, every text new": [[{"text": t, "k": 10} for t in chunk] for chunk in chunks],
    }


@dataclass
class Result:
    p50: float
    took_p50: float
    profiled_p50: float
    requests: int
    seconds: float
    profile: Profile

    def ms_per_request(self, samples: int, rate: int) -> float:
        return samples / rate / max(self.requests, 1) * 1000


def run_kinds(
    service: ServiceProcess, cases: dict[str, list[list[dict]]], args: argparse.Namespace, workdir: Path
) -> dict[str, Result]:
    results = {}
    client = Client(service.port)
    try:
        for name, (warm, plain, profiled) in cases.items():
            drive(client, warm, 30)
            latencies, took = drive(client, plain, args.seconds)
            timed: list[float] = []

            def run(bodies: list[dict] = profiled, timed: list[float] = timed) -> int:
                timed.extend(drive(client, bodies, args.seconds)[0])
                return len(timed)

            raw, seconds, requests = recorded(service.process.pid, args.rate, args.native, workdir / "stacks.txt", run)
            results[name] = Result(
                p50=percentile(latencies, 50),
                took_p50=statistics.median(took),
                profiled_p50=percentile(timed, 50),
                requests=requests,
                seconds=seconds,
                profile=Profile.from_raw(raw),
            )
            print(f"{name}: p50 {results[name].p50:.2f} ms, {requests} requests profiled", flush=True)
    finally:
        client.close()
    return results


def http_floor(port: int) -> float:
    """p50 ms of `GET /livez` (a route that does nothing) with the keep-alive client the kinds use."""
    client = Client(port)
    try:
        latencies = []
        for _ in range(FLOOR_WARMUP + FLOOR_SAMPLE):
            started = time.perf_counter()
            client.get("/livez")
            latencies.append((time.perf_counter() - started) * 1000)
    finally:
        client.close()
    return percentile(latencies[FLOOR_WARMUP:], 50)


def in_process_floors(bundle: Path, store_dir: Path, ids: list[str], texts: list[str]) -> dict[str, float]:
    """p50 ms of what a request cannot skip, measured in this process on the service's store once the service
    stopped (it owns the store): the dense ANN search alone (engine query and candidate vectors; no lexical prefetch,
    rerank or response) for k=10's and k=100's candidates, each item excluded as by id, and one text encoded alone as
    a text query is."""
    loaded = load_bundle(bundle)
    settings = Settings(data_dir=store_dir, optimize_after_writes=0)
    encoder = Encoder(loaded, intra_op_threads=1)
    store = open_store(settings, vector_schema(loaded))
    try:
        catalog = Catalog(
            loaded.manifest,
            encoder,
            store,
            candidates_min=settings.candidates_min,
            candidates_factor=settings.candidates_factor,
        )
        searches: dict[int, list[float]] = {10: [], 100: []}
        for item_id in (ids[i] for i in np.random.default_rng(2).integers(0, len(ids), FLOOR_WARMUP + FLOOR_SAMPLE)):
            query, _ = catalog.item_query(store.get([item_id], with_vectors=True)[item_id])
            ann = catalog.ann_vector(query)
            for k, times in searches.items():
                started = time.perf_counter()
                store.search(ann, catalog.candidate_limit(k), (), [item_id])
                times.append((time.perf_counter() - started) * 1000)
        encodes = []
        for text in texts[: FLOOR_WARMUP + FLOOR_SAMPLE]:
            started = time.perf_counter()
            encoder.encode([text])
            encodes.append((time.perf_counter() - started) * 1000)
    finally:
        store.close()
    return {
        "search10": percentile(searches[10][FLOOR_WARMUP:], 50),
        "search100": percentile(searches[100][FLOOR_WARMUP:], 50),
        "encode": percentile(encodes[FLOOR_WARMUP:], 50),
        "candidates10": catalog.candidate_limit(10),
        "candidates100": catalog.candidate_limit(100),
    }


def floor_lines(http: float, floors: dict[str, float], results: dict[str, Result]) -> list[str]:
    """The floors, and each of issue 16's latency targets beside the floors its request cannot do without."""
    by_id = results["by id, k=10"]
    rows = [
        ("by id, k=10", by_id.p50, http + floors["search10"], 2.5),
        ("by id, k=100", results["by id, k=100"].p50, http + floors["search100"], 8.0),
        (
            "by text, k=10, every text new",
            results["by text, k=10, every text new"].p50,
            http + floors["encode"] + floors["search10"],
            8.0,
        ),
    ]
    return [
        "",
        "Floors: what no request of a kind can skip on this machine (p50 ms; the HTTP row with the service above, the "
        f"others in this process on the same store after the service stopped; {FLOOR_SAMPLE} requests each):",
        "",
        "| part | p50 ms |",
        "|---|---|",
        f"| HTTP: `GET /livez` round trip (a route that does nothing), same client and service | {http:.2f} |",
        f"| store: dense ANN search alone (the engine's query, the candidates' vectors read), {floors['candidates10']} "
        f"candidates (k=10's), without the lexical prefetch, rerank or response | {floors['search10']:.2f} |",
        f"| store: the same, {floors['candidates100']} candidates (k=100's) | {floors['search100']:.2f} |",
        f"| encoder: one text alone (ONNX Runtime, 1 thread) | {floors['encode']:.2f} |",
        "",
        "| issue 16 target | p50 measured above (ms) | its floors together (ms) | target (ms) |",
        "|---|---|---|---|",
        *(f"| {name} | {p50:.2f} | {floor:.2f} | {target:g} |" for name, p50, floor, target in rows),
        "",
        "Throughput (>= 1,000 req/s by id with 8 connections): the engine holds the GIL during a query and the "
        "embedded store is owned by one process (docs/operations.md), so requests are answered one at a time: "
        f"1000 / the service's took_ms p50 by id ({by_id.took_p50:.2f} ms) = {1000 / by_id.took_p50:.0f} req/s at "
        "most, before HTTP.",
    ]


def tables(results: dict[str, Result], rate: int) -> list[str]:
    """Per stage and kind: ms a request (the event loop's, then the encoder thread's) and share of busy samples."""
    names = list(results)
    lines = [
        "| thread: stage | " + " | ".join(f"{n}: ms/req (share of busy)" for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for group in (EVENT_LOOP, ENCODER_THREAD, "other"):
        seen = Counter()
        for r in results.values():
            seen.update(r.profile.stages.get(group, {}))
        order = [s for s, _ in seen.most_common() if s != IDLE] + ([IDLE] if IDLE in seen else [])
        label = {EVENT_LOOP: "event loop", ENCODER_THREAD: "encoder thread", "other": "other threads"}[group]
        for stage in order:
            if group == "other" and stage == IDLE:
                continue  # parked pool threads: a sample each per tick, no request's time
            cells = []
            for r in results.values():
                n = r.profile.stages.get(group, Counter())[stage]
                share = "" if stage == IDLE else f" ({n / max(r.profile.busy(), 1):.0%})"
                cells.append(f"{r.ms_per_request(n, rate):.2f}{share}" if n else "")
            lines.append(f"| {label}: {stage} | " + " | ".join(cells) + " |")
    lines += [
        "| **client p50, unprofiled (ms)** | " + " | ".join(f"**{r.p50:.2f}**" for r in results.values()) + " |",
        "| service took_ms p50, unprofiled | " + " | ".join(f"{r.took_p50:.2f}" for r in results.values()) + " |",
        "| client p50 under py-spy (ms) | " + " | ".join(f"{r.profiled_p50:.2f}" for r in results.values()) + " |",
        "| requests profiled / seconds / event loop samples per nominal tick | "
        + " | ".join(
            f"{r.requests} / {r.seconds:.1f} / {r.profile.stages[EVENT_LOOP].total() / (rate * r.seconds):.2f}"
            for r in results.values()
        )
        + " |",
    ]
    for name, r in results.items():
        busy = max(r.profile.busy(), 1)
        lines += ["", f"Top 10 self-time frames, {name} (share of busy samples, all threads):", ""]
        lines += ["| frame | share |", "|---|---|"]
        lines += [f"| `{leaf}` | {n / busy:.1%} |" for leaf, n in r.profile.leaves.most_common(10)]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds of each kind's timed and profiled runs")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples a second")
    parser.add_argument(
        "--native",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="sample native frames too (what qdrant-edge and ONNX Runtime do below their Python call)",
    )
    parser.add_argument("--max-requests", type=int, default=5000, help="requests of each run at most")
    parser.add_argument("--store-dir", type=Path, default=None, help="default: var/profile-<items>")
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="another service setting (repeatable)"
    )
    args = parser.parse_args()
    if not PY_SPY.exists():
        sys.exit(f"{PY_SPY} is missing: pip install 'py-spy>=0.4' (the dev extra)")
    store_dir = args.store_dir or ROOT / f"var/profile-{args.items}"
    ids = reused_synthetic_store(args.bundle, args.items, store_dir)
    texts = list(dict.fromkeys(i["title"] for i in wine_items(3 * args.max_requests)))
    cases = kinds(ids, texts, args.max_requests)
    env = {"MS_INTRA_OP_THREADS": "1", **SERVICE_ENV, **dict(e.partition("=")[::2] for e in args.env)}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ms-profile-") as tmp:
        service = ServiceProcess(args.bundle, store_dir, env)
        service.start(timeout_s=180)
        try:
            http = http_floor(service.port)
            results = run_kinds(service, cases, args, Path(tmp))
        finally:
            service.stop()
    floors = in_process_floors(args.bundle, store_dir, ids, texts)
    load_after = os.getloadavg()

    lines = [
        f"Machine: {machine()} shared with other work (1-min load average "
        f"{load_before[0]:.1f} at the start, {load_after[0]:.1f} at the end); CPython {platform.python_version()}; "
        f"bundle `{args.bundle.name}`; {args.items:,} synthetic items (bench/service_bench.py catalog).",
        "Command: `.venv/bin/python -m bench.profile_hot_path "
        + (f"--bundle {args.bundle} " if args.bundle != DEFAULT_BUNDLE else "")
        + f"--items {args.items} --seconds {args.seconds:g} --rate {args.rate}"
        + ("" if args.native else " --no-native")
        + "".join(f" --env {e}" for e in args.env)
        + "` (the store built beforehand, not "
        "timed). Service: `metricsearch serve`, embedded store with HNSW, "
        + ", ".join(f"{k}={v}" for k, v in env.items())
        + "; one keep-alive client (http.client), one request at a time, on 127.0.0.1.",
        f"Profiler: py-spy {args.rate} samples/s with --idle --threads{' --native' if args.native else ''}, "
        f"{args.seconds:g} s a kind. ms/req: the "
        "thread's samples in the stage / the nominal rate / requests served, so the event loop's rows add up to its "
        "wall time a request (client latency less the client's own share; samples per tick a little over 1: py-spy "
        "starts and stops just outside the requests, idle); share: of the samples of all "
        "threads that were not idle. A stage is its functions' inclusive time less the stages nested in them "
        "(bench/profile_hot_path.py, STAGES). py-spy pauses the process at each sample: the profiled p50 is higher "
        "than the unprofiled one, which is the figure to hold against the targets.",
        "",
        *tables(results, args.rate),
        *floor_lines(http, floors, results),
    ]
    text = "\n".join(lines)
    print(text)
    write_section(ROOT / "BENCHMARKS.md", "Hot path profile", text)


if __name__ == "__main__":
    main()
