"""Model rollout benchmark: a live rollout of a catalog of wine reviews to another bundle while one client queries
without pause and another writes every second; the copy's duration and items/s, /similar latency before, during
and after, every failed request, and the acknowledged writes found after the swap. Prints a table and writes the
"Model rollout" section of BENCHMARKS.md.

    .venv/bin/python -m bench.rollout_bench [--items 100000] [--store-dir DIR] [--before 1000] [--after 1000]
        [--phase-s 10] [--write-batch 4] [--deadline-s 7200] [--print-only]

The live store holds real texts (wine review titles and descriptions, cycled with a lot number past the ~5.8k
reviews in ../shared/data, so every text is distinct and the copy re-encodes each) with synthetic vectors written
straight into it, HNSW built: encoding them first would cost as long as the rollout itself. The rollout then
re-encodes every item with the real model. Bundle B is a copy of bundle A under another name, so `GET /model`
tells which one serves. Answer cache off: every query is a search.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench.report import machine, write_section
from bench.service_bench import Client, percentile, synthetic_batches, wine_items
from metricsearch.client import Client as AdminClient
from metricsearch.client import ServiceError
from metricsearch.core.bundle import MANIFEST_FILE, load_bundle
from metricsearch.core.lexical import lexical_fields
from metricsearch.service import (
    ANN_VECTOR,
    ServiceProcess,
    Settings,
    StoredItem,
    content_hash,
    open_store,
    vector_schema,
)

ROOT = Path(__file__).resolve().parents[1]
POLL_S = 0.5


def catalog_texts(n: int, offset: int = 0) -> list[tuple[str, str]]:
    """n distinct (title, description) pairs from the wine reviews, from position `offset` of an endless cycle: the
    r-th pass over the reviews adds "lot r" to both texts (same length and vocabulary, no text repeated)."""
    reviews = wine_items(200_000)
    texts = []
    for i in range(offset, offset + n):
        lot, review = divmod(i, len(reviews))
        title, description = reviews[review]["title"], reviews[review]["description"]
        texts.append((title, description) if lot == 0 else (f"{title} (lot {lot})", f"{description} Lot {lot}."))
    return texts


def build_store(bundle: Path, n: int, data_dir: Path) -> None:
    """n wine items with synthetic vectors, their real lexical vectors and content hashes, HNSW built."""
    loaded = load_bundle(bundle)
    lexical = lexical_fields(loaded.manifest)
    store = open_store(Settings(data_dir=data_dir, optimize_after_writes=0), vector_schema(loaded))
    texts = catalog_texts(n)
    for start, packed in tqdm(synthetic_batches(bundle, n), total=-(-n // 2000), desc=f"store of {n}"):
        items = []
        for j in range(len(packed)):
            title, description = texts[start + j]
            items.append(
                StoredItem(
                    id=f"w{start + j}",
                    title=title,
                    description=description,
                    metadata={"bucket": (start + j) % 10},
                    content_hash=content_hash(title, description),
                    vectors={ANN_VECTOR: packed[j]},
                    sparse=lexical.documents(title, description) if lexical else {},
                )
            )
        store.upsert(items)
    store.optimize_now()
    store.wait_for_maintenance()
    if not store.has_hnsw:
        raise RuntimeError(f"no HNSW index was built for {n} items")
    store.close()


def prepare_store(bundle: Path, n: int, store_dir: Path) -> None:
    """The store at store_dir, built once and reused while it holds n items (a run rolls out a copy of it)."""
    if store_dir.exists():
        store = open_store(Settings(data_dir=store_dir, optimize_after_writes=0), vector_schema(load_bundle(bundle)))
        count = store.count()
        store.close()
        if count == n:
            return
        shutil.rmtree(store_dir)
    build_store(bundle, n, store_dir)


def bundle_b(bundle: Path, folder: Path) -> Path:
    """A copy of `bundle` named `<name>-b`: the same model, told apart by `GET /model`."""
    shutil.copytree(bundle, folder)
    manifest = load_bundle(folder).manifest
    renamed = manifest.model_copy(update={"name": f"{manifest.name}-b"})
    (folder / MANIFEST_FILE).write_text(renamed.model_dump_json(indent=2) + "\n")
    return folder


@dataclass
class Load:
    """The query and write loops' record: (start time, ms) per answered request, and every failure (what, and its
    path and start time)."""

    queries: list[tuple[float, float]] = field(default_factory=list)
    writes: list[tuple[float, float]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    failed: list[tuple[str, float]] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


def _timed(client: Client, path: str, body: dict, times: list[tuple[float, float]], load: Load) -> Client | None:
    """One request; a failure is recorded, and answered with a fresh connection (None: keep this one)."""
    started = time.perf_counter()
    try:
        client.post(path, body)
    except Exception as e:  # every failure counts, whatever it is
        load.failed.append((path, started))
        load.failures.append(f"{path}: {type(e).__name__}: {e}"[:300])
        client.close()
        return Client(client.port)
    times.append((started, (time.perf_counter() - started) * 1000))
    return None


def query_loop(port: int, bodies: list[dict], load: Load, limit: int) -> None:
    client = Client(port)
    for n in range(limit):
        if load.stop.is_set():
            break
        client = _timed(client, "/similar", bodies[n % len(bodies)], load.queries, load) or client
    client.close()


def write_loop(port: int, texts: list[tuple[str, str]], batch: int, load: Load) -> None:
    """A batch of `batch` new items a second, until stopped or out of texts."""
    client = Client(port)
    for start in range(0, len(texts) - batch + 1, batch):
        if load.stop.wait(1.0):
            break
        ids = [f"new{start + j}" for j in range(batch)]
        items = [
            {"id": i, "title": t, "description": d} for i, (t, d) in zip(ids, texts[start : start + batch], strict=True)
        ]
        before = len(load.writes)
        client = _timed(client, "/index", {"items": items}, load.writes, load) or client
        if len(load.writes) > before:
            load.acknowledged.extend(ids)
    client.close()


def wait_until(predicate, deadline: float, what: str) -> None:
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(POLL_S)


def run(args: argparse.Namespace, data_dir: Path, workdir: Path) -> dict:
    """The service on a copy of the store: `before` queries, the rollout (start, poll, swap), `after` queries; before
    and after last `phase_s` at least, so that they see some writes too."""
    target = bundle_b(args.bundle, workdir / "bundle-b")
    service = ServiceProcess(args.bundle, data_dir, {"MS_ANSWER_CACHE_SIZE": "0", "MS_LOG_LEVEL": "WARNING"})
    service.start(timeout_s=300)
    picks = np.random.default_rng(1).integers(0, args.items, 5000)
    bodies = [{"id": f"w{i}", "k": 10} for i in picks]
    deadline = time.monotonic() + args.deadline_s
    load = Load()
    # bounded in count: the before queries, a rollout at the slowest rate we accept (50 items/s) at ~1000 req/s, after
    limit = args.before + args.after + args.items * 20
    writes = catalog_texts(int(args.deadline_s) * args.write_batch, offset=args.items)
    threads = [
        threading.Thread(target=query_loop, args=(service.port, bodies, load, limit), daemon=True),
        threading.Thread(target=write_loop, args=(service.port, writes, args.write_batch, load), daemon=True),
    ]
    admin = AdminClient(service.url, retries=0)
    polls = []
    try:
        for thread in threads:
            thread.start()
        began = time.perf_counter()

        def before_done() -> bool:
            answered = len(load.queries) >= args.before and time.perf_counter() - began >= args.phase_s
            return answered or not threads[0].is_alive()

        wait_until(before_done, deadline, "before queries")
        started = time.perf_counter()
        admin.rollout_start(str(target))
        while (status := admin.rollout_status()).state == "copying":
            polls.append(status)
            if time.monotonic() > deadline:
                admin.rollout_abort()
                raise TimeoutError(f"rollout not done after {args.deadline_s} s: {status}")
            time.sleep(POLL_S)
        ready = time.perf_counter()
        if status.state != "ready":
            raise RuntimeError(f"rollout {status.state}: {status.error}")
        admin.rollout_swap()
        swapped = time.perf_counter()

        def after_done() -> bool:
            answered = len(load.queries) >= args.after and load.queries[-args.after][0] >= swapped
            return (answered and time.perf_counter() - swapped >= args.phase_s) or not threads[0].is_alive()

        wait_until(after_done, deadline, "after queries")
    finally:
        load.stop.set()
        for thread in threads:
            thread.join(timeout=60)
    try:
        model = admin.model()["name"]
        count = admin.ready()["items"]
        missing = [i for i in load.acknowledged if not _found(admin, i)]
    finally:
        admin.close()
        service.stop()

    phases = {"before": (0, started), "during": (started, swapped), "after": (swapped, float("inf"))}

    def phase(times: list[tuple[float, float]], name: str) -> list[float]:
        lo, hi = phases[name]
        return [ms for t, ms in times if lo <= t < hi]

    return {
        "queries": {name: phase(load.queries, name) for name in phases},
        "writes": {name: phase(load.writes, name) for name in phases},
        "failed": {
            (path, name): sum(1 for p, t in load.failed if p == path and phases[name][0] <= t < phases[name][1])
            for path in ("/similar", "/index")
            for name in phases
        },
        "failures": load.failures,
        "acknowledged": len(load.acknowledged),
        "missing": missing,
        "copy_s": ready - started,
        "swap_ms": (swapped - ready) * 1000,
        "items_per_s": args.items / (ready - started),
        "status_rate": polls[-1].items_per_s if polls else None,
        "model": model,
        "expected_model": load_bundle(target).manifest.name,
        "count": count,
        "expected_count": args.items + len(load.acknowledged),
    }


def _found(admin: AdminClient, item_id: str) -> bool:
    try:
        admin.get_item(item_id)
    except ServiceError as e:
        if e.status == 404:
            return False
        raise
    return True


def table(args: argparse.Namespace, r: dict, load_start: tuple, load_end: tuple) -> str:
    def row(name: str, values: list[float], failed: int) -> str:
        if not values:
            return f"| {name} | 0 | | | {failed} |"
        return f"| {name} | {len(values):,} | {percentile(values, 50):.2f} | {percentile(values, 99):.2f} | {failed} |"

    failed = r["failed"]
    fmt = ", ".join
    lines = [
        f"Machine: {machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}; bundle `{args.bundle.name}` rolled out to a copy of it named "
        f"`{r['expected_model']}`; embedded store (qdrant-edge, HNSW built); load average (1, 5, 15 min) "
        f"{fmt(f'{x:.2f}' for x in load_start)} at the start, {fmt(f'{x:.2f}' for x in load_end)} at the end.",
        f"Command: `.venv/bin/python -m bench.rollout_bench --items {args.items} --before {args.before} "
        f"--after {args.after} --phase-s {args.phase_s:g} --write-batch {args.write_batch}` (one run; the service, "
        "its copy thread and both clients share the cores; one keep-alive client sends by-id `/similar` k=10 "
        f"without pause, another `/index`es {args.write_batch} new wine items a second; answer cache off).",
        "",
        "| rollout | value |",
        "|---|---|",
        f"| items re-encoded (wine titles + descriptions) | {args.items:,} |",
        f"| copy: start to `ready` | {r['copy_s']:.1f} s |",
        f"| copy rate | {r['items_per_s']:.1f} items/s (`GET /admin/rollout` said {r['status_rate']} at its last "
        "poll) |",
        f"| `POST /admin/rollout/swap` | {r['swap_ms']:.0f} ms |",
        f"| `GET /model` after the swap | `{r['model']}` |",
        f"| items after the swap (expected {r['expected_count']:,}) | {r['count']:,} |",
        f"| acknowledged writes found after the swap | {r['acknowledged'] - len(r['missing'])} of "
        f"{r['acknowledged']} |",
        "",
        "| requests | answered | p50 ms | p99 ms | failed |",
        "|---|---|---|---|---|",
    ]
    labels = {"before": "before the rollout", "during": "during it (start to swap)", "after": "after the swap"}
    for path, kind, what in (("/similar", "queries", "by id, k=10"), ("/index", "writes", f"{args.write_batch} items")):
        for name, label in labels.items():
            lines.append(row(f"`{path}` {what}, {label}", r[kind][name], failed[path, name]))
    lines.append("")
    if r["failures"]:
        lines += ["Failures:", *(f"- {f}" for f in r["failures"][:20])]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles/all-minilm-l6-v2")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--store-dir", type=Path, help="keep the built store here and reuse it (default: rebuilt)")
    parser.add_argument("--before", type=int, default=1000, help="queries timed before the rollout starts")
    parser.add_argument("--after", type=int, default=1000, help="queries timed after the swap")
    parser.add_argument("--phase-s", type=float, default=10, help="before and after last at least this long")
    parser.add_argument("--write-batch", type=int, default=4, help="new items /index-ed each second")
    parser.add_argument("--deadline-s", type=float, default=7200, help="give up (and abort) after this long")
    parser.add_argument("--print-only", action="store_true", help="print the table; BENCHMARKS.md is left as it is")
    args = parser.parse_args()

    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ms-rollout-") as tmp:
        workdir = Path(tmp)
        store_dir = args.store_dir or workdir / "store"
        prepare_store(args.bundle, args.items, store_dir)
        data_dir = workdir / "data"
        shutil.copytree(store_dir, data_dir)  # the rollout moves the store: a run works on a copy
        result = run(args, data_dir, workdir)
    text = table(args, result, load_start, os.getloadavg())
    print(text)
    if result["failures"] or result["missing"] or result["count"] != result["expected_count"]:
        raise SystemExit("the rollout lost requests or writes: see above (BENCHMARKS.md left as it is)")
    if result["model"] != result["expected_model"]:
        raise SystemExit(f"GET /model says {result['model']} after the swap, not {result['expected_model']}")
    if not args.print_only:
        write_section(ROOT / "BENCHMARKS.md", "Model rollout", text)


if __name__ == "__main__":
    main()
