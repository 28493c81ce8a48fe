"""Decision experiment (kept in git history, removed after its run): what a by-id request costs with 300 ANN
candidates instead of the default 100, in process (`Engine.answer`, caches off) at 100,000 synthetic items
(bench/catalog.py), the two pools alternating over the same requests in three rounds.

    .venv/bin/python -m bench.candidate_pool_cost [--items 100000]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.catalog import reused_store
from bench.report import ROOT
from metricsearch.core.schemas import SimilarRequest
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service

BUNDLE = ROOT / "bundles/all-minilm-l6-v2"
POOLS = (100, 300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--store-dir", type=Path, default=Path(tempfile.gettempdir()) / "bench-candidate-pool")
    args = parser.parse_args()
    ids = reused_store(BUNDLE, args.items, args.store_dir)
    settings = Settings(data_dir=args.store_dir, bundle_dir=BUNDLE, answer_cache_size=0, embedding_cache_size=0)
    engine = Service(settings).live.engine
    rng = random.Random(0)
    requests = [SimilarRequest(id=rng.choice(ids), k=10) for _ in range(600)]
    took: dict[int, list[float]] = {pool: [] for pool in POOLS}
    for _ in range(3):
        for pool in POOLS:
            engine.ranker.candidates_min = pool
            for request in requests[:50]:
                engine.answer(request)
            for request in requests[50:]:
                started = time.perf_counter()
                engine.answer(request)
                took[pool].append(time.perf_counter() - started)
    for pool in POOLS:
        p50 = np.median(took[pool]) * 1e3
        print(f"{args.items:,} items, {pool} candidates: by id, k 10, in process: p50 {p50:.2f} ms")


if __name__ == "__main__":
    main()
