"""Indexing and durability: `POST /index` items/s of 10,000 real items (Walmart-Amazon's right side, Buy, then wine
reviews) beside plain sentence-transformers and the bare ONNX encoder on the same texts and, with the txtai peer,
txtai indexing the same items, in alternating rounds (drift on a shared machine hits all alike); then what
`MS_SYNC_WRITES` (an fsync per acknowledged write, shared by concurrent writers) costs the embedded store's writes.
Writes BENCHMARKS.md's "Indexing" and "Durability" sections and their summary row.

    nice -n 10 .venv/bin/python -m bench.indexing [--items 10000] [--rounds 2] [--peers txtai] [--durability-s 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
from tqdm import tqdm

from bench.data import abt_buy, walmart_amazon, wine_items
from bench.load import serving
from bench.peers.txtai_api import TxtaiProcess, ensure_venv, txtai_version
from bench.report import BENCHMARKS, ROOT, command, table, write_section, write_summary
from metricsearch.client import Client
from metricsearch.core.base_model import packaged_model_dir
from metricsearch.core.bundle import load_bundle
from metricsearch.encoder import Encoder
from metricsearch.service import Settings, StoredItem, VectorSchema, free_port, open_store

BATCH = 200
DIM = 768
"""The default bundle's packed title and description vector."""
SCHEMA = VectorSchema(sizes={"ann": DIM}, ann="ann", identity="durability-bench")


def index_rate(url: str, items: list[dict], prefix: str) -> float:
    """Items/s of `items` (new ids, so every one is encoded) through POST /index in batches of BATCH, one client."""
    fresh = [{**item, "id": f"{prefix}-{item['id']}"} for item in items]
    with Client(url) as client:
        started = time.perf_counter()
        for start in range(0, len(fresh), BATCH):
            client.index(fresh[start : start + BATCH])
        return len(fresh) / (time.perf_counter() - started)


def txtai_rate(url: str, items: list[dict]) -> float:
    """Items/s of the same items into txtai the way its API indexes: POST /add in batches, then GET /index (which
    encodes and builds a new index); one text an item, title and description."""
    documents = [{"id": i["id"], "text": f"{i['title']} {i['description']}".strip()} for i in items]
    with httpx.Client(base_url=url, timeout=900) as client:
        started = time.perf_counter()
        for start in range(0, len(documents), BATCH):
            client.post("/add", json=documents[start : start + BATCH]).raise_for_status()
        client.get("/index").raise_for_status()
        return len(documents) / (time.perf_counter() - started)


def real_items(limit: int) -> list[dict]:
    """Up to `limit` /index items: Walmart-Amazon's right side, then Buy, then wine reviews (ids kept apart)."""
    products = [("wa", p) for p in walmart_amazon()[1]] + [("buy", p) for p in abt_buy()[1]]
    items = [{"id": f"{src}-{p.id}", "title": p.title, "description": p.description} for src, p in products][:limit]
    return items + wine_items(limit - len(items)) if len(items) < limit else items


def field_texts(items: list[dict]) -> list[str]:
    """The texts /index encodes: each item's title and its description when it has one (one vector per field)."""
    return [t for i in items for t in (i["title"], i.get("description") or "") if t.strip()]


ST = "sentence-transformers"
BARE = "bare encoder"


def indexing(args: argparse.Namespace, workdir: Path) -> dict[str, list[float]]:
    """Alternating rounds of sentence-transformers, the bare encoder, /index and (with the txtai peer) txtai, on the
    same items."""
    import torch
    from sentence_transformers import SentenceTransformer

    items = real_items(args.items)
    texts = field_texts(items)
    encoder = Encoder(load_bundle(args.bundle))
    st = SentenceTransformer(str(args.model or packaged_model_dir()), device="cpu", local_files_only=True)
    torch.set_num_threads(args.st_threads)
    rates: dict[str, list[float]] = {ST: [], BARE: [], "metricsearch": []}
    encoders = {
        ST: lambda: st.encode(texts, batch_size=32, normalize_embeddings=True),
        BARE: lambda: encoder.encode(texts),
    }
    peer = None
    if "txtai" in args.peers:
        ensure_venv()
        peer = TxtaiProcess(free_port(), workdir)
        peer.start()
        rates[f"txtai {txtai_version()}"] = []
    try:
        default = {"MS_OPTIMIZE_AFTER_WRITES": str(Settings().optimize_after_writes)}  # as served: HNSW builds behind
        with serving(args.bundle, workdir / "index-data", default) as service:
            index_rate(service.url, items[:32], "warm")
            encoder.encode(texts[:64]), st.encode(texts[:64])
            for n in tqdm(range(args.rounds), desc="indexing rounds", disable=None):
                for name, encode in encoders.items():
                    started = time.perf_counter()
                    encode()
                    rates[name].append(len(items) / (time.perf_counter() - started))
                rates["metricsearch"].append(index_rate(service.url, items, f"r{n}"))
                if peer is not None:
                    rates[f"txtai {txtai_version()}"].append(txtai_rate(peer.url, items))
    finally:
        if peer is not None:
            peer.stop()
    return rates


def stored_items(rng: np.random.Generator, prefix: str, n: int) -> list[StoredItem]:
    vectors = rng.standard_normal((n, DIM), dtype=np.float32)
    return [
        StoredItem(f"{prefix}-{i}", f"item {prefix}-{i}", "", {"n": i}, f"h{i}", {"ann": vectors[i]}) for i in range(n)
    ]


