"""Training benchmark: fine-tune MetricBERT (and RecoBERT) on the text of Abt-Buy (never on its gold matches),
export them, and score item-to-item retrieval through the service's encoder and scoring code, next to TF-IDF and the
off-the-shelf model measured in the same run; the paper's ablation switches at a fixed number of steps; SBERT siamese
fine-tuning on STS-B train, Spearman on test. Each part prints its table and rewrites its own "Training: ..."
section of BENCHMARKS.md (a part given 0 is skipped and its section kept).

    .venv/bin/python -m bench.train_bench [--budget-s 1800] [--main-steps 120] [--recobert-budget-s 600]
        [--ablation-steps 120] [--sts-budget-s 600] [--main-extra '...']

The catalog runs (main, the paper's positives, RecoBERT, ablations) are bounded in steps as well as in time, so a
busy machine changes their wall time, not what they learn.

Retrieval: each Abt product ranks all 1,092 Buy products; its gold match(es) are the hits (ties pessimistic).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr
from sklearn.feature_extraction.text import TfidfVectorizer

from bench.data import DATA, ROOT, Product, abt_buy
from bench.report import machine, write_section
from metricsearch.core import scoring
from metricsearch.core.bundle import load_bundle
from metricsearch.core.ranking import pessimistic_rank, ranking_metrics
from metricsearch.encoder import Encoder

DEFAULT_BUNDLE = ROOT / "bundles/all-minilm-l6-v2"


def write_training_catalog(abt: list[Product], buy: list[Product], path: Path) -> Path:
    """Both catalogs' texts as one unlabelled catalog (JSONL); no gold mapping goes in."""
    with path.open("w") as f:
        for prefix, products in (("abt", abt), ("buy", buy)):
            for p in products:
                f.write(json.dumps({"id": f"{prefix}-{p.id}", "title": p.title, "description": p.description}) + "\n")
    return path


def retrieval(scores: np.ndarray, abt: list[Product], buy: list[Product], gold: dict[str, set[str]]) -> dict:
    """Metrics from an (n_abt, n_buy) score matrix."""
    column = {p.id: j for j, p in enumerate(buy)}
    ranks = [
        pessimistic_rank(scores[i], [column[b] for b in gold[p.id] if b in column])
        for i, p in enumerate(abt)
        if p.id in gold
    ]
    return ranking_metrics(ranks, len(buy), ks=(1, 10))


def field_vectors(encoder: Encoder, products: list[Product]) -> np.ndarray:
    """(n, 2, dim) title and description unit vectors, zeros for a missing description (as the service stores)."""
    vectors = np.zeros((len(products), 2, encoder.dim), dtype=np.float32)
    vectors[:, 0] = encoder.encode([p.title for p in products])
    with_description = [i for i, p in enumerate(products) if p.description]
    vectors[with_description, 1] = encoder.encode([products[i].description for i in with_description])
    return vectors


def bundle_scores(bundle: Path, abt, buy, weights: tuple[float, float] | None = None) -> np.ndarray:
    """The service's rerank over every Buy product: pack, unpack, per-field scores with the bundle's metric."""
    loaded = load_bundle(bundle)
    manifest = loaded.manifest
    weights = weights or (manifest.weight("title"), manifest.weight("description"))
    encoder = Encoder(loaded)
    used = [w for w in weights if w > 0]
    queries, query_present = scoring.unpack(scoring.pack(field_vectors(encoder, abt)[:, : len(used)], used), len(used))
    cands, cands_present = scoring.unpack(scoring.pack(field_vectors(encoder, buy)[:, : len(used)], used), len(used))
    rows = []
    for q, present in zip(queries, query_present, strict=True):
        if manifest.metric == "recobert":
            rows.append(scoring.recobert_score(q, present, cands, cands_present, manifest.recobert_lambdas))
        else:
            distances = scoring.per_field_distances(q, present, cands, cands_present)
            rows.append(scoring.per_field_score(distances, used))
    return np.stack(rows)


