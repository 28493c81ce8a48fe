"""Recommendation options: what each costs and what it does.

1. Latency (BENCHMARKS.md, "Recommendation options"): p50 / p99 of each /similar option, /similar/batch and
   /items/delete through HTTP against a synthetic embedded store (HNSW built), next to a plain by-id request measured
   in the same run on the same store.
2. Quality (EVALUATION.md, "Recommendations and diversity"), the default bundle on Abt-Buy in process: the MRR of
   the original item when the query is positive_ids made of its own title-variant twin(s) (core/augment.py, as the
   trainer makes them; a twin has no description),
   and the intra-list diversity (mean pairwise distance of the top 10, 1 - the bundle's own
   similarity, core/diversity.py) and the gold Buy match's MRR at diversity 0, 0.3 and 0.7.

    .venv/bin/python -m bench.recommend_bench [--bundle bundles/all-minilm-l6-v2] [--items 100000] [--requests 200]
        [--queries 300] [--skip-latency] [--skip-quality]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import numpy as np
from tqdm import tqdm

from bench.data import ROOT, abt_buy
from bench.report import machine, write_section
from bench.service_bench import synthetic_store
from metricsearch.core import diversity
from metricsearch.core.augment import title_variant
from metricsearch.core.ranking import ranking_metrics
from metricsearch.core.records import Item
from metricsearch.core.rerank import FieldVectors
from metricsearch.core.schemas import SimilarRequest
from metricsearch.service import (
    ServiceProcess,
    Settings,
    build_runtime,
)

BRANDS = 500
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
DIVERSITIES = (0.0, 0.3, 0.7)


def metadata(i: int) -> dict:
    """Synthetic item i's brand, popularity and release date."""
    released = (EPOCH - timedelta(days=i % 730)).date().isoformat()
    return {"brand": f"b{i % BRANDS}", "popularity": i % 1000, "released": released}


def kinds(ids: list[str], rng: np.random.Generator) -> dict[str, Callable[[], tuple[str, dict]]]:
    """Each request kind: a function of the request number giving (path, body)."""

    def one() -> str:
        return ids[int(rng.integers(len(ids)))]

    def some(n: int) -> list[str]:
        return [ids[int(i)] for i in rng.choice(len(ids), n, replace=False)]

    decay = {"field": "released", "weight": 0.5, "decay": {"scale": 90, "origin": EPOCH.isoformat()}}
    return {
        "plain by id (baseline)": lambda: ("/similar", {"id": one(), "k": 10}),
        "positive_ids (5)": lambda: ("/similar", {"positive_ids": some(5), "k": 10}),
        "positive_ids (5) + negative_ids (2)": lambda: (
            "/similar",
            {"positive_ids": some(5), "negative_ids": some(2), "k": 10},
        ),
        "diversity 0.3": lambda: ("/similar", {"id": one(), "k": 10, "diversity": 0.3}),
        "group_by brand": lambda: ("/similar", {"id": one(), "k": 10, "group_by": "brand"}),
        "plain by id, filter popularity >= 100 (MS_AUTO_INDEX: indexed from the first one on)": lambda: (
            "/similar",
            {"id": one(), "k": 10, "filter": {"popularity": {"gte": 100}}},
        ),
        "group_by brand, group_size 2, diversity 0.3, same filter, offset 10": lambda: (
            "/similar",
            {
                "id": one(),
                "k": 10,
                "offset": 10,
                "group_by": "brand",
                "group_size": 2,
                "diversity": 0.3,
                "filter": {"popularity": {"gte": 100}},
            },
        ),
        "min_score": lambda: ("/similar", {"id": one(), "k": 10, "min_score": -0.5}),
        "offset 50": lambda: ("/similar", {"id": one(), "k": 10, "offset": 50}),
        "boost popularity": lambda: (
            "/similar",
            {"id": one(), "k": 10, "boost": {"field": "popularity", "weight": 1e-3}},
        ),
        "boost recency decay": lambda: ("/similar", {"id": one(), "k": 10, "boost": decay}),
        "/similar/batch of 10 by id": lambda: (
            "/similar/batch",
            {"queries": [{"id": one(), "k": 10} for _ in range(10)]},
        ),
        "/items/delete of 1 id": lambda: ("/items/delete", {"ids": [one()]}),
    }


