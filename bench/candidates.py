"""What the candidate count buys and costs: per k and number of ANN candidates reranked, the share of the exact fused
top k (every item reranked) that the service's answer holds, and the in-process answer time, on bench.hybrid_scale's
synthetic catalog; and on the real catalog pairs, per number of candidates of a k = 100 page, the gold matches' MRR and
how often the page's top 10 are those of the largest count. The tables behind MS_CANDIDATES_MIN / MS_CANDIDATES_FACTOR
(default max(min, factor x k)): the lever for wide pages (BENCHMARKS.md "Hot path profile": at k=100 most of a
request is its candidates).

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

from bench.data import CATALOG_PAIRS, ROOT, write_catalog_match
from bench.hybrid_scale import (
    DEFAULT_FACTOR,
    DEFAULT_MIN,
    build_store,
    exact_scores,
    served_recall,
    synthetic_catalog,
)
from bench.report import machine, write_section
from metricsearch.core.bundle import load_bundle
from metricsearch.core.records import Item
from metricsearch.encoder import Encoder
from metricsearch.evaluation import read_task
from metricsearch.service import Catalog, Settings, open_store, vector_schema

COUNTS = (100, 200, 300, 500, 1000)
KS = (10, 100)
PAGE = 100  # the wide page of the real-catalog table (the most /similar returns)


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


def gold_measure(bundle: Path, workdir: Path) -> dict[str, dict[int, tuple[list[float], list[bool]]]]:
    """{pair: {candidates: (reciprocal ranks, top 10 same)}}: each left item of the pair's catalog-match task asks
    by its title and description for a page of PAGE among the right shop's items (in process, as /similar by text);
    the reciprocal rank of its first gold match on the page (0 when off it), and whether the page's top 10 equal
    those of the page the most candidates gave."""
    loaded = load_bundle(bundle)
    encoder = Encoder(loaded)
    results = {}
    for pair, read in CATALOG_PAIRS.items():
        data = read_task("catalog-match", write_catalog_match(*read(), workdir / pair))
        store = open_store(Settings(data_dir=workdir / f"{pair}-store", optimize_after_writes=0), vector_schema(loaded))
        catalogs = {c: Catalog(loaded.manifest, encoder, store, candidates_min=c, candidates_factor=1) for c in COUNTS}
        base = catalogs[max(COUNTS)]
        base.index([Item(str(j), c.title, c.description) for j, c in enumerate(data.candidates)])
        ranks = {c: ([], []) for c in COUNTS if c >= PAGE}
        try:
            for query, relevant in zip(tqdm(data.queries, desc=pair), data.relevant, strict=True):
                vectors = base.query_vectors_from_texts(
                    encoder.encode(base.query_texts(None, query.title, query.description)), free_text=False
                )
                terms = base.query_terms(None, query.title, query.description)
                pages = {c: [int(m.id) for m in catalogs[c].similar(vectors, PAGE, terms=terms)] for c in ranks}
                for c, (reciprocal, same) in ranks.items():
                    found = [rank for rank, j in enumerate(pages[c], 1) if j in relevant]
                    reciprocal.append(1 / found[0] if found else 0.0)
                    same.append(pages[c][:10] == pages[max(COUNTS)][:10])
        finally:
            store.close()
        results[pair] = ranks
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
        gold = gold_measure(args.bundle, Path(tmp))

    lines = [
        f"Machine: {machine()} (shared; 1-min load average {load_before:.1f} at the "
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
        "",
        f"Real catalogs: each left item of a catalog pair, by its title and description, asks for a page of {PAGE} "
        "among the right shop's items (in process, as `/similar` by text with the default bundle). MRR: of the first "
        f"gold match on the page (0 when off it). Top 10 same: the share of queries whose page starts with the same "
        f"10 items, in the same order, as the page {max(COUNTS)} candidates gave.",
        "",
        f"| candidates of a k = {PAGE} page | " + " | ".join(f"{p} MRR | {p} top 10 same" for p in gold) + " |",
        "|---|" + "---|---|" * len(gold),
    ]
    for c in COUNTS:
        default = " (default)" if c == max(DEFAULT_MIN, DEFAULT_FACTOR * PAGE) else ""
        cells = [f"{np.mean(gold[p][c][0]):.4f} | {np.mean(gold[p][c][1]):.1%}" for p in gold]
        lines.append(f"| {c}{default} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    write_section(ROOT / "BENCHMARKS.md", "Candidates: recall and cost", table)


if __name__ == "__main__":
    main()
