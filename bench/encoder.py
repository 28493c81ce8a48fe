"""The encoder chosen for the CPU: the default bundle's fp32 and int8 encoders beside plain sentence-transformers (the
packaged model) on the same texts, in one run. Text queries: one short text a call, one thread. Bulk: the titles and
descriptions of real items (Walmart-Amazon's right side, Buy, wine reviews) encoded as `POST /index` encodes them
(`Encoder.encode_bulk`, MS_INDEX_BATCH_SIZE texts a call, one call per core), in chunks that every contender encodes
in turn, the order rotated, so drift on a shared machine hits all alike; each bulk rate also as the model's
operations a second against the float32 matrix-multiply peak of the same cores, which shows how much room a faster
encoder has left on this CPU. Quality: each shared catalog pair ranked with fp32 and with int8 through
`metricsearch.evaluation` (the bundle's own rerank): auto may choose int8 only if every pair's MRR stays within 0.005
of fp32's. Writes BENCHMARKS.md "Encoder".

    nice -n 10 .venv/bin/python -m bench.encoder [--items 10000] [--queries 300] [--chunks 10] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from bench.data import abt_buy, dblp_scholar, walmart_amazon, wine_items, write_catalog_match
from bench.report import BENCHMARKS, command, table, write_section
from metricsearch.core.base_model import packaged_model_dir
from metricsearch.core.bundle import load_bundle
from metricsearch.encoder import INT8_CPU_FLAGS, Encoder, cpu_flags
from metricsearch.evaluation import BundleScorer, evaluate, read_task

MRR_TOLERANCE = 0.005
INDEX_BATCH = 64  # MS_INDEX_BATCH_SIZE's default
ST = "sentence-transformers (PyTorch fp32)"


PAIRS = {"Abt-Buy": abt_buy, "Walmart-Amazon": walmart_amazon, "DBLP-Scholar": dblp_scholar}


def catalog_texts(limit: int) -> tuple[int, list[str]]:
    """Items of Walmart-Amazon's right side, then Buy, then wine reviews, up to `limit`; their titles and non-empty
    descriptions, as indexing encodes them (one vector per field)."""
    products = walmart_amazon()[1] + abt_buy()[1]
    items = [(p.title, p.description) for p in products][:limit]
    items += [(w["title"], w["description"]) for w in wine_items(limit - len(items))] if len(items) < limit else []
    return len(items), [t for title, description in items for t in (title, description) if t.strip()]


def encoder_flop(texts: list[str], model: Path, tokenizer, max_length: int) -> float:
    """Floating-point operations a BERT encoder needs for `texts`, unpadded (2 a multiply-add): per layer, the four
    attention projections and the two feed-forward matrices for each token, and the attention scores and their
    weighted sum for each pair of a text's tokens. Written by hand: the count follows from the model's config.json."""
    config = json.loads((model / "config.json").read_text())
    hidden, inner, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    tokens = np.array([min(len(e.ids), max_length) for e in tokenizer.encode_batch(texts)], dtype=np.float64)
    per_token = 2 * (4 * hidden * hidden + 2 * hidden * inner)
    per_pair = 2 * 2 * hidden
    return float(layers * (per_token * tokens.sum() + per_pair * (tokens**2).sum()))


def sgemm_peak(threads: int, rounds: int = 3) -> float:
    """GFLOP/s of float32 matrix products on `threads` cores at once, one single-threaded product each (numpy's
    BLAS, which releases the GIL), the shape of a feed-forward layer over 1,024 tokens: the most an fp32 encoder
    that runs one call per core can reach here. The best of `rounds`."""
    a = np.random.default_rng(0).random((1024, 1024), dtype=np.float32)
    b = np.random.default_rng(1).random((1024, 1536), dtype=np.float32)
    products = 10
    flop = threads * products * 2 * a.shape[0] * a.shape[1] * b.shape[1]

    def work() -> None:
        for _ in range(products):
            a @ b

    best = 0.0
    with threadpool_limits(1):
        for _ in range(rounds):
            workers = [threading.Thread(target=work) for _ in range(threads)]
            started = time.perf_counter()
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            best = max(best, flop / (time.perf_counter() - started))
    return best / 1e9


def contenders(bundle: Path, model: Path, threads: int) -> dict[str, tuple[Callable, Callable]]:
    """name -> (encode one query text, encode a bulk of texts), as the service runs each precision."""
    import torch
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(model), device="cpu", local_files_only=True)

    def st_query(text: str) -> np.ndarray:
        torch.set_num_threads(1)
        return st.encode([text], normalize_embeddings=True)

    def st_bulk(texts: list[str]) -> np.ndarray:
        torch.set_num_threads(threads)
        return st.encode(texts, batch_size=32, normalize_embeddings=True)

    rows = {ST: (st_query, st_bulk)}
    loaded = load_bundle(bundle)
    for precision in loaded.manifest.encoder.precisions:
        # One intra-op thread and one bulk call per core, the service's defaults (MS_INTRA_OP_THREADS=1).
        encoder = Encoder(loaded, "CPUExecutionProvider", 1, bulk_workers=threads, precision=precision, min_overlap=0)
        label = f"metricsearch {precision} ({encoder.runtime.description})"
        rows[label] = (
            lambda text, e=encoder: e.encode([text]),
            lambda texts, e=encoder: e.encode_bulk(texts, INDEX_BATCH),
        )
    return rows


def alternate(rows: dict, chunks: list, call: int, rounds: int = 1) -> dict[str, list[float]]:
    """Seconds per chunk for each contender (`call`: 0 query, 1 bulk); each chunk run by every contender in turn,
    the order rotated chunk by chunk; with `rounds` > 1 each chunk's fastest round."""
    names = list(rows)
    seconds = {name: [float("inf")] * len(chunks) for name in names}
    for r in range(rounds):
        for i, chunk in enumerate(chunks):
            shift = (i + r) % len(names)
            for name in names[shift:] + names[:shift]:
                started = time.perf_counter()
                if call:
                    rows[name][1](chunk)
                else:
                    for text in chunk:
                        rows[name][0](text)
                seconds[name][i] = min(seconds[name][i], time.perf_counter() - started)
    return seconds