def bench_latency(bundle: Path, n: int, requests: int, workdir: Path) -> tuple[list[str], float]:
    started = time.perf_counter()
    ids = synthetic_store(bundle, n, workdir / "synthetic", metadata=metadata)
    build_s = time.perf_counter() - started
    service = ServiceProcess(bundle, workdir / "synthetic", {"MS_OPTIMIZE_AFTER_WRITES": "0"})
    service.start(timeout_s=300)
    rows = []
    rng = np.random.default_rng(7)
    try:
        with httpx.Client(base_url=service.url, timeout=60) as client:
            for _ in range(50):  # warm-up: page the index in
                client.post("/similar", json={"id": ids[int(rng.integers(n))], "k": 10})
            for name, make in kinds(ids, rng).items():
                latencies = []
                for _ in range(requests):
                    path, body = make()
                    begun = time.perf_counter()
                    response = client.post(path, json=body)
                    latencies.append((time.perf_counter() - begun) * 1000)
                    if response.status_code != 200:
                        raise RuntimeError(f"{name}: {response.status_code} {response.text[:300]}")
                latencies.sort()
                p50, p99 = statistics.median(latencies), latencies[int(0.99 * (len(latencies) - 1))]
                rows.append((name, p50, p99))
    finally:
        service.stop()
    base = rows[0][1]
    lines = [f"| {name} | {p50:.2f} | {p99:.2f} | {p50 / base:.2f} |" for name, p50, p99 in rows]
    return lines, build_s


def vectors_of(runtime, ids: list[str]) -> FieldVectors:
    found = runtime.store.get(ids, with_vectors=True)
    queries = [runtime.catalog.item_query(found[i])[0] for i in ids]
    factors = None if queries[0].factors is None else np.stack([q.factors for q in queries])
    return FieldVectors(np.stack([q.fields for q in queries]), np.stack([q.present for q in queries]), factors)


