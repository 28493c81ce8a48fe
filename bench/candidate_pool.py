"""Decision experiment (kept in git history, removed after its run): how much of the top 10 that a large pool of
ANN candidates ranks does the default pool (MS_CANDIDATES_MIN=100) find, on each shared pair's two shops indexed
through POST /index with a `source` field and served by `metricsearch serve`: each left item by id over the right
shop (the evaluation's query), and every fifth right item by id unfiltered (a storefront's product page).

    .venv/bin/python -m bench.candidate_pool [--pools 1000,300,100,50]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from bench.data import SHARED_PAIRS
from bench.load import serving
from bench.report import ROOT
from metricsearch.client.http import Client

BUNDLE = ROOT / "bundles/all-minilm-l6-v2"


def answers(pair: str, pools: list[int], folder: Path) -> tuple[dict[int, dict], list, dict]:
    """pool -> query -> the top 10 ids; the left items and the gold."""
    left, right, gold = SHARED_PAIRS[pair]()
    data = folder / pair
    found: dict[int, dict] = {}
    for pool in pools:
        env = {"MS_ANSWER_CACHE_SIZE": "0", "MS_EMBEDDING_CACHE_SIZE": "0", "MS_CANDIDATES_MIN": str(pool)}
        with serving(BUNDLE, data, env) as service, Client(service.url, timeout_s=300) as client:
            if pool == pools[0]:
                shops = (("left", left), ("right", right))
                items = [
                    {"id": p.id, "title": p.title, "description": p.description, "metadata": {"source": s}}
                    for s, products in shops
                    for p in products
                ]
                for start in range(0, len(items), 500):
                    client.index(items[start : start + 500])
            top = {("left", p.id): client.similar(id=p.id, k=10, filter={"source": "right"}) for p in left}
            top |= {("right", p.id): client.similar(id=p.id, k=10) for p in right[::5]}
        found[pool] = {query: [r.id for r in response.results] for query, response in top.items()}
    return found, left, gold


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="1000,300,100,50", help="MS_CANDIDATES_MIN values, the reference first")
    pools = [int(p) for p in parser.parse_args().pools.split(",")]
    print("| pair | candidates | top-10 agreement, left by id over the right shop | unfiltered by id | MRR@10 |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for pair in SHARED_PAIRS:
            found, left, gold = answers(pair, pools, Path(folder))
            reference = found[pools[0]]
            for pool in pools:
                top = found[pool]
                agree = {
                    kind: np.mean([len(set(top[q]) & set(reference[q])) / 10 for q in reference if q[0] == kind])
                    for kind in ("left", "right")
                }
                ranks = [
                    next((1 / (n + 1) for n, i in enumerate(top[("left", p.id)]) if i in gold[p.id]), 0.0)
                    for p in left
                    if p.id in gold
                ]
                print(
                    f"| {pair} | {pool} | {agree['left']:.4f} | {agree['right']:.4f} | {np.mean(ranks):.4f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