def quality(bundle: Path, folder: Path, threads: int) -> dict[str, dict[str, float]]:
    """pair -> precision -> MRR, each precision's encoder in place of the one auto chooses here."""
    loaded = load_bundle(bundle)
    results: dict[str, dict[str, float]] = {}
    for pair, read in PAIRS.items():
        data = read_task("catalog-match", write_catalog_match(*read(), folder / pair))
        for precision in loaded.manifest.encoder.precisions:
            scorer = BundleScorer(bundle, intra_op_threads=threads)
            scorer.encoder = Encoder(loaded, intra_op_threads=threads, precision=precision, min_overlap=0)
            results.setdefault(pair, {})[precision] = evaluate(data, scorer).metrics["MRR"]
            print(pair, precision, f"MRR {results[pair][precision]:.4f}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, help="bundle with fp32 and int8 (default: `metricsearch export`'s)")
    parser.add_argument("--model", type=Path, help="the bundle's sentence-transformers folder (default: packaged)")
    parser.add_argument("--items", type=int, default=10_000, help="catalog items whose texts are bulk-encoded")
    parser.add_argument("--chunks", type=int, default=10, help="bulk chunks, each encoded by every contender in turn")
    parser.add_argument("--queries", type=int, default=300, help="short texts encoded one a call")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="cores for bulk encoding")
    parser.add_argument("--no-quality", action="store_true", help="skip the MRR per catalog pair")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="encoder-bench-") as work:
        bundle = args.bundle
        if bundle is None:
            from metricsearch.export import export_bundle

            bundle = export_bundle(None, Path(work) / "bundle")
        auto = Encoder(load_bundle(bundle))
        model = args.model or packaged_model_dir()
        rows = contenders(bundle, model, args.threads)
        count, texts = catalog_texts(args.items)
        rng = np.random.default_rng(0)
        titles = [t for t in texts if len(t.split()) <= 12]
        queries = [titles[i] for i in rng.choice(len(titles), min(args.queries, len(titles)), replace=False)]
        print(f"{len(rows)} encoders; {len(queries)} queries; {count} items, {len(texts)} texts", flush=True)
        for query, bulk in rows.values():  # warm-up: first-call allocations, OpenVINO's per-shape compiling
            query(queries[0]), bulk(texts[:256])
        query_s = alternate(rows, [queries[i::10] for i in range(10)], 0, rounds=3)
        chunks = [texts[i :: args.chunks] for i in range(args.chunks)]
        bulk_s = alternate(rows, chunks, 1)
        flop = sum(encoder_flop(list(dict.fromkeys(chunk)), model, auto.tokenizer, auto.max_length) for chunk in chunks)
        peak = sgemm_peak(args.threads)
        mrr = {} if args.no_quality else quality(bundle, Path(work), args.threads)
    body = report(
        rows,
        query_s,
        bulk_s,
        mrr,
        auto,
        len(queries),
        count,
        len(texts),
        args,
        time.perf_counter() - started,
        flop / 1e9,
        peak,
    )
    print(body)
    write_section(BENCHMARKS, "Encoder", body)


