"""Memory benchmark: the service's RSS per stored item for each bundle kind, at 10k and 100k items, with the
embedded store. Prints a table and writes the "Memory" section of BENCHMARKS.md.

    .venv/bin/python -m bench.memory_bench [--bundles B ...] [--sizes 10000 100000] [--requests 1000]

Per bundle and size:
- the service's RSS on an empty store (before indexing);
- a writer process's RSS before and after storing the items through the service's own write path
  (`Catalog.index` into the embedded store, lexical vectors and all), then the peak RSS of the HNSW build's child
  process. Items are bench.hybrid_scale's synthetic catalog (texts and per-field vectors); the encoder's output is
  that catalog's vectors (and random factors for a second-order bundle) instead of a model's, since encoding 100k
  items takes ~20 min on 2 cores, and what a stored item costs does not depend on its vectors' values;
- the service's RSS after a restart on that store (the vector and term mirrors rebuilt at open), and after
  --requests distinct /similar by id (answer cache on, at its default caps: the cache fills, the index pages in),
  with the bytes the answer cache estimates it holds for those answers (its own accounting, metricsearch/
  service/cache.py).

A second-order bundle is exported first, e.g. `metricsearch export --bundle /tmp/minilm-svd5 --pooling svd
--rank-k 5` (the packaged all-MiniLM-L6-v2, ~30 s).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import platform
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench.data import ROOT
from bench.hybrid_scale import synthetic_catalog
from bench.report import machine, write_section
from bench.service_bench import Client
from metricsearch.core.bundle import Manifest, load_bundle
from metricsearch.core.lexical import lexical_fields
from metricsearch.core.records import Item, Match
from metricsearch.core.second_order import serving_rank
from metricsearch.service import (
    ENTRY_OVERHEAD,
    Catalog,
    ServiceProcess,
    Settings,
    answer_bytes,
    open_store,
    vector_schema,
)

BATCH = 2000
MB = 1 << 20


def rss(pid: int | str = "self", field: str = "VmRSS") -> int:
    """Resident bytes of a process (Linux /proc); field RssAnon: those no file backs, which the OS cannot evict."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for process {pid}")


def children_rss(pid: int) -> int:
    """Resident bytes of a process's children (gone ones count 0)."""
    total = 0
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in children.read_text().split():
            with contextlib.suppress(FileNotFoundError, RuntimeError):
                total += rss(child)
    return total


class SyntheticEncoder:
    """Stands in for the ONNX encoder on the write path: hands back the vectors set in `pending`, in the order the
    catalog asks for texts (items x fields; Catalog.index encodes its chunks one after another, in order), plus random
    rank-k factors for a second-order bundle."""

    bulk_workers = 1

    def __init__(self, manifest: Manifest) -> None:
        self.dim = manifest.encoder.dim
        self.rank = serving_rank(manifest.pooling, manifest.rank_k) if manifest.encoder.output_kind == "tokens" else 0
        self.pending = np.zeros((0, self.dim), dtype=np.float32)
        self._rng = np.random.default_rng(0)

    def encode_bulk(self, texts: list[str], batch_size: int) -> np.ndarray:
        if len(texts) > len(self.pending):
            raise RuntimeError(f"{len(texts)} texts to encode, {len(self.pending)} vectors pending")
        out = np.empty((len(texts), self.dim * (1 + self.rank)), dtype=np.float32)
        out[:, : self.dim], self.pending = self.pending[: len(texts)], self.pending[len(texts) :]
        out[:, self.dim :] = self._rng.standard_normal((len(texts), self.dim * self.rank), dtype=np.float32)
        return out