def tfidf_scores(abt, buy) -> np.ndarray:
    text = [f"{p.title} {p.description}" for p in abt + buy]
    matrix = TfidfVectorizer(sublinear_tf=True).fit_transform(text)
    return (matrix[: len(abt)] @ matrix[len(abt) :].T).toarray()


def run(command: list[str]) -> float:
    """Run a CLI step (output streamed to the terminal), fail loudly; returns its seconds."""
    started = time.perf_counter()
    print("$", shlex.join(command), flush=True)
    subprocess.run(command, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return time.perf_counter() - started


CLI = [sys.executable, "-m", "metricsearch.cli"]
# What worked on Abt-Buy (docs/training.md, "What worked on Abt-Buy"): positives are title variants, no MLM (this
# base ships no MLM head), a larger batch for harder in-batch negatives, short sequences for faster steps, and no
# held-out split: validation on title variants reads 0.995 MRR by step 20 and cannot choose a checkpoint after it,
# so every run trains on every item and exports its final weights after a fixed number of steps.
MAIN_OPTIONS = "--mlm-weight 0 --title-variants 1 --lr 5e-5 --batch-size 32 --max-seq-length 64 --val-fraction 0"


def without(args: list[str], *options: str) -> list[str]:
    """`args` less each of `options` and its value (a run that sets it otherwise, or an objective that lacks it)."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        else:
            kept.append(arg)
    return kept


def train_and_export(
    name: str, workdir: Path, train_args: list[str], export_args: tuple[str, ...] = ()
) -> tuple[Path, str, float]:
    """Train, export the best checkpoint; the shown command says which step was best (step 0 = the base model:
    validation never improved, so the row measures the untrained model)."""
    out = workdir / f"run-{name}"
    command = [*CLI, "train", *train_args, "--out", str(out)]
    seconds = run(command)
    best = json.loads((out / "best" / "training.json").read_text())
    steps = max(json.loads(line).get("step", 0) for line in (out / "train_log.jsonl").read_text().splitlines())
    bundle = workdir / f"bundle-{name}"
    export = [*CLI, "export", "--model", str(out / "best"), "--bundle", str(bundle), "--name", f"abt-{name}"]
    run([*export, *export_args, "--overwrite"])
    shown = shlex.join(["metricsearch", "train", *[a if "/tmp" not in a else Path(a).name for a in train_args]])
    if export_args:
        shown += f"` + `metricsearch export {shlex.join(export_args)}"
    return bundle, f"`{shown}` (best: step {best['step']} of {steps})", seconds


def sts_pairs(split: str) -> list[tuple[str, str, float]]:
    pairs = []
    with (DATA / f"stsbenchmark/sts-{split}.csv").open(encoding="utf-8") as f:
        for line in f:
            cells = line.rstrip("\n").split("\t")
            if len(cells) >= 7:
                pairs.append((cells[5], cells[6], float(cells[4])))
    return pairs


def sts_spearman(bundle: Path, pairs) -> float:
    encoder = Encoder(load_bundle(bundle))
    a = encoder.encode([p[0] for p in pairs])
    b = encoder.encode([p[1] for p in pairs])
    return float(spearmanr(np.sum(a * b, axis=1), [p[2] for p in pairs]).statistic)


def row(name: str, m: dict, how: str) -> str:
    return f"| {name} | {m['MPR']:.3f} | {m['MRR']:.3f} | {m['HR@1']:.3f} | {m['HR@10']:.3f} | {how} |"


HEADER = ["| model | MPR | MRR | HR@1 | HR@10 | how |", "|---|---|---|---|---|---|"]
REFERENCE = "reference (the main run's options)"
ABLATIONS = {
    REFERENCE: [],
    "(i) random mining": ["--mining", "random"],
    "(ii) contrastive loss": ["--loss", "contrastive"],
    "(iii) cosine loss": ["--loss", "cosine"],
    "(iv) cosine distance": ["--distance", "cosine"],
    "(v) with MLM, weight 1 (the paper's loss; head-only warm-up for a third of the steps)": ["--mlm-weight", "1"],
}


def machine_line(command: str) -> str:
    return f"Machine: {machine()}, CPU only. Command: `{command}` (one run)."


def abt_buy_section(args, abt, buy, gold, workdir: Path, catalog: Path) -> str:
    """Baselines, the main MetricBERT run and RecoBERT on Abt-Buy, measured in one run."""
    rows = [
        row("TF-IDF (name + description)", retrieval(tfidf_scores(abt, buy), abt, buy, gold), "scikit-learn"),
        row(
            "off-the-shelf all-MiniLM-L6-v2, per-field angular (1, 1)",
            retrieval(bundle_scores(DEFAULT_BUNDLE, abt, buy), abt, buy, gold),
            "`metricsearch export`",
        ),
        row(
            "off-the-shelf all-MiniLM-L6-v2, title only",
            retrieval(bundle_scores(DEFAULT_BUNDLE, abt, buy, (1.0, 0.0)), abt, buy, gold),
            "`metricsearch export --description-weight 0`",
        ),
    ]
    print("\n".join(HEADER + rows), flush=True)
    extra = shlex.split(args.main_extra)
    base = ["--catalog", str(catalog), "--seed", str(args.seed), *extra]
    bounds = ["--time-budget-s", str(args.budget_s), "--max-steps", str(args.main_steps), "--eval-every", "20"]
    runs = (
        ("metricbert", "MetricBERT", []),
        ("metricbert-paper", "MetricBERT, the paper's positives (descriptions only)", ["--title-variants", "0"]),
    )
    for name, label, options in runs:
        train_args = ["--objective", "metricbert", *without(base, *options[:1]), *bounds, *options]
        bundle, shown, seconds = train_and_export(name, workdir, train_args)
        for inference, weights in (("per-field angular (1, 1)", None), ("title only", (1.0, 0.0))):
            metrics = retrieval(bundle_scores(bundle, abt, buy, weights), abt, buy, gold)
            rows.append(row(f"{label}, fine-tuned {seconds / 60:.0f} min, {inference}", metrics, shown))
        print("\n".join(HEADER + rows), flush=True)
    if args.recobert_budget_s:
        reco_args = ["--objective", "recobert", *without(base, "--title-variants"), *bounds[2:]]
        reco_args += ["--time-budget-s", str(args.recobert_budget_s)]
        bundle, shown, seconds = train_and_export("recobert", workdir, reco_args, ("--metric", "recobert"))
        metrics = retrieval(bundle_scores(bundle, abt, buy), abt, buy, gold)
        rows.append(row(f"RecoBERT fine-tuned {seconds / 60:.0f} min, 4-score rerank (1, 1, 1, 1)", metrics, shown))
        print("\n".join(HEADER + rows), flush=True)
    return "\n".join(
        [
            "Each Abt product ranks all Buy products; the gold match is the hit (MPR: 1 = top, 0 = bottom). Models are "
            "trained on the text of both catalogs only (never the gold matches), scored through the service's encoder "
            "and rerank code.",
            "",
            *HEADER,
            *rows,
        ]
    )


def ablation_section(args, abt, buy, gold, workdir: Path, catalog: Path) -> str:
    """The paper's Table 2 switches, each a fixed number of steps (so a busy machine changes only the wall time)."""
    base = ["--objective", "metricbert", "--catalog", str(catalog), "--seed", str(args.seed)]
    base += [*shlex.split(args.main_extra), "--max-steps", str(args.ablation_steps), "--eval-every", "20"]
    rows = []
    for n, (label, extra) in enumerate(ABLATIONS.items()):
        if label == REFERENCE and args.ablation_steps == args.main_steps:
            continue  # the main run's per-field row is this run (same options, steps and seed)
        if "--mlm-weight" in extra:
            extra = [*extra, "--mlm-warmup-steps", str(args.ablation_steps // 3)]
        bundle, shown, _ = train_and_export(f"ablation-{n}", workdir, [*without(base, *extra[::2]), *extra])
        rows.append(row(label, retrieval(bundle_scores(bundle, abt, buy), abt, buy, gold), shown))
        print("\n".join(HEADER + rows), flush=True)
    return "\n".join(
        [
            f"Each run changes one option of the main run ({args.main_extra}) and trains {args.ablation_steps} steps "
            "(the main run's per-field row is the reference when the steps are equal; its paper's-positives row is "
            "the ablation of --title-variants); per-field angular (1, 1) retrieval as above.",
            "",
            *HEADER,
            *rows,
        ]
    )


def sts_section(args, workdir: Path) -> str:
    test = sts_pairs("test")
    rows = [f"| off-the-shelf all-MiniLM-L6-v2 | {sts_spearman(DEFAULT_BUNDLE, test):.4f} | |"]
    pairs_file = workdir / "sts_train.tsv"
    with pairs_file.open("w") as f:
        f.write("text_a\ttext_b\tscore\n")
        for a, b, score in sts_pairs("train"):
            f.write(f"{a}\t{b}\t{score}\n")
    train_args = ["--objective", "sbert-siamese", "--pairs", str(pairs_file), "--seed", str(args.seed)]
    bundle, shown, seconds = train_and_export("sts", workdir, [*train_args, "--time-budget-s", str(args.sts_budget_s)])
    rows.append(
        f"| SBERT siamese (cosine) fine-tuned {seconds / 60:.0f} min | {sts_spearman(bundle, test):.4f} | {shown} |"
    )
    return "\n".join(["| model | Spearman | how |", "|---|---|---|", *rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget-s", type=int, default=1800, help="MetricBERT training time budget (0 = skip)")
    parser.add_argument("--main-steps", type=int, default=120, help="MetricBERT steps (within --budget-s)")
    parser.add_argument("--recobert-budget-s", type=int, default=600, help="RecoBERT budget on Abt-Buy (0 = skip)")
    parser.add_argument("--ablation-steps", type=int, default=120, help="steps of each ablation run (0 = skip)")
    parser.add_argument("--sts-budget-s", type=int, default=600, help="SBERT siamese budget on STS-B (0 = skip)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument(
        "--main-extra",
        default=MAIN_OPTIONS,
        help="train options of the catalog runs (main, RecoBERT and the ablation reference)",
    )
    args = parser.parse_args()
    command = (
        ".venv/bin/python -m bench.train_bench "
        f"--budget-s {args.budget_s} --main-steps {args.main_steps} --recobert-budget-s {args.recobert_budget_s} "
        f"--ablation-steps {args.ablation_steps} --sts-budget-s {args.sts_budget_s} --seed {args.seed} "
        f"--main-extra {shlex.quote(args.main_extra)}"
    )
    abt, buy, gold = abt_buy()
    with tempfile.TemporaryDirectory(prefix="ms-train-") as tmp:
        workdir = Path(tmp)
        catalog = write_training_catalog(abt, buy, workdir / "abt_buy_catalog.jsonl")
        parts = [
            (
                "Training: Abt-Buy retrieval",
                args.budget_s,
                lambda: abt_buy_section(args, abt, buy, gold, workdir, catalog),
            ),
            (
                "Training: ablations",
                args.ablation_steps,
                lambda: ablation_section(args, abt, buy, gold, workdir, catalog),
            ),
            ("Training: STS-benchmark", args.sts_budget_s, lambda: sts_section(args, workdir)),
        ]
        for title, enabled, measure in parts:
            if enabled:
                body = f"{machine_line(command)}\n\n{measure()}"
                print(body, flush=True)
                write_section(ROOT / "BENCHMARKS.md", title, body)


if __name__ == "__main__":
    main()
