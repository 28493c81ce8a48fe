"""Service benchmark: /similar latency and throughput through HTTP at 10k and 100k items, text-query latency,
and /index items/s next to the bare encoder's items/s on the same texts. Prints a table and writes the
"Service" section of BENCHMARKS.md.

    .venv/bin/python -m bench.service_bench [--sizes 10000 100000] [--requests 500] [--index-items 1000]
        [--k 10 100]

Scale items use synthetic vectors (low-rank, like real embeddings) written straight into the embedded store,
then HNSW-indexed, because encoding 100k items with the real model takes ~20 min on 2 cores; the text and
indexing figures use the real packaged model on wine reviews from ../shared/data.
"""

from __future__ import annotations

import argparse
import csv
import http.client
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import orjson
from tqdm import tqdm

from bench.data import DATA
from bench.report import machine, write_section
from metricsearch.core import scoring
from metricsearch.core.bundle import load_bundle
from metricsearch.core.errors import StoreMismatchError
from metricsearch.core.lexical import WHOLE_TEXT, lexical_fields
from metricsearch.encoder import Encoder
from metricsearch.service import (
    ANN_VECTOR,
    EdgeStore,
    ServiceProcess,
    Settings,
    StoredItem,
    content_hash,
    open_store,
    vector_schema,
)

ROOT = Path(__file__).resolve().parents[1]
WINE = DATA / "wine_reviews_kaggle_130k_head/winemag-data-130k-v2.csv"


def wine_items(limit: int) -> list[dict]:
    items = []
    with WINE.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row.get("title") and row.get("description"):
                items.append({"id": f"w{row['id']}", "title": row["title"], "description": row["description"]})
            if len(items) >= limit:
                break
    return items


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


class Client:
    """A lean keep-alive HTTP/1.1 client (stdlib http.client): httpx alone adds ~1.1 ms a request here, which
    would measure the client rather than the service."""

    def __init__(self, port: int) -> None:
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def post(self, path: str, body: dict) -> dict:
        return orjson.loads(self._request("POST", path, orjson.dumps(body)))

    def get(self, path: str) -> bytes:
        return self._request("GET", path, None)

    def _request(self, method: str, path: str, payload: bytes | None) -> bytes:
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        try:
            self._conn.request(method, path, payload, headers)
        except ConnectionError:  # the server closed an idle keep-alive connection: reconnect once
            self._conn.close()
            self._conn.request(method, path, payload, headers)
        response = self._conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{method} {path} answered {response.status}: {data[:300]!r}")
        return data

    def close(self) -> None:
        self._conn.close()


def timed_requests(client: Client, bodies: list[dict]) -> tuple[list[float], list[float]]:
    """Sequential POST /similar: round-trip latencies and the service's own took_ms, in ms."""
    latencies, server = [], []
    for body in bodies:
        started = time.perf_counter()
        answer = client.post("/similar", body)
        latencies.append((time.perf_counter() - started) * 1000)
        server.append(answer["took_ms"])
    return latencies, server


def throughput(port: int, bodies: list[dict], clients: int) -> float:
    """Requests/s with `clients` concurrent keep-alive connections over a fixed list of requests."""
    chunks = [bodies[i::clients] for i in range(clients)]

    def run(chunk: list[dict]) -> int:
        client = Client(port)
        for body in chunk:
            client.post("/similar", body)
        client.close()
        return len(chunk)

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        done = sum(pool.map(run, chunks))
    return done / (time.perf_counter() - started)


def bench_indexing(bundle: Path, items: list[dict], workdir: Path, rounds: int) -> dict:
    """Bare encoder and POST /index on the same texts, alternating `rounds` times (this machine is shared and
    noisy: alternating keeps drift out of the ratio); medians of the rounds."""
    encoder = Encoder(load_bundle(bundle))
    service = ServiceProcess(bundle, workdir / "index-data", {"MS_INTRA_OP_THREADS": "0"})
    service.start()
    client = Client(service.port)
    bare, served = [], []
    try:
        encoder.encode([i["title"] for i in items[:32]])  # warm-ups, not timed
        client.post("/index", {"items": [{**i, "id": f"warm-{i['id']}"} for i in items[:32]]})
        for n in tqdm(range(rounds), desc="indexing rounds"):
            started = time.perf_counter()
            encoder.encode([i["title"] for i in items] + [i["description"] for i in items])
            bare.append(len(items) / (time.perf_counter() - started))
            fresh = [{**i, "id": f"r{n}-{i['id']}"} for i in items]  # new ids: every item is encoded
            started = time.perf_counter()
            for start in range(0, len(fresh), 250):
                client.post("/index", {"items": fresh[start : start + 250]})
            served.append(len(items) / (time.perf_counter() - started))
        # 20 warm-ups and 200 timed, the titles taken again from the start when there are fewer items.
        queries = [{"text": items[n % len(items)]["title"], "k": 10} for n in range(220)]
        timed_requests(client, queries[:20])
        text_latency, _ = timed_requests(client, queries[20:])
    finally:
        client.close()
        service.stop()
    return {
        "bare": statistics.median(bare),
        "served": statistics.median(served),
        "ratios": [s / b for s, b in zip(served, bare, strict=True)],
        "items": 32 + rounds * len(items),
        "text_p50": percentile(text_latency, 50),
        "text_p99": percentile(text_latency, 99),
    }


