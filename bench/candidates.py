"""What the candidate count buys and costs: per k and number of ANN candidates reranked, the share of the exact fused
top k (every item reranked) that the service's answer holds, and the in-process answer time, on bench.hybrid_scale's
synthetic catalog. The table behind MS_CANDIDATES_MIN / MS_CANDIDATES_FACTOR (default max(100, 10 x k)): it is the
lever for wide pages (BENCHMARKS.md "Hot path profile": at k=100 most of a request is its 1,000 candidates).

    .venv/bin/python -m bench.candidates [--items 100000] [--queries 30] [--store-dir DIR]

Each setting answers the same query items, interleaved (one query item: every setting in turn), on one store.
Writes the "Candidates: recall and cost" section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench.data import ROOT
from bench.hybrid_scale import build_store, exact_scores, served_recall, synthetic_catalog
from bench.report import write_section
from metricsearch.core.bundle import load_bundle
from metricsearch.encoder import Encoder
from metricsearch.service import Catalog, Settings, open_store, vector_schema

COUNTS = (100, 200, 300, 500, 1000)
DEFAULT_MIN, DEFAULT_FACTOR = (Settings.model_fields[f].default for f in ("candidates_min", "candidates_factor"))
KS = (10, 100)


def measure(bundle: Path, items: list[dict], fields: np.ndarray, data_dir: Path, queries: list[int]) -> dict:
    """{(k, candidates): (recalls, seconds)} per query item."""
    loaded = load_bundle(bundle)
    store = open_store(Settings(data_dir=data_dir, optimize_after_writes=0), vector_schema(loaded))
    encoder = Encoder(loaded)
    catalogs = {c: Catalog(loaded.manifest, encoder, store, candidates_min=c, candidates_factor=1) for c in COUNTS}
    exact = exact_scores(catalogs[COUNTS[0]], items, fields)
    results = {(k, c): ([], []) for k in KS for c in COUNTS if c >= k}
    try:
        for q in tqdm(queries, desc="queries"):
            ranked = exact(q)
            for (k, c), (recalls, seconds) in results.items():
                recall, took = served_recall(catalogs[c], items, ranked, q, k)
                recalls.append(recall)
                seconds.append(took)
    finally:
        store.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles/all-minilm-l6-v2")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--store-dir", type=Path, help="keep the store here and reuse it (same --items)")
    args = parser.parse_args()
    started = time.time()
    load_before = os.getloadavg()[0]
    items, fields = synthetic_catalog(args.items, load_bundle(args.bundle).manifest.encoder.dim)
    queries = np.random.default_rng(2).choice(args.items, args.queries, replace=False).tolist()
    with tempfile.TemporaryDirectory(prefix="ms-candidates-") as tmp:
        data_dir = args.store_dir or Path(tmp) / "store"
        if not (data_dir / "built").exists():
            shutil.rmtree(data_dir, ignore_errors=True)
            build_store(args.bundle, items, fields, data_dir)
            (data_dir / "built").write_text(f"{args.items}\n")
        elif (data_dir / "built").read_text().strip() != str(args.items):
            raise SystemExit(f"{data_dir} holds another catalog size; remove it or pass another --store-dir")
        results = measure(args.bundle, items, fields, data_dir, queries)

    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared; 1-min load average {load_before:.1f} at the "
        f"start, {os.getloadavg()[0]:.1f} at the end), CPython {platform.python_version()}; bundle "
        f"`{args.bundle.name}`; embedded store (qdrant-edge, HNSW built); whole run "
        f"{(time.time() - started) / 60:.0f} min.",
        f"Command: `.venv/bin/python -m bench.candidates --items {args.items} --queries {args.queries}`.",
        f"Catalog: bench.hybrid_scale's {args.items:,} synthetic items (clusters of about 20 near-duplicates). "
        f"Recall: the share of the exact fused top k (all {args.items:,} items reranked) in the answer, mean over "
        f"{len(queries)} query items by id; all k: the share of queries whose answer holds the whole exact top k. "
        "Time: the in-process answer (store query, candidate vectors, lexical scores, rerank), median.",
        "",
        "| k | candidates | recall of the exact top k | all k | answer p50 ms |",
        "|---|---|---|---|---|",
    ]
    for (k, c), (recalls, seconds) in results.items():
        default = " (default)" if c == max(DEFAULT_MIN, DEFAULT_FACTOR * k) else ""
        lines.append(
            f"| {k} | {c}{default} | {np.mean(recalls):.3f} | {np.mean(np.equal(recalls, 1.0)):.0%} | "
            f"{1000 * statistics.median(seconds):.1f} |"
        )
    lines += [
        "",
        "Past the cluster of near-duplicates the synthetic ranking is close to noise, so the tail of a wide page is "
        "where fewer candidates change the answer most.",
    ]
    table = "\n".join(lines)
    print(table)
    write_section(ROOT / "BENCHMARKS.md", "Candidates: recall and cost", table)


if __name__ == "__main__":
    main()
