"""Encoder throughput and fidelity: sentence-transformers PyTorch fp32, ONNX fp32 and every reduced-precision
candidate tried, on Abt-Buy's titles and descriptions, measured in one run; writes BENCHMARKS.md "Encoder".

Fidelity: each candidate encodes all titles and all non-empty descriptions; mean cosine to the ONNX fp32 vector of
the same text, and top-10 neighbour overlap within each field (export.quantize.neighbour_overlap). Throughput: the
same fixed batches of 32 catalog texts (a seeded sample, length-sorted as the service batches them, tokenization and
normalisation included) for every row, rounds interleaved across rows, each batch's fastest round kept, so a load
spike from another process on the machine hits all rows alike rather than one. Threads are pinned to --threads for
every runtime (torch, ONNX Runtime, OpenVINO).

    .venv/bin/python -m bench.encoder_bench [--threads 2] [--batches 12] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.report import machine, write_section
from bench.train_bench import abt_buy, write_training_catalog
from metricsearch.core.base_model import packaged_model_dir
from metricsearch.core.bundle import Bundle, load_bundle, write_manifest
from metricsearch.encoder import Encoder
from metricsearch.export import catalog_texts, export_bundle, neighbour_overlap

ROOT = Path(__file__).resolve().parents[1]
BATCH = 32
REFERENCE = "ONNX Runtime fp32 (`metricsearch export`)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads of every runtime")
    parser.add_argument("--batches", type=int, default=12, help="timed batches of 32 texts")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (fastest kept)")
    parser.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    args = parser.parse_args()
    started = time.perf_counter()
    load_before = os.getloadavg()[0]

    workdir = Path(tempfile.mkdtemp(prefix="encoder-bench-"))
    try:
        abt, buy, _ = abt_buy()
        catalog = write_training_catalog(abt, buy, workdir / "abt_buy.jsonl")
        groups = catalog_texts(catalog)
        rows = candidates(workdir, catalog, args.threads)
        batches = timed_batches(groups, args.batches)
        print(f"{len(rows)} encoders; fidelity on {sum(map(len, groups))} texts, throughput on {len(batches)} batches")

        encoded = {name: [encode(texts) for texts in groups] for name, encode in rows.items()}
        reference = encoded[REFERENCE]
        results = {}
        for name, vectors in encoded.items():
            cosine = np.concatenate([np.sum(r * v, axis=1) for r, v in zip(reference, vectors, strict=True)])
            overlap = np.concatenate([neighbour_overlap(r, v) for r, v in zip(reference, vectors, strict=True)])
            results[name] = {"cosine": cosine.mean(), "min_cosine": cosine.min(), "overlap": overlap.mean()}
            print(f"{name}: cosine {cosine.mean():.4f}, overlap {overlap.mean():.3f}", flush=True)
        for name, seconds in throughput(rows, batches, args.rounds).items():
            results[name]["rate"] = BATCH * len(batches) / seconds
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    load_after = os.getloadavg()[0]
    body = report(results, groups, batches, args, (load_before, load_after), time.perf_counter() - started)
    print(body)
    write_section(args.out, "Encoder", body)


def candidates(workdir: Path, catalog: Path, threads: int) -> dict[str, Callable[[list[str]], np.ndarray]]:
    """name -> encode(texts) (unit vectors); PyTorch first, the baseline of the last ratio column."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    model = SentenceTransformer(str(packaged_model_dir()), device="cpu", local_files_only=True)
    fp32 = load_bundle(export_bundle(None, workdir / "fp32"))
    source = fp32.encoder_path
    ffn_out = [
        n.name for n in _matmuls(source) if n.name.endswith("/output/dense/MatMul") and "attention" not in n.name
    ]
    dynamic = {"MatMulConstBOnly": True}

    def variant(name: str, build: Callable[[Path], None], precision: str = "int8", backend: str = "onnxruntime"):
        folder = workdir / name
        folder.mkdir()
        shutil.copy(fp32.tokenizer_path, folder / fp32.manifest.tokenizer)
        build(folder / "encoder.onnx")
        spec = fp32.manifest.encoder.model_copy(update={"precision": precision, "backend": backend})
        write_manifest(fp32.manifest.model_copy(update={"encoder": spec}), folder)
        return load_bundle(folder)

    def served(bundle: Bundle, backend: str = "auto"):  # auto: the bundle's own runtime, as the service picks it
        encoder = Encoder(bundle, "CPUExecutionProvider", threads, backend)
        return lambda texts: encoder.encode(texts, batch_size=BATCH)

    def export(precision: str) -> Bundle:
        return load_bundle(export_bundle(None, workdir / precision, precision=precision, catalog=catalog))

    int8 = export("int8")
    return {
        "sentence-transformers PyTorch fp32": lambda texts: model.encode(
            texts, batch_size=BATCH, convert_to_numpy=True, normalize_embeddings=True
        ),
        REFERENCE: served(fp32),
        "ONNX Runtime int8 `quantize_dynamic` (per-tensor)": served(
            variant("dyn", lambda o: quantize_dynamic(source, o, weight_type=QuantType.QInt8, extra_options=dynamic))
        ),
        "ONNX Runtime int8 `quantize_dynamic` per-channel": served(
            variant("dyn_pc", lambda o: quantize_dynamic(source, o, per_channel=True, extra_options=dynamic))
        ),
        "ONNX Runtime int8 per-channel, 6 FFN-output MatMuls kept fp32": served(
            variant(
                "dyn_pc_ffn",
                lambda o: quantize_dynamic(
                    source, o, per_channel=True, nodes_to_exclude=ffn_out, extra_options=dynamic
                ),
            )
        ),
        "ONNX Runtime int8 static QDQ per-channel, MinMax calibration on Abt-Buy": served(
            variant("static", lambda o: _static_int8(fp32, source, o, catalog))
        ),
        "ONNX Runtime, NNCF int8 graph (`--precision int8`)": served(int8, "onnxruntime"),
        "OpenVINO fp32": served(variant("ov_fp32", lambda o: shutil.copy(source, o), "fp32", "openvino")),
        "OpenVINO bf16 (`metricsearch export --precision bf16`)": served(export("bf16")),
        "OpenVINO, NNCF int8 (`metricsearch export --precision int8`)": served(int8),
    }