def report(rows, query_s, bulk_s, mrr, auto, queries, items, texts, args, seconds, gflop, peak) -> str:
    st_query, st_bulk = sum(query_s[ST]), sum(bulk_s[ST])
    lines = []
    for name in rows:
        per_chunk = [s / b for s, b in zip(bulk_s[ST], bulk_s[name], strict=True)]
        lines.append(
            [
                name,
                f"{1000 * sum(query_s[name]) / queries:.2f}",
                f"{st_query / sum(query_s[name]):.2f}",
                f"{texts / sum(bulk_s[name]):.0f}",
                f"{st_bulk / sum(bulk_s[name]):.2f} ({min(per_chunk):.2f}-{max(per_chunk):.2f})",
                f"{gflop / sum(bulk_s[name]):.0f}",
                f"{gflop / sum(bulk_s[name]) / peak:.2f}",
            ]
        )
    speed = table(
        [
            "encoder",
            "ms a query text",
            "x sentence-transformers",
            "bulk texts/s",
            "x sentence-transformers (chunks)",
            "bulk GFLOP/s",
            "x the cores' sgemm peak",
        ],
        lines,
    )
    found = sorted(cpu_flags() & INT8_CPU_FLAGS) or ["none (AVX2: " + str("avx2" in cpu_flags()).lower() + ")"]
    parts = [
        f"Command: {command('bench.encoder', [f'--items {args.items}', f'--threads {args.threads}'])} "
        f"(one run, {seconds / 60:.0f} min, `nice -n 10`). CPU int8 instructions (/proc/cpuinfo): {', '.join(found)}. "
        f"Auto chose **{auto.precision}** here: {auto.choice.reason}.",
        "",
        f"Text queries: {queries} titles of at most 12 words, one a call, one thread, each its fastest of 3 rounds. "
        f"Bulk: {items} items ({texts} titles and descriptions) in {args.chunks} chunks, every contender on each chunk "
        f"in turn; metricsearch as `POST /index` encodes ({args.threads} calls of one thread, {INDEX_BATCH} texts "
        f"a call at most), sentence-transformers `encode(batch_size=32)` on {args.threads} threads; in brackets the "
        "lowest and highest ratio of a chunk. Bulk GFLOP/s: the model's operations on those texts, unpadded, "
        f"each distinct text of a chunk once ({gflop / 1000:.2f} TFLOP), over each contender's time, int8 counted "
        f"as the same operations; the cores' sgemm peak: {peak:.0f} GFLOP/s (numpy float32 products of a "
        f"feed-forward layer's shape on {args.threads} threads at once, one each). An fp32 encoder near 1.00 of it "
        "is bound by the cores' multiply-adds: only fewer operations (a smaller model, shorter texts) or int8's "
        "faster ones raise its rate.",
        "",
        speed,
    ]
    if mrr:
        quality_rows = [
            [pair, *(f"{m:.4f}" for m in by.values()), f"{by.get('int8', by['fp32']) - by['fp32']:+.4f}"]
            for pair, by in mrr.items()
        ]
        holds = all(abs(by.get("int8", by["fp32"]) - by["fp32"]) <= MRR_TOLERANCE for by in mrr.values())
        parts += [
            "",
            "Quality: each pair's left items rank all right items with the bundle's own rerank "
            "(`metricsearch.evaluation`, BundleScorer), once with each encoder.",
            "",
            table(["pair", *(f"MRR {p}" for p in next(iter(mrr.values()))), "int8 - fp32"], quality_rows),
            "",
            f"int8 {'keeps' if holds else 'does not keep'} every pair's MRR within {MRR_TOLERANCE} of fp32"
            + ("." if holds else ": auto must keep fp32."),
        ]
    return "\n".join(parts)


if __name__ == "__main__":
    main()