def upserts(store, batch: int, writers: int, seconds: float) -> dict[str, float]:
    """`writers` threads upsert batches of `batch` new items for `seconds`: items/s and per-write p50 and p99."""
    latencies: list[list[float]] = [[] for _ in range(writers)]
    deadline = time.perf_counter() + seconds

    def write(w: int) -> None:
        rng = np.random.default_rng(w)
        for n in range(100_000):  # bounded; the deadline ends it
            if time.perf_counter() >= deadline:
                return
            chunk = stored_items(rng, f"b{batch}-w{writers}-{w}-{n}", batch)
            started = time.perf_counter()
            store.upsert(chunk)
            latencies[w].append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = np.asarray([x for lat in latencies for x in lat])
    return {
        "items_s": len(flat) * batch / (time.perf_counter() - started),
        "p50": float(np.percentile(flat, 50)),
        "p99": float(np.percentile(flat, 99)),
    }


def durability(seconds: float, preload: int, workdir: Path) -> list[list]:
    """Per batch size and writer count: WAL-only writes beside fsynced ones (MS_SYNC_WRITES)."""
    results: dict[bool, dict[tuple[int, int], dict]] = {}
    for sync in (False, True):
        settings = Settings(data_dir=workdir / f"sync-{sync}", optimize_after_writes=0, sync_writes=sync)
        store = open_store(settings, SCHEMA)
        try:
            rng = np.random.default_rng(0)
            for start in range(0, preload, 1000):
                store.upsert(stored_items(rng, f"pre{start}", min(1000, preload - start)))
            store.flush()
            results[sync] = {(b, w): upserts(store, b, w, seconds) for b in (1, 10, 100) for w in (1, 4)}
        finally:
            store.close()
    rows = []
    for (batch, writers), wal in results[False].items():
        synced = results[True][(batch, writers)]
        wal_cells = [f"{wal['items_s']:.0f}", f"{wal['p50']:.2f} / {wal['p99']:.2f}"]
        synced_cells = [f"{synced['items_s']:.0f}", f"{synced['p50']:.2f} / {synced['p99']:.2f}"]
        rows.append([batch, writers, *wal_cells, *synced_cells, f"{synced['items_s'] / wal['items_s']:.2f}"])
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles/all-minilm-l6-v2")
    parser.add_argument("--items", type=int, default=10_000, help="real items indexed each round")
    parser.add_argument("--model", type=Path, help="sentence-transformers folder of the bundle (default: packaged)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--st-threads",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="sentence-transformers' torch threads (default: every core, torch's own default; on busy cores its "
        "threads wait on each other, and one thread is faster)",
    )
    parser.add_argument("--peers", nargs="*", default=["txtai"], choices=["txtai"])
    parser.add_argument("--durability-s", type=float, default=4.0, help="seconds of each durability row")
    parser.add_argument("--preload", type=int, default=10_000, help="items stored before the durability rows")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ms-indexing-") as tmp:
        rates = indexing(args, Path(tmp))
        durable = durability(args.durability_s, args.preload, Path(tmp))
    plain = statistics.median(rates[ST])
    rows = [
        [name, f"{statistics.median(r):.1f}", f"{statistics.median(r) / plain:.2f}", ", ".join(f"{x:.0f}" for x in r)]
        for name, r in rates.items()
    ]
    how = {
        ST: f"PyTorch on {args.st_threads} threads, `encode(batch_size=32)`, titles and descriptions",
        BARE: "in-process `Encoder.encode`, titles and descriptions",
        "metricsearch": "`POST /index`",
    }
    rows = [[f"{row[0]} ({how.get(row[0], 'POST /add, then GET /index')})", *row[1:]] for row in rows]
    items = real_items(args.items)
    indexing_body = f"""Command: {command("bench.indexing", argv)}. {len(items):,} real items each round
(Walmart-Amazon's right side, Buy, then wine reviews: {len(field_texts(items)):,} titles and non-empty descriptions),
new ids so every item is encoded, batches of {BATCH}, one client; the service's start is not timed. The rounds
alternate between the indexers; sentence-transformers (the bundle's model, packaged) and the bare encoder encode the
same texts, without storing them.

{table(["indexer", "items/s (median)", "x sentence-transformers", "rounds"], rows)}
"""
    durability_body = f"""Command: {command("bench.indexing", argv)}. Store writes alone (`upsert` of new items, 768
floats and a short payload, into the embedded store preloaded with {args.preload:,} items), {args.durability_s:g} s a
row, `writers` threads at once: the store's share of an /index request, without the encoder. Without
`MS_SYNC_WRITES` an acknowledged write is in the WAL, which survives `kill -9` (tests/service/test_reliability.py)
but not a power loss; with it each write returns after an fsync that concurrent writers share. What an fsync costs
is the disk's: measure the one under the data folder before turning it on.

{table(["batch", "writers", "WAL only: items/s", "p50 / p99 ms", "+ fsync: items/s", "p50 / p99 ms", "ratio"], durable)}
"""
    print(indexing_body, durability_body, sep="\n")
    write_section(BENCHMARKS, "Indexing", indexing_body)
    write_section(BENCHMARKS, "Durability", durability_body)
    ours = next(row for row in rows if row[0].startswith("metricsearch"))
    peers = "; ".join(f"{row[0].split(' (')[0]}: {row[1]}" for row in rows if row is not ours)
    write_summary(
        BENCHMARKS,
        "Indexing",
        [(f"`POST /index` of {len(items):,} real items, items/s (title and description)", ours[1], peers)],
    )


if __name__ == "__main__":
    main()
