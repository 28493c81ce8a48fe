"""What one payload index (MS_INDEXED_FIELDS) costs on the embedded store, and what it buys: for each index type, the
build time at start-up, the disk it adds and the process memory it adds, then store-level filtered search latency
with and without it (exact search over a plain segment, the worst case a filter meets). Then what an automatic index
(MS_AUTO_INDEX) gives: the time from the first search filtering on an unindexed key until its index is live, filtered
p50 before and after, and the longest a search stalled meanwhile (the build holds the lock every search takes).

    .venv/bin/python -m bench.payload_index_cost [--items 100000]

Items carry brand (200 values, keyword), price (float), in_stock (bool) and bucket (0-9, stored half as int and
half as float); vectors are 8-d (an index's cost does not depend on them)."""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from metricsearch.service import AnyOf, EdgeStore, Equals, Range, StoredItem, VectorSchema

SCHEMA = VectorSchema(sizes={"v": 8}, ann="v", identity="index-cost@1")
INDEXES = {"brand": "keyword", "price": "float", "in_stock": "bool", "bucket": "float"}
FILTERS = {
    "brand": [AnyOf("brand", tuple(f"b{i}" for i in range(20)))],
    "price": [Range("price", gte=100.0, lte=200.0)],
    "in_stock": [Equals("in_stock", False)],
    "bucket": [AnyOf("bucket", (3,))],
}
"""Each keeps about 10% of the items."""


def build(path: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    store = EdgeStore(path, SCHEMA, optimize_after_writes=0)
    for start in range(0, n, 5000):
        store.upsert(
            [
                StoredItem(
                    id=f"i{i}",
                    title="t",
                    description="d",
                    metadata={
                        "brand": f"b{i % 200}",
                        "price": round(float(rng.uniform(0, 1000)), 2),
                        "in_stock": i % 10 != 0,
                        "bucket": i % 10 if i % 2 else float(i % 10),
                    },
                    content_hash=str(i),
                    vectors={"v": rng.standard_normal(8).astype(np.float32)},
                )
                for i in range(start, min(start + 5000, n))
            ]
        )
    store.close()


def open_rss_mb(path: Path, fields: dict[str, str]) -> float:
    """Resident memory of a fresh process that opened the store with `fields` indexed (created before)."""
    code = (
        "import json, re, sys; from pathlib import Path; from bench.payload_index_cost import SCHEMA; "
        "from metricsearch.service.store import EdgeStore; "
        "s = EdgeStore(Path(sys.argv[1]), SCHEMA, optimize_after_writes=0, indexed_fields=json.loads(sys.argv[2])); "
        "print(int(re.search(r'VmRSS:\\s+(\\d+)', Path('/proc/self/status').read_text())[1]) / 1024); s.close()"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path), json.dumps(fields)], capture_output=True, text=True)
    return float(out.stdout.split()[-1])


def disk_mb(path: Path) -> float:
    """Allocated blocks (the engine preallocates sparse files)."""
    return int(subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True).stdout.split()[0]) / 1024