def write_store(bundle: Path, n: int, data_dir: Path) -> dict:
    """Run in a fresh process: store n synthetic items through Catalog.index, then build HNSW (optimize_now, in its
    child process, sampled every 0.2 s for its RSS)."""
    loaded = load_bundle(bundle)
    items, fields = synthetic_catalog(n, loaded.manifest.encoder.dim)
    encoder = SyntheticEncoder(loaded.manifest)
    store = open_store(Settings(data_dir=data_dir, optimize_after_writes=0), vector_schema(loaded))
    catalog = Catalog(loaded.manifest, encoder, store, candidates_min=100, candidates_factor=10)
    before = rss()
    started = time.perf_counter()
    for start in tqdm(range(0, n, BATCH), desc=f"write {bundle.name} {n}"):
        chunk = items[start : start + BATCH]
        encoder.pending = fields[start : start + len(chunk)].reshape(-1, encoder.dim)
        catalog.index([Item(**item, metadata={"bucket": (start + j) % 10}) for j, item in enumerate(chunk)])
        if len(encoder.pending):
            raise RuntimeError(f"{len(encoder.pending)} vectors left unused: the write path asked for fewer texts")
    written = rss()
    write_s = time.perf_counter() - started
    peak, done = 0, threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.2):
            peak = max(peak, children_rss(os.getpid()))

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.perf_counter()
    try:
        store.optimize_now()
        if not store.wait_for_maintenance(timeout=1200):
            raise RuntimeError(f"HNSW build of {n} items still running after 20 min")
    finally:
        done.set()
        sampler.join()
    if not store.has_hnsw:
        raise RuntimeError(f"no HNSW index was built for {n} items")
    store.close()
    return {
        "before": before,
        "written": written,
        "write_s": write_s,
        "hnsw_child": peak,
        "hnsw_s": time.perf_counter() - started,
    }


def served(bundle: Path, data_dir: Path, ids: list[str], requests: int) -> dict:
    """The service on data_dir: RSS once ready, then after `requests` distinct /similar by id (k 10)."""
    service = ServiceProcess(bundle, data_dir, {"MS_OPTIMIZE_AFTER_WRITES": "0"})
    started = time.perf_counter()
    service.start(timeout_s=600)
    assert service.process is not None
    pid = service.process.pid
    result = {"ready": rss(pid), "anon": rss(pid, "RssAnon"), "open_s": time.perf_counter() - started}
    client = Client(service.port)
    try:
        cached = 0
        for point in np.random.default_rng(1).choice(len(ids), min(requests, len(ids)), replace=False):
            answer = client.post("/similar", {"id": ids[point], "k": 10})
            matches = [Match(r["id"], r["score"], r["title"], r["metadata"], r["scores"]) for r in answer["results"]]
            cached += ENTRY_OVERHEAD + answer_bytes(matches)
        result |= {"served": rss(pid), "cache_estimate": cached}
    finally:
        client.close()
        service.stop()
    return result


def terms_per_item(manifest: Manifest, n: int = 1000) -> float:
    """Stored lexical terms an item of the synthetic catalog (the term mirror keeps 8 bytes each)."""
    lexical = lexical_fields(manifest)
    if lexical is None:
        return 0.0
    items, _ = synthetic_catalog(n, manifest.encoder.dim)
    counts = [sum(len(v.indices) for v in lexical.documents(i["title"], i["description"]).values()) for i in items]
    return float(np.mean(counts))


def bench_bundle(bundle: Path, sizes: list[int], requests: int, workdir: Path) -> list[dict]:
    loaded = load_bundle(bundle)
    mirror = 4 * sum(vector_schema(loaded).sizes.values())
    terms = 8 * terms_per_item(loaded.manifest)
    empty = served(bundle, workdir / f"{bundle.name}-empty", [], 0)
    rows = []
    for n in sizes:
        data_dir = workdir / f"{bundle.name}-{n}"
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            written = pool.submit(write_store, bundle, n, data_dir).result()
        service = served(bundle, data_dir, [f"s{i}" for i in range(n)], requests)
        rows.append(
            {
                "bundle": bundle,
                "n": n,
                "empty": empty["ready"],
                "empty_anon": empty["anon"],
                "mirror": mirror,
                "terms": terms,
                **written,
                **service,
            }
        )
    return rows