def bench_quality(bundle: Path, queries: int, workdir: Path) -> tuple[list[str], dict]:
    abt, buy, gold = abt_buy()
    rng = np.random.default_rng(13)
    chosen = [abt[int(i)] for i in rng.choice(len(abt), min(queries, len(abt)), replace=False)]
    uniform = lambda n: rng.random(n).tolist()  # noqa: E731
    items = [Item(p.id, p.title, p.description, {"kind": "item"}) for p in abt + buy]
    twins = {
        p.id: [Item(f"twin{t}:{p.id}", title_variant(p.title, uniform), "", {"kind": "twin"}) for t in (1, 2)]
        for p in chosen
    }
    settings = Settings(bundle_dir=bundle, data_dir=workdir / "abt-buy", optimize_after_writes=0)
    runtime = build_runtime(settings)
    try:
        runtime.catalog.index(items + [t for pair in twins.values() for t in pair])
        n_items = len(items)
        only_items = {"kind": "item"}
        twin_ranks = {1: [], 2: []}
        for product in tqdm(chosen, desc="twins"):
            for count in (1, 2):
                positives = [t.id for t in twins[product.id][:count]]
                request = SimilarRequest(positive_ids=positives, k=100, filter=only_items)
                ids = [m.id for m in runtime.recommender.answer(request)]
                twin_ranks[count].append(ids.index(product.id) + 1 if product.id in ids else n_items)
        rows = []
        for count, ranks in twin_ranks.items():
            figures = ranking_metrics(ranks, n_items, ks=(1, 10))
            rows.append(
                f"| positive_ids = {count} title-variant twin{'s' if count > 1 else ''} of the item | "
                f"{figures['MRR']:.3f} | {figures['HR@1']:.3f} | {figures['HR@10']:.3f} |"
            )
        with_gold = [p for p in chosen if p.id in gold]
        manifest = runtime.bundle.manifest
        weights = [f.weight for f in manifest.fields if f.weight > 0]
        spread = []
        for level in DIVERSITIES:
            distances, ranks = [], []
            for product in with_gold:
                request = SimilarRequest(id=product.id, k=10, diversity=level, filter=only_items)
                ids = [m.id for m in runtime.recommender.answer(request)]
                distances.append(diversity.intra_list_distance(vectors_of(runtime, ids), manifest.metric, weights))
                hit = [r + 1 for r, i in enumerate(ids) if i in gold[product.id]]
                ranks.append(hit[0] if hit else n_items)
            mrr = ranking_metrics(ranks, n_items, ks=(10,))["MRR"]
            spread.append(f"| {level:g} | {statistics.mean(distances):.4f} | {mrr:.3f} |")
    finally:
        runtime.close()
    return rows, {"spread": spread, "queries": len(chosen), "with_gold": len(with_gold), "items": n_items}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles/all-minilm-l6-v2")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-quality", action="store_true")
    args = parser.parse_args()
    machine_line = (
        f"Machine: {machine()} (shared with other work), "
        f"{platform.python_implementation()} {platform.python_version()}; bundle `{args.bundle.name}`."
    )
    with tempfile.TemporaryDirectory(prefix="ms-recommend-") as tmp:
        workdir = Path(tmp)
        if not args.skip_latency:
            lines, build_s = bench_latency(args.bundle, args.items, args.requests, workdir)
            table = "\n".join(
                [
                    machine_line + f" Embedded store, {args.items:,} synthetic items (low-rank vectors, 500 brands, "
                    f"popularity, release dates; built and HNSW-indexed in {build_s:.0f} s), k = 10, one client, "
                    f"{args.requests} sequential requests per kind through HTTP (httpx, keep-alive), random ids.",
                    f"Command: `.venv/bin/python -m bench.recommend_bench --items {args.items} --requests "
                    f"{args.requests} --skip-quality`.",
                    "",
                    "| request | p50 ms | p99 ms | p50 / plain by id |",
                    "|---|---|---|---|",
                    *lines,
                ]
            )
            print(table)
            write_section(ROOT / "BENCHMARKS.md", "Recommendation options", table)
        if not args.skip_quality:
            rows, quality = bench_quality(args.bundle, args.queries, workdir)
            table = "\n".join(
                [
                    machine_line + f" Abt-Buy: the {quality['items']:,} Abt and Buy items indexed in process (embedded "
                    f"store), plus two title-variant twins (core/augment.py: words dropped, part-number hyphens "
                    "changed, order shuffled; no description, so the title alone carries the item) of "
                    f"{quality['queries']} random Abt items (seed 13); every query filtered to the original items.",
                    f"Command: `.venv/bin/python -m bench.recommend_bench --queries {args.queries} --skip-latency`.",
                    "",
                    "| query | MRR of the item itself | HR@1 | HR@10 |",
                    "|---|---|---|---|",
                    *rows,
                    "",
                    f"Diversity: the top 10 by id of the {quality['with_gold']} of those items with a gold Buy match; "
                    "intra-list diversity is the mean pairwise distance of the 10 (1 - the bundle's similarity, "
                    "core/diversity.py), MRR that of the gold match within the top 10.",
                    "",
                    "| diversity | intra-list diversity | MRR of the gold match (top 10) |",
                    "|---|---|---|",
                    *quality["spread"],
                ]
            )
            print(table)
            write_section(ROOT / "EVALUATION.md", "Recommendations and diversity", table)


if __name__ == "__main__":
    main()