def search_ms(store: EdgeStore, conditions: list, repeats: int = 30) -> float:
    rng = np.random.default_rng(1)
    times = []
    for _ in range(repeats):
        vector = rng.standard_normal(8).astype(np.float32)
        started = time.perf_counter()
        store.search(vector, 100, conditions)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def auto_index_row(path: Path, key: str, plain_ms: float) -> str:
    """One key learned from its first filter while a thread searches without a filter non-stop: the longest of those
    searches between the first filtered search and the index going live, against their p50 before it."""
    store = EdgeStore(path, SCHEMA, optimize_after_writes=0, indexed_fields={}, auto_index_max=16)
    probes: list[tuple[float, float]] = []  # (start, ms)
    stop = threading.Event()

    def probe() -> None:
        vector = np.ones(8, np.float32)
        while not stop.is_set():
            started = time.perf_counter()
            store.search(vector, 10)
            probes.append((started, (time.perf_counter() - started) * 1000))

    prober = threading.Thread(target=probe)
    prober.start()
    time.sleep(2)
    first = time.perf_counter()
    store.search(np.ones(8, np.float32), 100, FILTERS[key])
    assert store.auto_index.wait(120) and key in store.auto_index.indexed
    live = time.perf_counter()
    time.sleep(0.5)
    stop.set()
    prober.join()
    indexed_ms = search_ms(store, FILTERS[key])
    store.close()
    quiet = statistics.median(ms for started, ms in probes if started < first)
    stall = max(ms for started, ms in probes if first <= started + ms / 1000 and started <= live)
    return f"| `{key}` | {(live - first) * 1000:.0f} | {plain_ms:.2f} | {indexed_ms:.2f} | {stall:.0f} | {quiet:.1f} |"


class _Builds(logging.Handler):
    """The build times payload.sync_indexes logs (ms), the engine's own call alone."""

    def __init__(self) -> None:
        super().__init__()
        self.ms: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().count("built a"):
            self.ms.append(record.args[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=100_000)
    args = parser.parse_args()
    builds = _Builds()
    logging.getLogger("metricsearch.service.store.payload").addHandler(builds)
    logging.getLogger("metricsearch.service.store.payload").setLevel(logging.INFO)
    rows = [
        "| index | build at start-up ms | disk MB | memory MB | filter p50 ms, no index | with it |",
        "|---|---|---|---|---|---|",
    ]
    auto = [
        "| key | first filtered search to index live ms | filter p50 ms before | after | longest search during it ms "
        "| unfiltered search p50 ms |",
        "|---|---|---|---|---|---|",
    ]
    plain = {}
    with tempfile.TemporaryDirectory(prefix="ms-index-cost-") as tmp:
        path = Path(tmp) / "store"
        build(path, args.items)
        for key, kind in INDEXES.items():
            store = EdgeStore(path, SCHEMA, optimize_after_writes=0, indexed_fields={})  # drops the previous index
            plain_ms = plain[key] = search_ms(store, FILTERS[key])
            kept = len(store.search(np.ones(8, np.float32), args.items, FILTERS[key]).ids) / args.items
            store.close()
            disk0, rss0 = disk_mb(path), open_rss_mb(path, {})
            store = EdgeStore(path, SCHEMA, optimize_after_writes=0, indexed_fields={key: kind})
            indexed_ms = search_ms(store, FILTERS[key])
            store.close()
            disk1, rss1 = disk_mb(path), open_rss_mb(path, {key: kind})
            rows.append(
                f"| `{key}:{kind}` ({kept:.0%} kept) | {builds.ms[-1]:.0f} | {disk1 - disk0:+.1f} | "
                f"{rss1 - rss0:+.1f} | {plain_ms:.2f} | {indexed_ms:.2f} |"
            )
        many = [AnyOf("bucket", tuple(range(1, 2000, 2)))]  # 1,000 numbers, half the items kept
        for fields in ({}, {"bucket": "float"}):
            store = EdgeStore(path, SCHEMA, optimize_after_writes=0, indexed_fields=fields)
            label = ", ".join(f"{k}:{v}" for k, v in fields.items()) or "no index"
            rows.append(f"| `in` with 1,000 numbers on bucket ({label}) | | | | {search_ms(store, many, 5):.2f} | |")
            store.close()
        for key in INDEXES:
            EdgeStore(path, SCHEMA, optimize_after_writes=0, indexed_fields={}).close()  # drops every index
            auto.append(auto_index_row(path, key, plain[key]))
    print(f"{args.items:,} items; store-level search, k=100, plain segment\n")
    print("\n".join(rows))
    print("\nAutomatic indexes (MS_AUTO_INDEX), from the first filter on each key\n")
    print("\n".join(auto))


if __name__ == "__main__":
    main()
