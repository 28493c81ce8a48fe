"""Memory: the service's resident memory per stored item, for each bundle kind and catalog size, with the embedded
store. Writes BENCHMARKS.md's "Memory" section and its summary row.

    .venv/bin/python -m bench.memory [--bundles DIR ...] [--sizes 10000 100000] [--requests 1000]

Per bundle and size: the service's RSS on an empty store; a writer process storing bench/catalog.py's synthetic
catalog (its growth a stored item, and the peak RSS of the HNSW build's child process); the service's RSS once
restarted on that store, and after --requests distinct `/similar` by id (caches at their default caps). A
second-order bundle is exported first, e.g. `metricsearch export --bundle /tmp/minilm-svd5 --pooling svd --rank-k 5`.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from bench.catalog import build_store
from bench.load import serving
from bench.report import BENCHMARKS, ROOT, command, table, write_section, write_summary
from metricsearch.client import Client
from metricsearch.core.bundle import load_bundle

MB = 1 << 20


def rss(pid: int | str = "self", field: str = "VmRSS") -> int:
    """Resident bytes of a process (Linux /proc); RssAnon: those no file backs, which the OS cannot evict."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for process {pid}")


def children_rss(pid: int) -> int:
    total = 0
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in children.read_text().split():
            with contextlib.suppress(FileNotFoundError, RuntimeError):
                total += rss(child)
    return total


def write_store(bundle: Path, n: int, data_dir: Path) -> dict:
    """Run in a fresh process: the catalog stored and HNSW built, this process and its children sampled every 0.2 s."""
    before, peaks, done = rss(), {"self": 0, "children": 0}, threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            peaks["self"] = max(peaks["self"], rss())
            peaks["children"] = max(peaks["children"], children_rss(os.getpid()))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        build_store(bundle, n, data_dir)
    finally:
        done.set()
        sampler.join()
    return {"writer_growth": peaks["self"] - before, "hnsw_child": peaks["children"]}


def served(bundle: Path, data_dir: Path, n: int, requests: int) -> dict:
    """The service on data_dir: RSS (and anonymous RSS) once ready, and after `requests` distinct by-id requests."""
    started = time.perf_counter()
    with serving(bundle, data_dir, timeout_s=600) as service:
        pid = service.process.pid
        result = {"ready": rss(pid), "anon": rss(pid, "RssAnon"), "open_s": time.perf_counter() - started}
        with Client(service.url) as client:
            for i in np.random.default_rng(1).choice(n, min(requests, n), replace=False) if n else []:
                client.similar(id=f"s{i}", k=10)
        result["served"] = rss(pid)
    return result


def measure(bundle: Path, sizes: list[int], requests: int, workdir: Path) -> list[list]:
    loaded = load_bundle(bundle)
    manifest = loaded.manifest
    rank = f", rank {manifest.rank_k}" if manifest.rank_k else ""
    kind = f"`{bundle.name}` ({manifest.pooling}{rank}, d {manifest.encoder.dim}, {manifest.metric})"
    empty = served(bundle, workdir / f"{bundle.name}-empty", 0, 0)
    rows = []
    for n in sizes:
        data_dir = workdir / f"{bundle.name}-{n}"
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            written = pool.submit(write_store, bundle, n, data_dir).result()
        s = served(bundle, data_dir, n, requests)
        rows.append(
            [
                kind,
                n,
                f"{empty['ready'] / MB:.0f}",
                f"{written['writer_growth'] / n / 1024:.1f}",
                f"{written['hnsw_child'] / MB:.0f}",
                f"{s['ready'] / MB:.0f} ({s['anon'] / MB:.0f})",
                f"{(s['ready'] - empty['ready']) / n / 1024:.1f} ({(s['anon'] - empty['anon']) / n / 1024:.1f})",
                f"{s['open_s']:.1f}",
                f"{s['served'] / MB:.0f}",
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundles", type=Path, nargs="+", default=[ROOT / "bundles/all-minilm-l6-v2"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--requests", type=int, default=1000, help="distinct /similar by id after the restart")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ms-memory-") as tmp:
        rows = [row for bundle in args.bundles for row in measure(bundle, args.sizes, args.requests, Path(tmp))]
    header = ["bundle", "items", "service, empty store MB", "writer: growth a stored item KB"]
    header += ["HNSW build child peak MB", "service after restart MB (anonymous)", "a stored item KB (anonymous)"]
    header += ["open s", f"after {args.requests:,} by-id requests MB"]
    body = f"""Command: {command("bench.memory", argv)}. Items: bench/catalog.py's synthetic catalog (titles of ~7
words, descriptions of ~20, one metadata key) written into the embedded store as /index writes them, HNSW built. RSS
is VmRSS, in brackets RssAnon (memory no file backs; the rest is the engine's memory-mapped files, which the OS may
evict); a stored item's KB is (after restart - empty store) / items.

{table(header, rows)}
"""
    print(body)
    write_section(BENCHMARKS, "Memory", body)
    largest = rows[len(args.sizes) - 1]
    write_summary(
        BENCHMARKS, "Memory", [(f"service RSS at {largest[1]:,} items, MB", largest[5], f"empty store: {largest[2]}")]
    )


if __name__ == "__main__":
    main()
