"""Model rollout under load: the catalog is re-encoded into another bundle while one client queries without pause and
another writes every second; the copy's duration and items/s, `/similar` latency before, during and after, every
failed request, and whether every acknowledged write is there after the swap. Writes BENCHMARKS.md's "Model
rollout" section and its summary row (the soak, the other question of running the service for long, is
loadtests/soak.py).

    .venv/bin/python -m bench.rollout [--items 100000] [--before 1000] [--after 1000] [--phase-s 10] [--write-batch 4]

The live store is bench/catalog.py's synthetic catalog (vectors written straight into it, HNSW built); the rollout
re-encodes every item with the real model. Bundle B is a copy of A under another name, so `GET /model` tells which
one serves. Answer cache off: every query is a search. It exits non-zero when a request or a write was lost.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.catalog import reused_store
from bench.load import percentile, serving
from bench.report import BENCHMARKS, ROOT, command, table, write_section, write_summary
from metricsearch.client import Client, ServiceError
from metricsearch.core.bundle import MANIFEST_FILE, load_bundle

POLL_S = 0.5
PHASES = {"before": "before the rollout", "during": "during it (start to swap)", "after": "after the swap"}


@dataclass
class Load:
    """What the query and write loops saw: (start, ms) of each answered request, and each failure (path, start)."""

    queries: list[tuple[float, float]] = field(default_factory=list)
    writes: list[tuple[float, float]] = field(default_factory=list)
    failed: list[tuple[str, float, str]] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def timed(self, path: str, call, times: list[tuple[float, float]]) -> bool:
        started = time.perf_counter()
        try:
            call()
        except Exception as e:  # every failure counts, whatever it is
            self.failed.append((path, started, f"{type(e).__name__}: {e}"[:300]))
            return False
        times.append((started, (time.perf_counter() - started) * 1000))
        return True


def query_loop(url: str, ids: list[str], load: Load, limit: int) -> None:
    picks = np.random.default_rng(1).integers(0, len(ids), limit)
    with Client(url, retries=0) as client:
        for i in picks:
            if load.stop.is_set():
                break
            load.timed("/similar", lambda i=i: client.similar(id=ids[i], k=10), load.queries)


def write_loop(url: str, batch: int, load: Load) -> None:
    """A batch of `batch` new items a second, until stopped (bounded: a day's seconds)."""
    with Client(url, retries=0) as client:
        for start in range(0, 86_400 * batch, batch):
            if load.stop.wait(1.0):
                break
            items = [{"id": f"new{start + j}", "title": f"new item {start + j}"} for j in range(batch)]
            if load.timed("/index", lambda items=items: client.index(items), load.writes):
                load.acknowledged.extend(item["id"] for item in items)


def wait_until(predicate, deadline: float, what: str) -> None:
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(POLL_S)


def bundle_b(bundle: Path, folder: Path) -> Path:
    """A copy of `bundle` named `<name>-b`: the same model, told apart by `GET /model`."""
    shutil.copytree(bundle, folder)
    manifest = load_bundle(folder).manifest
    renamed = manifest.model_copy(update={"name": f"{manifest.name}-b"})
    (folder / MANIFEST_FILE).write_text(renamed.model_dump_json(indent=2) + "\n")
    return folder


def run(args: argparse.Namespace, ids: list[str], data_dir: Path, target: Path) -> dict:
    deadline = time.monotonic() + args.deadline_s
    load = Load()
    with serving(args.bundle, data_dir, {"MS_ANSWER_CACHE_SIZE": "0", "MS_LOG_LEVEL": "WARNING"}) as service:
        limit = args.before + args.after + args.items * 20  # bounded: the slowest copy we accept, at ~1000 req/s
        threads = [
            threading.Thread(target=query_loop, args=(service.url, ids, load, limit), daemon=True),
            threading.Thread(target=write_loop, args=(service.url, args.write_batch, load), daemon=True),
        ]
        with Client(service.url, retries=0) as admin:
            try:
                for thread in threads:
                    thread.start()
                began = time.perf_counter()
                wait_until(
                    lambda: (
                        (len(load.queries) >= args.before and time.perf_counter() - began >= args.phase_s)
                        or not threads[0].is_alive()
                    ),
                    deadline,
                    "the queries before the rollout",
                )
                started = time.perf_counter()
                admin.rollout_start(str(target))
                while (status := admin.rollout_status()).state == "copying":
                    if time.monotonic() > deadline:
                        admin.rollout_abort()
                        raise TimeoutError(f"rollout not done after {args.deadline_s} s: {status}")
                    time.sleep(POLL_S)
                ready = time.perf_counter()
                if status.state != "ready":
                    raise RuntimeError(f"rollout {status.state}: {status.error}")
                admin.rollout_swap()
                swapped = time.perf_counter()
                wait_until(
                    lambda: (
                        (
                            len(load.queries) >= args.after
                            and load.queries[-args.after][0] >= swapped
                            and time.perf_counter() - swapped >= args.phase_s
                        )
                        or not threads[0].is_alive()
                    ),
                    deadline,
                    "the queries after the swap",
                )
            finally:
                load.stop.set()
                for thread in threads:
                    thread.join(timeout=60)
            missing = [i for i in load.acknowledged if not found(admin, i)]
            model, count = admin.model()["name"], admin.ready()["items"]
    bounds = {"before": (0, started), "during": (started, swapped), "after": (swapped, float("inf"))}
    rows = []
    for path, times, what in (
        ("/similar", load.queries, "by id, k=10"),
        ("/index", load.writes, f"{args.write_batch} items"),
    ):
        for name, label in PHASES.items():
            lo, hi = bounds[name]
            ms = [m for t, m in times if lo <= t < hi]
            failed = sum(1 for p, t, _ in load.failed if p == path and lo <= t < hi)
            rows.append([f"`{path}` {what}, {label}", f"{len(ms):,}", f"{percentile(ms, 50):.2f}"])
            rows[-1] += [f"{percentile(ms, 99):.2f}", failed]
    return {
        "rows": rows,
        "failures": [f"{p}: {why}" for p, _, why in load.failed],
        "missing": missing,
        "acknowledged": len(load.acknowledged),
        "copy_s": ready - started,
        "swap_ms": (swapped - ready) * 1000,
        "model": model,
        "count": count,
        "expected_count": len(ids) + len(load.acknowledged),
    }


def found(admin: Client, item_id: str) -> bool:
    try:
        admin.get_item(item_id)
    except ServiceError as e:
        if e.status == 404:
            return False
        raise
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles/all-minilm-l6-v2")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--store-dir", type=Path, default=None, help="default: var/bench-<items>")
    parser.add_argument("--before", type=int, default=1000, help="queries timed before the rollout starts")
    parser.add_argument("--after", type=int, default=1000, help="queries timed after the swap")
    parser.add_argument("--phase-s", type=float, default=10, help="before and after last at least this long")
    parser.add_argument("--write-batch", type=int, default=4, help="new items /index-ed each second")
    parser.add_argument("--deadline-s", type=float, default=7200, help="give up (and abort) after this long")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    store_dir = args.store_dir or ROOT / f"var/bench-{args.items}"
    ids = reused_store(args.bundle, args.items, store_dir)
    with tempfile.TemporaryDirectory(prefix="ms-rollout-") as tmp:
        data_dir = Path(tmp) / "data"
        shutil.copytree(store_dir, data_dir)  # the rollout moves the store: a run works on a copy
        target = bundle_b(args.bundle, Path(tmp) / "bundle-b")
        r = run(args, ids, data_dir, target)
    facts = [
        ["items re-encoded", f"{args.items:,}"],
        ["copy: start to `ready`", f"{r['copy_s']:.1f} s ({args.items / r['copy_s']:.1f} items/s)"],
        ["`POST /admin/rollout/swap`", f"{r['swap_ms']:.0f} ms"],
        ["`GET /model` after the swap", f"`{r['model']}`"],
        [f"items after the swap (expected {r['expected_count']:,})", f"{r['count']:,}"],
        ["acknowledged writes found after the swap", f"{r['acknowledged'] - len(r['missing'])} of {r['acknowledged']}"],
    ]
    body = f"""Command: {command("bench.rollout", argv)}. `{args.bundle.name}` rolled out to a copy of it under
another name; one keep-alive client sends `/similar` by id without pause, another `/index`es {args.write_batch} new
items a second; answer cache off.

{table(["rollout", "value"], facts)}

{table(["requests", "answered", "p50 ms", "p99 ms", "failed"], r["rows"])}
"""
    print(body, *r["failures"][:20], sep="\n")
    if r["failures"] or r["missing"] or r["count"] != r["expected_count"]:
        raise SystemExit("the rollout lost requests or writes: see above (BENCHMARKS.md left as it is)")
    if r["model"] != f"{load_bundle(args.bundle).manifest.name}-b":
        raise SystemExit(f"GET /model says {r['model']} after the swap, not the rolled-out bundle")
    write_section(BENCHMARKS, "Model rollout", body)
    during = r["rows"][1]
    write_summary(
        BENCHMARKS,
        "Model rollout",
        [
            (
                "`/similar` during a model rollout: p50 / p99 ms, failed",
                f"{during[2]} / {during[3]}, {during[4]} failed",
                f"before it: {r['rows'][0][2]} / {r['rows'][0][3]}",
            )
        ],
    )


if __name__ == "__main__":
    main()