def kind(bundle: Path) -> str:
    manifest = load_bundle(bundle).manifest
    rank = f", rank {manifest.rank_k}" if manifest.rank_k else ""
    return f"`{bundle.name}` ({manifest.pooling}{rank}, d {manifest.encoder.dim}, {manifest.metric})"


def table(rows: list[dict], requests: int) -> list[str]:
    lines = [
        "| bundle | items | service, empty store MB | writer: growth a stored item KB | HNSW build child peak MB "
        "| service after restart MB (anonymous) | a stored item KB (anonymous) | open s | after {r} by-id requests MB "
        "| vector mirror KB an item | term mirror KB an item |".replace("{r}", f"{requests:,}"),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        writer_kb = (r["written"] - r["before"]) / r["n"] / 1024
        served_kb = (r["ready"] - r["empty"]) / r["n"] / 1024
        anon_kb = (r["anon"] - r["empty_anon"]) / r["n"] / 1024
        lines.append(
            f"| {kind(r['bundle'])} | {r['n']:,} | {r['empty'] / MB:.0f} | {writer_kb:.1f} "
            f"| {r['hnsw_child'] / MB:.0f} | {r['ready'] / MB:.0f} ({r['anon'] / MB:.0f}) "
            f"| {served_kb:.1f} ({anon_kb:.1f}) "
            f"| {r['open_s']:.1f} | {r['served'] / MB:.0f} | {r['mirror'] / 1024:.1f} | {r['terms'] / 1024:.2f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundles", type=Path, nargs="+", default=[ROOT / "bundles/all-minilm-l6-v2"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--requests", type=int, default=1000, help="distinct /similar by id after the restart")
    parser.add_argument("--no-write", action="store_true", help="print only, leave BENCHMARKS.md alone")
    args = parser.parse_args()
    started, load = time.time(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ms-memory-") as tmp:
        rows = [row for bundle in args.bundles for row in bench_bundle(bundle, args.sizes, args.requests, Path(tmp))]
    settings = Settings()
    cache = max(r["cache_estimate"] for r in rows)
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / (1 << 30)
    body = "\n".join(
        [
            f"Machine: {machine()} and {memory:.0f} GiB shared with other work "
            f"(1-min load average {load:.1f} at the start), CPython {platform.python_version()}; "
            f"embedded store (qdrant-edge, HNSW built); whole run {(time.time() - started) / 60:.0f} min.",
            f"Command: `.venv/bin/python -m bench.memory_bench --bundles {' '.join(b.name for b in args.bundles)} "
            f"--sizes {' '.join(map(str, args.sizes))} --requests {args.requests}` (bundles by folder name; a "
            "second-order one exported from the packaged all-MiniLM-L6-v2 with the `metricsearch export` options its "
            "kind names).",
            "Items: bench.hybrid_scale's synthetic catalog (titles of ~7 words, descriptions of ~20, one int of "
            "metadata), written through `Catalog.index` with synthetic encoder output (values do not change what an "
            "item costs). RSS is VmRSS, in brackets RssAnon (memory no file backs; the rest is the engine's "
            "memory-mapped files, which the OS may evict); a stored item's KB is (after restart - empty store) / "
            "items.",
            "",
            *table(rows, args.requests),
            "",
            f"Caches (caps, default settings): answer cache {settings.answer_cache_mb:g} MB / "
            f"{settings.answer_cache_size:,} entries, embedding cache {settings.embedding_cache_mb:g} MB / "
            f"{settings.embedding_cache_size:,} entries. The answer cache's own estimate of what {args.requests:,} "
            f"k-10 answers hold: {cache / MB:.1f} MB ({cache / args.requests / 1024:.1f} KB an answer). "
            "No latency is reported here: the figures are memory only.",
        ]
    )
    print(body)
    if not args.no_write:
        write_section(ROOT / "BENCHMARKS.md", "Memory", body)


if __name__ == "__main__":
    main()
