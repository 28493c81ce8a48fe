"""The answer cache under writes: how often a storefront's by-id request is answered from it when 2% of requests are
writes, and whether those answers are the ranking a request would get computed anew. Writes BENCHMARKS.md's "Answer
cache under writes" section.

    .venv/bin/python -m bench.cache [--queries 5000] [--write-share 0.02] [--pairs Abt-Buy Walmart-Amazon DBLP-Scholar]

Each shared pair's left catalog is indexed in process (the service's runtime over an embedded store, the default
bundle, its default settings); then a stream of by-id requests (k 10, Zipf popularity over the catalog, as
loadtests/locustfile.py's storefront draws them) with one write in 1/write-share requests: a new item (the pair's
right side: a listing of the same product from another shop, which should enter its answers), a new text of an
item, or a delete. Every answer is compared with the ranking computed anew on the store as it is then
(`Engine.similar_to_item`): top-10 agreement is the share of its items it holds; identical, the share of answers
with the same items in the same order. The old rule (every write of texts drops every answer) is replayed on the
same stream: its hits are the requests asked before with no write since.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench.catalog import zipf_ranks
from bench.data import SHARED_PAIRS, Product
from bench.report import BENCHMARKS, command, table, write_section, write_summary
from metricsearch.core.records import Item
from metricsearch.core.schemas import SimilarRequest
from metricsearch.service import Service, Settings

SECTION = "Answer cache under writes"
K = 10


def as_item(product: Product, prefix: str) -> Item:
    return Item(f"{prefix}{product.id}", product.title, product.description)


def outcome_of(service: Service) -> dict[str, float]:
    """The answer cache's lookups so far by outcome, as /metrics counts them."""
    registry = service.metrics.registry
    return {
        outcome: registry.get_sample_value("metricsearch_cache_lookups_total", {"cache": "answer", "outcome": outcome})
        or 0.0
        for outcome in ("hit", "checked", "miss")
    }


def run_pair(name: str, args: argparse.Namespace, workdir: Path) -> dict:
    left, right, _ = SHARED_PAIRS[name]()
    catalog = [as_item(p, "l") for p in left]
    arrivals = [as_item(p, "r") for p in right]
    service = Service(Settings(bundle_dir=args.bundle, data_dir=workdir / name))
    engine = service.live.engine
    try:
        engine.indexer.index(catalog)
        engine.statistics.current()
        engine.statistics.wait(timeout=600)
        rng = np.random.default_rng(args.seed)
        live = [item.id for item in catalog]
        popularity = zipf_ranks(rng, len(live), args.queries)
        order = rng.permutation(len(live))  # which items are popular: not the file's order
        ms: dict[str, list[float]] = {"hit": [], "checked": [], "miss": []}
        overlap, identical, old_hits, writes = [], 0, 0, Counter()
        asked_since_write: set[str] = set()
        every = max(1, round(1 / args.write_share))
        for n in tqdm(range(args.queries), desc=f"{name}: requests", disable=None):
            if n % every == every - 1:
                kind = rng.choice(["new", "new", "text", "delete"])
                if kind == "new" and arrivals:
                    item = arrivals.pop(int(rng.integers(len(arrivals))))
                    engine.indexer.index([item])
                    live.append(item.id)
                elif kind == "text":
                    target = engine.get(live[int(rng.integers(len(live)))])
                    donor = right[int(rng.integers(len(right)))]
                    engine.indexer.index([Item(target.id, target.title, donor.description)])
                else:
                    kind = "delete"
                    engine.indexer.delete(live.pop(int(rng.integers(len(live)))))
                writes[kind] += 1
                asked_since_write.clear()
                engine.statistics.wait(timeout=600)
            query = live[order[popularity[n]] % len(live)]
            before = outcome_of(service)
            started = time.perf_counter()
            answer = engine.answer(SimilarRequest(id=query, k=K))
            took = (time.perf_counter() - started) * 1000
            after = outcome_of(service)
            ms[next(kind for kind in ms if after[kind] > before[kind])].append(took)
            anew = engine.similar_to_item(query, K)
            ids, anew_ids = [m.id for m in answer], [m.id for m in anew]
            overlap.append(len(set(ids) & set(anew_ids)) / max(len(anew_ids), 1))
            identical += ids == anew_ids
            old_hits += query in asked_since_write
            asked_since_write.add(query)
    finally:
        service.live.close()
    served = args.queries
    return {
        "items": len(catalog),
        "writes": writes,
        "hit": len(ms["hit"]) / served,
        "checked": len(ms["checked"]) / served,
        "old": old_hits / served,
        "agreement": float(np.mean(overlap)),
        "identical": identical / served,
        "ms": {kind: statistics.median(values) if values else float("nan") for kind, values in ms.items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=5000)
    parser.add_argument("--write-share", type=float, default=0.02)
    parser.add_argument("--pairs", nargs="+", default=list(SHARED_PAIRS), choices=list(SHARED_PAIRS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bundle", type=Path, default=Settings().bundle_dir)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as folder:
        results = {name: run_pair(name, args, Path(folder)) for name in args.pairs}
    rows = []
    for name, r in results.items():
        writes = ", ".join(f"{n} {kind}" for kind, n in sorted(r["writes"].items()))
        rows.append(
            [
                f"{name} ({r['items']:,} items; {writes})",
                f"{r['hit'] + r['checked']:.3f} ({r['hit']:.3f} + {r['checked']:.3f})",
                f"{r['old']:.3f}",
                f"{r['agreement']:.4f}",
                f"{r['identical']:.3f}",
                " / ".join(f"{r['ms'][kind]:.2f}" for kind in ("hit", "checked", "miss")),
            ]
        )
    header = [
        "catalog (writes)",
        "answered from the cache (as cached + checked)",
        "old rule, same stream",
        "top-10 agreement with a ranking anew",
        "identical",
        "ms p50: cached / checked / ranked",
    ]
    body = table(header, rows)
    print(body)
    total = {key: np.mean([r[key] for r in results.values()]) for key in ("hit", "checked", "old", "agreement")}
    print(
        f"answered from the cache {total['hit'] + total['checked']:.3f} (old rule {total['old']:.3f}), "
        f"top-10 agreement {total['agreement']:.4f}, over {len(results)} catalogs"
    )
    argv_shown = argv if argv is not None else []
    write_section(
        BENCHMARKS,
        SECTION,
        f"Command: {command('bench.cache', argv_shown)}. {__doc__.split(chr(10) + chr(10), 2)[2].strip()}\n\n{body}",
    )
    write_summary(
        BENCHMARKS,
        SECTION,
        [
            (
                f"by id with {args.write_share:.0%} writes: answered from the answer cache",
                f"{total['hit'] + total['checked']:.3f}, top-10 agreement with a ranking anew {total['agreement']:.4f}",
                f"old rule (a write drops every answer): {total['old']:.3f}",
            )
        ],
    )


if __name__ == "__main__":
    main()
