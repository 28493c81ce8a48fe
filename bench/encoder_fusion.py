"""Decision experiment (removed after its run): does onnxruntime's transformer optimizer (fused attention,
SkipLayerNormalization, BiasGelu: shared/MODELS.md) make the default bundle's fp32 encoder faster on this CPU? The
bundle's graph and a copy rewritten by `onnxruntime.transformers.optimizer.optimize_model` run as the service runs
them (`Encoder`, one intra-op thread; bulk as `POST /index` encodes, one call per core) on the same texts, in
alternating chunks (bench.encoder's `alternate`); their outputs are compared on the query texts.

    .venv/bin/python -m bench.encoder_fusion [--items 4000] [--queries 200] [--chunks 8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from onnxruntime.transformers.optimizer import optimize_model

from bench.encoder import INDEX_BATCH, alternate, catalog_texts
from bench.report import ROOT, table
from metricsearch.core.bundle import load_bundle
from metricsearch.encoder import Encoder

HEADS, HIDDEN = 12, 384
"""all-MiniLM-L6-v2's attention heads and width, which the optimizer cannot read from the traced graph."""


def fused_copy(bundle: Path, target: Path) -> dict[str, int]:
    """The bundle copied to `target` with its fp32 graph fused; the fused operators' counts."""
    shutil.copytree(bundle, target)
    model = optimize_model(str(bundle / "encoder.onnx"), model_type="bert", num_heads=HEADS, hidden_size=HIDDEN)
    model.save_model_to_file(str(target / "encoder.onnx"))
    return {op: n for op, n in model.get_fused_operator_statistics().items() if n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles/all-minilm-l6-v2")
    parser.add_argument("--items", type=int, default=4000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=8)
    args = parser.parse_args()
    threads = len(os.sched_getaffinity(0))
    bundle = args.bundle
    with tempfile.TemporaryDirectory(prefix="fusion-") as work:
        fused = fused_copy(bundle, Path(work) / "fused")
        encoders = {
            name: Encoder(load_bundle(path), "CPUExecutionProvider", 1, bulk_workers=threads, precision="fp32")
            for name, path in (("fp32 as exported", bundle), ("fp32 fused", Path(work) / "fused"))
        }
        rows = {
            name: (lambda text, e=e: e.encode([text]), lambda texts, e=e: e.encode_bulk(texts, INDEX_BATCH))
            for name, e in encoders.items()
        }
        count, texts = catalog_texts(args.items)
        rng = np.random.default_rng(0)
        titles = [t for t in texts if len(t.split()) <= 12]
        queries = [titles[i] for i in rng.choice(len(titles), args.queries, replace=False)]
        plain, other = (e.encode(queries) for e in encoders.values())
        cosine = float(np.min(np.sum(plain * other, axis=1)))
        for query, bulk in rows.values():
            query(queries[0]), bulk(texts[:256])
        query_s = alternate(rows, [queries[i::10] for i in range(10)], 0, rounds=3)
        bulk_s = alternate(rows, [texts[i :: args.chunks] for i in range(args.chunks)], 1, rounds=2)
    lines = [
        [name, f"{1000 * sum(query_s[name]) / len(queries):.2f}", f"{len(texts) / sum(bulk_s[name]):.0f}"]
        for name in rows
    ]
    print(f"fused operators: {fused}; lowest cosine between the two graphs' query vectors: {cosine:.6f}")
    print(f"{count} items, {len(texts)} texts; {len(queries)} queries; {threads} cores; {time.strftime('%F %H:%M')}")
    print(table(["graph", "ms a query text (1 thread)", "bulk texts/s (POST /index's calls)"], lines))


if __name__ == "__main__":
    main()
