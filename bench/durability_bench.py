"""Durability benchmark: what `MS_SYNC_WRITES` (an fsync per acknowledged write, shared by concurrent writers)
costs the embedded store, next to the default (writes acknowledged once in the WAL, which survives `kill -9` of
the service but not a power loss). Prints a table and writes the "Durability" section of BENCHMARKS.md.

    .venv/bin/python -m bench.durability_bench [--seconds 4] [--preload 10000]

It times `EdgeStore.upsert` alone, with synthetic 768-float vectors (the default bundle's packed title and
description): the store's share of an /index request, without the encoder, which costs far more per item
(~8 ms an item for the default bundle on this machine, BENCHMARKS.md "Service").
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench.report import machine, write_section
from metricsearch.service import EdgeStore, StoredItem, VectorSchema

ROOT = Path(__file__).resolve().parents[1]
DIM = 768
ENCODE_ITEMS_S = 90
"""/index items/s of the default bundle through HTTP (BENCHMARKS.md "Service", 2026-11-27: 92.5), for scale."""
SCHEMA = VectorSchema(sizes={"ann": DIM}, ann="ann", identity="durability-bench")


def items(rng: np.random.Generator, prefix: str, n: int) -> list[StoredItem]:
    vectors = rng.standard_normal((n, DIM), dtype=np.float32)
    return [
        StoredItem(
            id=f"{prefix}-{i}",
            title=f"item {prefix}-{i}",
            description="a description of about the usual length for a catalog item " * 4,
            metadata={"brand": "acme", "price": float(i)},
            content_hash=f"{i:032x}",
            vectors={"ann": vectors[i]},
        )
        for i in range(n)
    ]


def run(store: EdgeStore, batch: int, writers: int, seconds: float, bar: tqdm) -> dict[str, float]:
    """`writers` threads upsert batches of `batch` new items for `seconds`; per-write latencies and items/s."""
    latencies: list[list[float]] = [[] for _ in range(writers)]
    deadline = time.perf_counter() + seconds

    def write(w: int) -> None:
        rng = np.random.default_rng(w)
        for n in range(100_000):  # bounded; the deadline ends it
            if time.perf_counter() >= deadline:
                return
            chunk = items(rng, f"b{batch}-w{writers}-{w}-{n}", batch)
            started = time.perf_counter()
            store.upsert(chunk)
            latencies[w].append(time.perf_counter() - started)
            bar.update(batch)

    started = time.perf_counter()
    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    flat = np.asarray([x for lat in latencies for x in lat]) * 1000
    return {
        "items_s": len(flat) * batch / elapsed,
        "p50_ms": float(np.percentile(flat, 50)),
        "p99_ms": float(np.percentile(flat, 99)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per configuration")
    parser.add_argument("--preload", type=int, default=10_000, help="items stored before timing")
    parser.add_argument("--no-write", action="store_true", help="print only, leave BENCHMARKS.md alone")
    args = parser.parse_args()

    configs = [(batch, writers) for batch in (1, 10, 100) for writers in (1, 4)]
    rows = []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp, tqdm(desc="upserts", unit="item") as bar:
        for sync in (False, True):
            store = EdgeStore(Path(tmp) / f"sync-{sync}", SCHEMA, optimize_after_writes=0, sync_writes=sync)
            try:
                rng = np.random.default_rng(0)
                for start in range(0, args.preload, 1000):
                    store.upsert(items(rng, f"pre{start}", min(1000, args.preload - start)))
                store.flush()
                for batch, writers in configs:
                    rows.append((sync, batch, writers, run(store, batch, writers, args.seconds, bar)))
            finally:
                store.close()
    by_config = {(b, w): r for s, b, w, r in rows if not s}
    fsync_ms = next(r for s, b, w, r in rows if s and (b, w) == (1, 1))["p50_ms"] - by_config[(1, 1)]["p50_ms"]
    table = [
        "| batch | writers | WAL only: items/s | p50 / p99 ms | + fsync (MS_SYNC_WRITES): items/s | p50 / p99 ms "
        "| fsync throughput ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for sync, batch, writers, r in rows:
        if not sync:
            continue
        base = by_config[(batch, writers)]
        table.append(
            f"| {batch} | {writers} | {base['items_s']:.0f} | {base['p50_ms']:.2f} / {base['p99_ms']:.2f} "
            f"| {r['items_s']:.0f} | {r['p50_ms']:.2f} / {r['p99_ms']:.2f} | {r['items_s'] / base['items_s']:.2f} |"
        )
    body = "\n".join(
        [
            f"Command: `.venv/bin/python -m bench.durability_bench --seconds {args.seconds:g} --preload {args.preload}`"
            f" on {machine()} shared with other work (1-min load average "
            f"{load:.1f} at the start), {platform.python_version()}. `EdgeStore.upsert` of new items (768 floats, "
            f"a short payload) into a store preloaded with {args.preload} items, {args.seconds:g} s per row; "
            "`writers` threads upsert at once.",
            "",
            *table,
            "",
            "What an acknowledgement means: without `MS_SYNC_WRITES` an acknowledged write is in the WAL, which "
            "survived `kill -9` at random moments in tests/service/test_reliability.py (and QDRANT_EDGE.md); only "
            "`flush()` fsyncs, so a power loss can drop writes acknowledged since the last flush. With it, each "
            "write returns after an fsync that concurrent writers share (group commit). For scale, the default "
            f'bundle encodes about {ENCODE_ITEMS_S} items/s through /index (BENCHMARKS.md "Service"): one fsync '
            f"({fsync_ms:.2g} ms here, the p50 difference of one-item writes) adds "
            f"{fsync_ms * ENCODE_ITEMS_S / 10:.2g}% to the encoding time of a one-item /index and "
            f"{fsync_ms * ENCODE_ITEMS_S / 1000:.2g}% to a 100-item one. What an fsync costs is the disk's: "
            "measure the one under the data folder before turning it on.",
        ]
    )
    print(body)
    if not args.no_write:
        write_section(ROOT / "BENCHMARKS.md", "Durability", body)


if __name__ == "__main__":
    main()
