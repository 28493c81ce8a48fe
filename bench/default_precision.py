"""Could the default bundle be reduced precision? The packaged model exported in fp32, bf16 and int8, the reduced
ones measured on (int8: calibrated on) generic listings (bench/calibration_catalog.py), as a default export must be
without the user's catalog; then, in one run, each one's agreement with fp32 on the real catalogs it never saw,
each catalog pair ranked through a real service (MRR, k = 100, candidates the other shop), and encoding speed on
this CPU (int8 and bf16 gain only with the instructions OpenVINO lists). Writes BENCHMARKS.md "Default precision".

    .venv/bin/python -m bench.default_precision [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import openvino

from bench import calibration_catalog
from bench.data import CATALOG_PAIRS, ROOT, write_catalog, write_catalog_match
from bench.encoder_bench import throughput, timed_batches
from bench.hybrid import CLI, metrics, served
from bench.report import machine, write_section
from metricsearch.core.bundle import load_bundle
from metricsearch.encoder import Encoder
from metricsearch.evaluation import read_task
from metricsearch.export import catalog_texts, measure_agreement

REDUCED = ("bf16", "int8")


def export(bundle: Path, precision: str, listings: Path) -> float:
    """Seconds `metricsearch export` took (the fp32 export included)."""
    extra = [] if precision == "fp32" else ["--precision", precision, "--catalog", str(listings)]
    started = time.perf_counter()
    subprocess.run([*CLI, "export", "--bundle", str(bundle), "--overwrite", *extra], check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (fastest kept)")
    parser.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    args = parser.parse_args()
    started, load = time.perf_counter(), os.getloadavg()[0]
    workdir = Path(tempfile.mkdtemp(prefix="default-precision-"))
    precisions = ("fp32", *REDUCED)
    try:
        folders = {p: workdir / p for p in precisions}
        listings = calibration_catalog.write(workdir / "listings.jsonl")
        seconds = {p: export(folders[p], p, listings) for p in precisions}
        encoders = {p: Encoder(load_bundle(folders[p])) for p in precisions}  # as the service runs each
        reference = Encoder(load_bundle(folders["fp32"]), "CPUExecutionProvider")
        agreements, mrr, all_groups = {}, {}, []
        for pair, read in CATALOG_PAIRS.items():
            left, right, gold = read()
            groups = catalog_texts(write_catalog(left + right, workdir / f"{pair}.csv"))
            all_groups += groups
            for p in REDUCED:
                agreements[(pair, p)] = measure_agreement(reference, encoders[p], groups, pair)
                print(pair, p, agreements[(pair, p)].model_dump(), flush=True)
            data = read_task("catalog-match", write_catalog_match(left, right, gold, workdir / pair))
            for p in precisions:
                mrr[(pair, p)] = metrics(served(folders[p], data, workdir), data.relevant)["MRR"]
                print(pair, p, "served MRR", round(mrr[(pair, p)], 4), flush=True)
        batches = timed_batches(all_groups, 12)
        batch_s = throughput({p: e.encode for p, e in encoders.items()}, batches, args.rounds)
        singles = [[t] for t in [b[len(b) // 2] for b in batches] * 4]  # one text a call: a text query
        single_s = throughput({p: e.encode for p, e in encoders.items()}, singles, args.rounds)
        recorded = {p: load_bundle(folders[p]).manifest.encoder.agreement for p in REDUCED}
        runtimes = {p: e.runtime.description for p, e in encoders.items()}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    texts = sum(len(b) for b in batches)
    capabilities = ", ".join(openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    pairs = list(CATALOG_PAIRS)
    header = (
        "| precision (runtime) | top-10 overlap with fp32: generic listings (recorded) | "
        + " | ".join(f"{p}: mean cosine / top-10 overlap" for p in pairs)
        + " | "
        + " | ".join(f"{p}: served MRR" for p in pairs)
        + " | sentences/s, batches of 32 | ms a single text | export s |"
    )
    rows = [header, "|---" * (5 + 2 * len(pairs)) + "|"]
    for p in precisions:
        shipped = "1 (reference)" if p == "fp32" else f"{recorded[p].neighbour_overlap:.3f}"
        fidelity = [
            "1 / 1"
            if p == "fp32"
            else f"{agreements[(q, p)].mean_cosine:.4f} / {agreements[(q, p)].neighbour_overlap:.3f}"
            for q in pairs
        ]
        rows.append(
            f"| {p} ({runtimes[p]}) | {shipped} | "
            + " | ".join(fidelity)
            + " | "
            + " | ".join(f"{mrr[(q, p)]:.4f}" for q in pairs)
            + f" | {texts / batch_s[p]:.0f} ({batch_s['fp32'] / batch_s[p]:.2f}x) | "
            f"{1000 * single_s[p] / len(singles):.2f} ({single_s['fp32'] / single_s[p]:.2f}x) | {seconds[p]:.0f} |"
        )
    verdicts = [
        f"{p}: {'faster' if batch_s[p] < batch_s['fp32'] and single_s[p] < single_s['fp32'] else 'not faster'} "
        f"than fp32 here, top-10 overlap on the catalog pairs "
        f"{min(agreements[(q, p)].neighbour_overlap for q in pairs):.3f} at worst (MS_MIN_NEIGHBOUR_OVERLAP: 0.95)"
        for p in REDUCED
    ]
    lines = [
        f"Machine: {machine()} (shared; 1-min load average {load:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end), CPython {platform.python_version()}; model: all-MiniLM-L6-v2 "
        f"(packaged); whole run {(time.perf_counter() - started) / 60:.0f} min.",
        f"OpenVINO CPU capabilities: {capabilities}.",
        "Command: `.venv/bin/python -m bench.default_precision` (one run).",
        "",
        "Exports: `metricsearch export --precision P --catalog LISTINGS`: 400 generic listings "
        "(bench/calibration_catalog.py), which calibrate int8 (NNCF) and on which the export records its "
        "agreement; each encoder as the service runs it (MS_ENCODER_BACKEND=auto). Agreement "
        "on a catalog pair: its titles and descriptions (both shops, at most 5,000 of each) encoded by fp32 and by "
        "the reduced precision; top-10 overlap: the share of each text's 10 nearest texts of its field (by fp32) "
        "the reduced encoder also ranks in its 10 nearest. Served: the pair through `POST /index` and `/similar` "
        f"by text (k = 100, the other shop), default fusion. Speed: {texts} of those texts, each batch's (or single "
        f"text's) fastest of {args.rounds} interleaved rounds, the runtimes' default threads.",
        "",
        *rows,
        "",
        "; ".join(verdicts) + ".",
    ]
    body = "\n".join(lines)
    print(body)
    write_section(args.out, "Default precision", body)
    print(f"wrote {args.out.name}: " + ", ".join(f"{p} {texts / batch_s[p]:.0f} sentences/s" for p in precisions))


if __name__ == "__main__":
    main()
