"""Quality benchmark: every model on Abt-Buy (catalog-match), STS-B test (pairs) and wine halves, through the
evaluation harness (bundles scored by the service's own encoder and scoring code), next to TF-IDF, LDA and the
off-the-shelf model; each model trained here by `metricsearch train` within a small step budget, the command
recorded next to its row. Prints the tables and writes the "Quality" section of EVALUATION.md.

    .venv/bin/python -m bench.quality [--max-steps 60] [--halves-items 1500] [--second-order]

Training data never holds what is evaluated: Abt-Buy models see both catalogs' text but no gold match; wine
models are trained on the wines after the first --halves-items, whose descriptions are cut into halves for the
test; SBERT is fine-tuned on STS-B train and scored on test.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from bench.report import write_section
from bench.train_bench import abt_buy, sts_pairs, write_training_catalog
from evaluation.datasets import read_task
from evaluation.harness import ModelResult, evaluate
from evaluation.report import describe, markdown_table, write_run
from evaluation.scorers import BundleScorer, HttpScorer, LdaScorer, Scorer, TfidfScorer
from service.errors import MetricSearchError
from tests.service_process import ServiceProcess

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared/data/raw"
BASE_BUNDLE = ROOT / "bundles/all-minilm-l6-v2"
REPORT = ROOT / "EVALUATION.md"
HEADER = (
    "# Evaluation\n\nWhich model to serve, by evidence: every figure below was measured by `bench/quality.py` on the "
    "machine it names, through the evaluation harness (`metricsearch evaluate`, docs/evaluation.md).\n"
)
CLI = [sys.executable, "-m", "metricsearch.cli"]
TASK_TITLES = {
    "catalog-match": "Abt-Buy: each Abt product ranks all Buy products",
    "pairs": "STS-B test: Spearman and Pearson of the model's score vs the gold score",
    "halves": "Wine halves: the first half of a review ranks every second half",
}


@dataclass(frozen=True)
class Trained:
    """A bundle trained and exported here, and the command that trained it."""

    label: str
    bundle: Path
    command: str
    reused: bool = False


def run(command: list[str]) -> None:
    print("$", shlex.join(command), flush=True)
    subprocess.run(command, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def prepare(workdir: Path, halves_items: int) -> dict[str, Path]:
    """The evaluation and training files, from ../shared/data/raw in the formats docs/evaluation.md gives."""
    abt, buy, gold = abt_buy()
    folder = workdir / "abt_buy"
    folder.mkdir(exist_ok=True)
    for name, products in (("left", abt), ("right", buy)):
        with (folder / f"{name}.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["id", "title", "description"])
            writer.writerows((p.id, p.title, p.description) for p in products)
    with (folder / "gold.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["left_id", "right_id"])
        writer.writerows((a, b) for a, matches in sorted(gold.items()) for b in sorted(matches))

    paths = {"abt_buy": folder, "abt_buy_train": write_training_catalog(abt, buy, workdir / "abt_buy_train.jsonl")}
    for split in ("train", "test"):
        paths[f"sts_{split}"] = workdir / f"sts_{split}.tsv"
        with paths[f"sts_{split}"].open("w") as f:
            f.write("text_a\ttext_b\tscore\n")
            f.writelines(f"{a}\t{b}\t{score}\n" for a, b, score in sts_pairs(split))

    with (DATA / "wine_reviews_kaggle_130k_head/winemag-data-130k-v2.csv").open(newline="", encoding="utf-8") as f:
        # The file's last line is cut mid-row (SOURCE.md): a row without its trailing fields is left out.
        wines = [r for r in csv.DictReader(f) if r.get("winery") is not None and r["title"] and r["description"]]
    for name, rows in (("wine_halves", wines[:halves_items]), ("wine_train", wines[halves_items:])):
        paths[name] = workdir / f"{name}.jsonl"
        with paths[name].open("w") as f:
            f.writelines(
                json.dumps({"id": r["id"], "title": r["title"], "description": r["description"]}) + "\n" for r in rows
            )
    return paths


def train(name: str, label: str, workdir: Path, train_args: list[str], export_args: list[str]) -> Trained:
    """Train and export, or reuse what an earlier run left in `workdir` (its bundle and the command that made it)."""
    out, bundle, record = workdir / f"run-{name}", workdir / f"bundle-{name}", workdir / f"trained-{name}.json"
    if record.is_file() and (bundle / "bundle.json").is_file():
        print(f"reusing {bundle}", flush=True)
        return Trained(label, bundle, json.loads(record.read_text())["command"], reused=True)
    started = time.perf_counter()
    run([*CLI, "train", *train_args, "--out", str(out)])
    minutes = (time.perf_counter() - started) / 60
    run([*CLI, "export", "--model", str(out / "best"), "--out", str(bundle), "--name", name, *export_args])
    steps = json.loads((out / "best" / "training.json").read_text())["step"]
    shown = shlex.join(
        ["metricsearch", "train", *[Path(a).name if a.startswith(str(workdir)) else a for a in train_args]]
    )
    extra = f"; `metricsearch export {shlex.join(export_args)}`" if export_args else ""
    command = f"`{shown}` ({steps} steps, {minutes:.1f} min){extra}"
    record.write_text(json.dumps({"command": command}))
    return Trained(label, bundle, command)


def score(data, scorer: Scorer, how: str, label: str | None = None) -> ModelResult:
    """Evaluate under a row name (default: the scorer's own, read after scoring: LDA names its topic count)."""
    print(f"  {label or scorer.label} ...", flush=True)
    result = evaluate(data, scorer)
    return replace(result, model=label or scorer.label, how=how)


def served(trained: Trained) -> Scorer | str:
    """A mean-pooled bundle's served inference in-process; a second-order one (scored only by the service)
    through a service that serves it; a bundle nothing serves yet is returned as the reason."""
    if json.loads((trained.bundle / "bundle.json").read_text()).get("pooling", "mean") == "mean":
        return BundleScorer(trained.bundle)
    service = ServiceProcess(trained.bundle, trained.bundle.parent / f"data-{trained.bundle.name}", {})
    try:
        service.start()
    except RuntimeError as exc:
        return f"the service refuses it: {str(exc).strip().splitlines()[-1][:300]}"
    return _ServedOverHttp(service)


class _ServedOverHttp(HttpScorer):
    """HttpScorer that stops its service when done."""

    def __init__(self, service: ServiceProcess) -> None:
        super().__init__(service.url)
        self.service = service

    def close(self) -> None:
        super().close()
        self.service.stop()


def second_order(trained: dict[str, Trained], workdir: Path, train_args: list[str]) -> list[str]:
    """MetricBERT with covariance and rank-5 SVD pooling (keys 'cov', 'svd'), where the trainer has them; the
    reasons for what could not be trained."""
    help_text = subprocess.run([*CLI, "train", "--help"], capture_output=True, text=True).stdout
    if "--pooling" not in help_text:
        return ["Second-order variants: skipped, `metricsearch train` has no `--pooling` option yet."]
    skipped = []
    for pooling in (["cov"], ["svd", "--rank-k", "5"]):
        key = pooling[0]
        args = ["--objective", "metricbert", *train_args, "--pooling", *pooling]
        try:
            trained[key] = train(
                f"metricbert-abt-{key}",
                f"MetricBERT (Abt-Buy text), {key} pooling",
                workdir,
                args,
                ["--pooling", *pooling],
            )
        except subprocess.CalledProcessError as exc:
            skipped.append(f"MetricBERT `--pooling {' '.join(pooling)}`: training or export failed ({exc}).")
    return skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-steps", type=int, default=60, help="optimizer steps of each training run")
    parser.add_argument("--time-budget-s", type=int, default=420, help="cap of each training run, seconds")
    parser.add_argument("--halves-items", type=int, default=1500, help="wines whose halves are evaluated")
    parser.add_argument("--second-order", action="store_true", help="also MetricBERT with cov and svd pooling")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--out", type=Path, default=ROOT / "build/quality", help="results.json and plots per task")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep data, runs and bundles here (default: a temporary folder); a model whose "
        "bundle and trained-<name>.json are already there is not trained again",
    )
    args = parser.parse_args()
    load = os.getloadavg()
    started = time.perf_counter()

    with tempfile.TemporaryDirectory(prefix="ms-quality-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        paths = prepare(workdir, args.halves_items)
        budget = ["--max-steps", str(args.max_steps), "--time-budget-s", str(args.time_budget_s)]
        common = [*budget, "--val-fraction", "0", "--mlm-weight", "0", "--seed", str(args.seed)]
        trained: dict[str, Trained] = {}
        for domain, label, catalog in (
            ("abt", "Abt-Buy text", paths["abt_buy_train"]),
            ("wine", "wine reviews", paths["wine_train"]),
        ):
            for objective, name, export_args in (
                ("metricbert", "MetricBERT", []),
                ("recobert", "RecoBERT", ["--metric", "recobert"]),
            ):
                train_args = ["--objective", objective, "--catalog", str(catalog), *common]
                key = f"{objective}-{domain}"
                trained[key] = train(key, f"{name} ({label})", workdir, train_args, export_args)
        sbert_args = ["--objective", "sbert-siamese", "--pairs", str(paths["sts_train"]), *budget]
        sbert_args += ["--val-fraction", "0", "--seed", str(args.seed)]
        trained["sbert"] = train("sbert", "SBERT siamese (STS-B train)", workdir, sbert_args, [])

        skipped: list[str] = []
        if args.second_order:
            skipped += second_order(trained, workdir, [*common, "--catalog", str(paths["abt_buy_train"])])

        plan = {
            "catalog-match": (paths["abt_buy"], ["metricbert-abt", "recobert-abt", "sbert", "cov", "svd"]),
            "pairs": (paths["sts_test"], ["sbert", "metricbert-abt", "recobert-abt"]),
            "halves": (paths["wine_halves"], ["metricbert-wine", "recobert-wine", "sbert"]),
        }
        sections = []
        for task, (path, keys) in plan.items():
            data = read_task(task, path)
            print(f"{task}: {describe(data)}", flush=True)
            results = [
                score(data, TfidfScorer(), "scikit-learn, sublinear tf, cosine", "TF-IDF"),
                score(data, LdaScorer(seed=args.seed), "scikit-learn; topic count by UMass coherence of 10, 25, 50"),
                score(
                    data,
                    BundleScorer(BASE_BUNDLE, "mean"),
                    "`metricsearch export`; title + description as one text, cosine",
                    "off-the-shelf all-MiniLM-L6-v2, mean pooling",
                ),
            ]
            if task == "catalog-match":  # elsewhere an item is one text: per-field inference equals mean pooling
                results.append(
                    score(
                        data,
                        BundleScorer(BASE_BUNDLE, "metric-two"),
                        "`metricsearch export`; title and description apart, angular (1, 1)",
                        "off-the-shelf, per-field angular (BERT Metric_two)",
                    )
                )
            for key in (k for k in keys if k in trained):
                model = trained[key]
                scorer = served(model)
                if isinstance(scorer, str):
                    skipped.append(f"{model.label} on {task}: not evaluated: {scorer}")
                    continue
                try:
                    results.append(score(data, scorer, model.command, f"{model.label}, served: {_served_name(scorer)}"))
                except MetricSearchError as exc:
                    skipped.append(f"{model.label} on {task}: not evaluated: {exc}")
                finally:
                    if isinstance(scorer, HttpScorer):
                        scorer.close()
            write_run(args.out / task, data, results, f"bench/quality.py ({task})")
            table = markdown_table([r.to_json() for r in results], data.is_pairs)
            print(table, flush=True)
            summary = describe(data).replace(str(workdir) + "/", "")
            sections.append(f"### {TASK_TITLES[task]}\n\n{summary}.\n\n{table}")

    minutes = (time.perf_counter() - started) / 60
    reused = [t.bundle.name for t in trained.values() if t.reused]
    training = f"models reused from an earlier run's --workdir: {', '.join(reused)}" if reused else "training included"
    command = (
        f".venv/bin/python -m bench.quality --max-steps {args.max_steps} --time-budget-s {args.time_budget_s} "
        f"--halves-items {args.halves_items} --seed {args.seed}" + (" --second-order" if args.second_order else "")
    )
    body = "\n\n".join(
        [
            f"Machine: {platform.machine()}, {os.cpu_count()} cores, CPU only, shared: load average "
            f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min) at the start. Command: `{command}` "
            f"(one run, {minutes:.0f} min in all, {training}). Every trained model gets at most "
            f"{args.max_steps} optimizer steps of 16 examples (or {args.time_budget_s} s): a small budget, so the "
            "rows say what a short fine-tune buys, not what the method can reach. MLM is off (`--mlm-weight 0`, "
            "docs/training.md says why); no validation split (`--val-fraction 0`): each row is the final weights.",
            "Metrics (docs/evaluation.md): ranks are 1-based with ties broken pessimistically; MPR 1 = top, 0 = "
            "bottom; HR@k = share of queries whose match is in the top k; P@10 and NDCG@10 count every relevant "
            "item. Results, ranks and plots (rank histogram, HR@k curve) are written to `build/quality/<task>/`; "
            "compare them with `metricsearch evaluate --compare build/quality/catalog-match ...`.",
            *sections,
            *(["### Not measured\n\n" + "\n".join(f"- {s}" for s in skipped)] if skipped else []),
        ]
    )
    print(body)
    if not REPORT.exists():
        REPORT.write_text(HEADER)
    write_section(REPORT, "Quality", body)


def _served_name(scorer: Scorer) -> str:
    if isinstance(scorer, BundleScorer):
        return scorer.label.split("served: ", 1)[-1]
    return "over HTTP (top 100)"


if __name__ == "__main__":
    main()