def _matmuls(path: Path) -> list:
    import onnx

    return [n for n in onnx.load(str(path), load_external_data=False).graph.node if n.op_type == "MatMul"]


def _static_int8(fp32: Bundle, source: Path, target: Path, catalog: Path, width: int = 64) -> None:
    """ONNX Runtime static QDQ quantization; its calibrators stack activations, so every batch is `width` tokens."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    from metricsearch.export import calibration_feeds

    encoder = Encoder(fp32, "CPUExecutionProvider")
    encoder.tokenizer.enable_padding(length=width, pad_id=encoder.tokenizer.token_to_id("[PAD]") or 0)
    encoder.tokenizer.enable_truncation(max_length=width)
    feeds = calibration_feeds(encoder, catalog_texts(catalog))

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter(feeds)

        def get_next(self) -> dict | None:
            return next(self.feeds, None)

    quantize_static(
        source, target, Reader(), quant_format=QuantFormat.QDQ, per_channel=True, op_types_to_quantize=["MatMul"],
        extra_options={"MatMulConstBOnly": True},
    )  # fmt: skip


def timed_batches(groups: list[list[str]], n: int) -> list[list[str]]:
    """`n` batches of 32 texts sampled from all titles and descriptions (seeded), sorted by length as served."""
    texts = [t for group in groups for t in group]
    rng = np.random.default_rng(0)
    sample = sorted((texts[i] for i in rng.choice(len(texts), n * BATCH, replace=False)), key=len)
    return [sample[i : i + BATCH] for i in range(0, len(sample), BATCH)]


def throughput(rows: dict, batches: list[list[str]], rounds: int) -> dict[str, float]:
    """Seconds for all batches per row: each batch's fastest of `rounds` interleaved rounds, summed."""
    best = {name: [float("inf")] * len(batches) for name in rows}
    for encode in rows.values():  # warm-up: first-call allocations and OpenVINO's per-shape compilation
        for texts in batches:
            encode(texts)
    for r in range(rounds):
        for name, encode in rows.items():
            for i, texts in enumerate(batches):
                tick = time.perf_counter()
                encode(texts)
                best[name][i] = min(best[name][i], time.perf_counter() - tick)
        print(f"round {r + 1}/{rounds} done", flush=True)
    return {name: sum(times) for name, times in best.items()}


def report(results: dict, groups, batches, args, loads: tuple[float, float], seconds: float) -> str:
    st, onnx = next(iter(results.values()))["rate"], results[REFERENCE]["rate"]
    lines = [
        "| encoder | sentences/s (batch 32) | x ONNX fp32 | x PyTorch fp32 | mean cosine | min cosine | "
        "top-10 overlap |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['rate']:.0f} | {r['rate'] / onnx:.2f} | {r['rate'] / st:.2f} | {r['cosine']:.4f} | "
            f"{r['min_cosine']:.4f} | {r['overlap']:.3f} |"
        )
    words = np.mean([len(t.split()) for b in batches for t in b])
    return "\n".join(
        [
            f"Machine: {machine()}, "
            f"CPython {platform.python_version()}, 1-min load average {loads[0]:.1f} at the start and "
            f"{loads[1]:.1f} at the end (other processes share the cores). Model: all-MiniLM-L6-v2 (packaged).",
            f"Command: `.venv/bin/python -m bench.encoder_bench --threads {args.threads} --batches {args.batches} "
            f"--rounds {args.rounds}` (one run, {seconds / 60:.0f} min).",
            "",
            f"Fidelity on Abt-Buy ({len(groups[0])} titles and {len(groups[1])} descriptions, vs ONNX fp32); "
            f"throughput on {len(batches)} fixed batches of 32 of those texts ({words:.0f} words a text on average), "
            f"each batch's fastest of {args.rounds} interleaved rounds, tokenization included; {args.threads} threads "
            "for every runtime.",
            "",
            *lines,
        ]
    )


if __name__ == "__main__":
    main()