def synthetic_batches(bundle: Path, n: int, seed: int = 0, batch: int = 2000):
    """(start, packed (size, F * dim) unit vectors) batches of n synthetic items with low-rank per-field vectors
    (real embeddings concentrate in few directions); the same seed gives the same catalog."""
    manifest = load_bundle(bundle).manifest
    rng = np.random.default_rng(seed)
    dim, rank = manifest.encoder.dim, 48
    basis = rng.standard_normal((rank, dim)).astype(np.float32)
    weights = [f.weight for f in manifest.fields if f.weight > 0]
    for start in range(0, n, batch):
        size = min(batch, n - start)
        topics = rng.standard_normal((size, 1, rank)).astype(np.float32)
        noise = rng.standard_normal((size, len(weights), rank)).astype(np.float32) * 0.5
        yield start, scoring.pack((topics + noise) @ basis, weights)


def synthetic_texts(i: int) -> tuple[str, str]:
    """Synthetic item i's title and description: two words every item holds and a number none shares."""
    return f"synthetic item {i}", "synthetic"


def synthetic_store(
    bundle: Path, n: int, data_dir: Path, seed: int = 0, metadata: Callable[[int], dict] = lambda i: {"bucket": i % 10}
) -> list[str]:
    """n synthetic items (synthetic_batches) in an embedded store at data_dir, HNSW-indexed, each stored as /index
    stores it (with its lexical vectors where the bundle has them), with synthetic_texts."""
    loaded = load_bundle(bundle)
    lexical = lexical_fields(loaded.manifest)
    store = open_store(Settings(data_dir=data_dir, optimize_after_writes=0), vector_schema(loaded))
    ids = [f"s{i}" for i in range(n)]
    for start, packed in tqdm(synthetic_batches(bundle, n, seed), total=-(-n // 2000), desc=f"synthetic {n}"):
        batch = []
        for j, vector in enumerate(packed):
            title, description = synthetic_texts(start + j)
            batch.append(
                StoredItem(
                    id=ids[start + j],
                    title=title,
                    description=description,
                    metadata=metadata(start + j),
                    content_hash=content_hash(title, description),
                    vectors={ANN_VECTOR: vector},
                    sparse=lexical.documents(title, description) if lexical else {},
                )
            )
        store.upsert(batch)
    store.optimize_now()  # bulk load done: build HNSW now, in its child process
    store.wait_for_maintenance()
    if not store.has_hnsw:
        raise RuntimeError(f"no HNSW index was built for {n} synthetic items")
    store.close()
    return ids


def reused_synthetic_store(
    bundle: Path, n: int, store_dir: Path, metadata: Callable[[int], dict] = lambda i: {"bucket": i % 10}
) -> list[str]:
    """synthetic_store's items at store_dir (with `metadata`), built once and reused while it holds them as this code
    writes them (n items, with the lexical vectors the bundle asks for); their ids."""
    loaded = load_bundle(bundle)
    lexical = lexical_fields(loaded.manifest)
    if store_dir.exists():
        try:
            store = open_store(Settings(data_dir=store_dir, optimize_after_writes=0), vector_schema(loaded))
        except StoreMismatchError:  # built by another bundle, or by this one before its analyzer changed
            store = None
        current = store is not None and store.count() == n
        if current and lexical:  # a store from before the benches wrote lexical vectors scores 0 on its own text
            whole = lexical.names[WHOLE_TEXT]
            query = {whole: lexical.documents(*synthetic_texts(0))[whole]}
            current = bool(store.lexical_scores(query, store.points(["s0"]))[whole][0] > 0)
        if store is not None:
            store.close()
        if not current:
            shutil.rmtree(store_dir)
    if not store_dir.exists():
        synthetic_store(bundle, n, store_dir, metadata=metadata)
    return [f"s{i}" for i in range(n)]


def timed_service(bundle: Path, data_dir: Path, env: dict[str, str], rows: dict[str, list[dict]]) -> dict:
    """One service on the store: each row's requests timed in turn (after a warm-up that pages the index in), and
    the first row's throughput with 4 clients. Answer cache off: every figure is a search."""
    service = ServiceProcess(bundle, data_dir, {"MS_OPTIMIZE_AFTER_WRITES": "0", "MS_ANSWER_CACHE_SIZE": "0", **env})
    service.start()
    client = Client(service.port)
    results = {}
    try:
        for name, bodies in rows.items():
            timed_requests(client, bodies[:50])
            latency, server_ms = timed_requests(client, bodies)
            results[name] = {
                "p50": percentile(latency, 50),
                "p99": percentile(latency, 99),
                "server_p50": statistics.median(server_ms),
            }
        first = next(iter(rows))
        results[first]["rps"] = throughput(service.port, rows[first], clients=4)
    finally:
        client.close()
        service.stop()
    return results


def bench_scale(bundle: Path, n: int, requests: int, workdir: Path, ks: list[int]) -> dict:
    """By id unfiltered at each of `ks`, and at the first k with a filter keeping 10% of the items (`bucket` = 3)
    without and with its payload index (MS_INDEXED_FIELDS), on the same store and query items."""
    data_dir = workdir / f"scale-{n}"
    ids = synthetic_store(bundle, n, data_dir)
    picks = np.random.default_rng(1).integers(0, n, requests)
    bodies = {k: [{"id": ids[i], "k": k} for i in picks] for k in ks}
    filtered = [{**body, "filter": {"bucket": 3}} for body in bodies[ks[0]]]
    wide = {f"by id, k={k}": bodies[k] for k in ks[1:]}
    plain = timed_service(bundle, data_dir, {}, {"by id": bodies[ks[0]], **wide, "filtered, no index": filtered})
    indexed = timed_service(bundle, data_dir, {"MS_INDEXED_FIELDS": "bucket:float"}, {"filtered, indexed": filtered})
    return {"n": n, "k": ks[0], **plain, **indexed}


def scale_rows(scale: list[dict]) -> list[str]:
    labels = {
        "by id": "`/similar` by id, HTTP round trip",
        "filtered, no index": "by id, filter keeping 10% (`bucket`, no payload index)",
        "filtered, indexed": "by id, filter keeping 10% (`MS_INDEXED_FIELDS=bucket:float`)",
    }
    lines = ["| measure | items | p50 ms | p99 ms | server p50 ms | req/s (4 clients) |", "|---|---|---|---|---|---|"]
    for s in scale:
        for row in (name for name in s if name not in ("n", "k")):
            r = s[row]
            label = labels.get(row, f"`/similar` {row}, HTTP round trip")
            if s["k"] != 10 and row in labels:
                label += f", k={s['k']}"
            rps = f"{r['rps']:.0f}" if "rps" in r else ""
            lines.append(f"| {label} | {s['n']:,} | {r['p50']:.2f} | {r['p99']:.2f} | {r['server_p50']:.2f} | {rps} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles/all-minilm-l6-v2")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--index-items", type=int, default=1000)
    parser.add_argument("--index-rounds", type=int, default=3)
    parser.add_argument(
        "--k", type=int, nargs="+", default=[10], help="by-id rows at each k (the filtered rows use the first)"
    )
    parser.add_argument(
        "--scale-only", action="store_true", help="only the by-id rows, printed (BENCHMARKS.md is left as it is)"
    )
    args = parser.parse_args()
    if args.index_items < 1 or args.index_rounds < 1:
        parser.error("--index-items and --index-rounds must be at least 1")

    with tempfile.TemporaryDirectory(prefix="ms-bench-") as tmp:
        workdir = Path(tmp)
        scale = [bench_scale(args.bundle, n, args.requests, workdir, args.k) for n in args.sizes]
        if args.scale_only:
            print("\n".join(scale_rows(scale)))
            return
        indexing = bench_indexing(args.bundle, wine_items(args.index_items), workdir, args.index_rounds)

    lines = [
        f"Machine: {machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}; bundle `{args.bundle.name}`; embedded store (qdrant-edge, HNSW built).",
        f"Command: `.venv/bin/python -m bench.service_bench --sizes {' '.join(map(str, args.sizes))} "
        f"--requests {args.requests} --index-items {args.index_items} --index-rounds {args.index_rounds} "
        f"--k {' '.join(map(str, args.k))}` (one run; "
        "client and service share the 2 cores; the client is stdlib http.client with keep-alive; answer cache off "
        "for the by-id rows).",
        "",
        *scale_rows(scale),
    ]
    lines += [
        f"| `/similar` by text (real model) | {indexing['items']:,} | {indexing['text_p50']:.2f} | "
        f"{indexing['text_p99']:.2f} | | |",
        "",
        "| indexing | items/s | ratio to bare encoder |",
        "|---|---|---|",
        f"| bare encoder (in-process, title + description, same texts) | {indexing['bare']:.1f} | 1.00 |",
        f"| `POST /index` through HTTP, batches of 250 | {indexing['served']:.1f} | "
        f"{indexing['served'] / indexing['bare']:.2f} (rounds: {', '.join(f'{r:.2f}' for r in indexing['ratios'])}) |",
        "",
        "Targets: by id p50 <= 5 ms at 100k items; filtered (10%) p50 <= 1.3x unfiltered (issue 16); indexing >= 0.80 "
        "of the bare encoder.",
        "",
        "The filtered rows search exactly: without a payload index the census finds the items the filter keeps and "
        "they are compared in process; with one, a filter keeping at most "
        f"{EdgeStore.exhaustive_max:,} points has the engine compare each of them. Before 2026-11-28 both took the "
        "engine's HNSW walk, which at 100k items found 0.22 of a 10% filter's exact 100 nearest (BENCHMARKS.md, "
        '"Filtered search"): the 1.3x target was met at that recall.',
    ]
    table = "\n".join(lines)
    print(table)
    write_section(ROOT / "BENCHMARKS.md", "Service", table)


if __name__ == "__main__":
    main()
