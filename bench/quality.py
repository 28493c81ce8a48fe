"""Quality benchmark: every model on Abt-Buy (catalog-match), STS-B test (pairs) and wine halves, through the
evaluation harness (bundles scored by the service's own encoder and scoring code), next to TF-IDF, LDA and the
off-the-shelf model; each model trained here by `metricsearch train` within a small step budget, the command
recorded next to its row. Prints the tables and rewrites EVALUATION.md's "Quality" section; with --second-order also
its "Quality: second-order pooling" section, and with --only-second-order that section alone (bench/report.py
rewrites one section and keeps the rest of the file).

    .venv/bin/python -m bench.quality [--max-steps 60] [--halves-items 1500] [--second-order | --only-second-order]

Training data never holds what is evaluated: Abt-Buy models see both catalogs' text but no gold match; wine
models are trained on the wines after the first --halves-items, whose descriptions are cut into halves for the
test; SBERT is fine-tuned on STS-B train and scored on test.

Second order (issue 4 item 5, issue 5 item 5): MetricBERT fine-tuned with mean, cov, svd k = 1 and svd k = 5 pooling
within the same budget on each domain's text, and the cov model truncated to k = 1 and 5 after training (`metricsearch
export --pooling cov --rank-k K`), scored in-process over every candidate by the service's S_F rerank on Abt-Buy and
wine halves. A smoke run of that path (a tiny model, a few items: about 4 min on 2 shared cores, 20 short
processes that each import torch), writing to a copy:

    .venv/bin/python -c "from tests.tiny_model import build_tiny_model; build_tiny_model('/tmp/tiny')"
    cp EVALUATION.md /tmp/EVALUATION.md
    .venv/bin/python -m bench.quality --only-second-order --base-model /tmp/tiny --max-steps 1 --halves-items 20 \
        --abt-items 20 --wine-train-items 64 --report /tmp/EVALUATION.md --out /tmp/quality-smoke
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from bench.data import DATA, abt_buy, write_catalog_match
from bench.report import machine, shown_path, write_section
from bench.train_bench import MAIN_OPTIONS, sts_pairs, without, write_training_catalog
from metricsearch.core.errors import MetricSearchError
from metricsearch.core.second_order import FULL_RANK_CAP
from metricsearch.evaluation import (
    BundleScorer,
    LdaScorer,
    ModelResult,
    Scorer,
    TfidfScorer,
    describe,
    evaluate,
    markdown_table,
    read_task,
    write_run,
)

ROOT = Path(__file__).resolve().parents[1]
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
SECOND_ORDER_TITLE = "Quality: second-order pooling"
# (key, row label, `metricsearch train` and `export` options): the same model trained with each pooling.
POOLINGS = (
    ("mean", "mean pooling", []),
    ("cov", "cov pooling", ["--pooling", "cov"]),
    ("svd1", "svd k = 1 pooling", ["--pooling", "svd", "--rank-k", "1"]),
    ("svd5", "svd k = 5 pooling", ["--pooling", "svd", "--rank-k", "5"]),
)
TRUNCATIONS = (1, 5)  # ranks the cov model is cut to after training (the paper's P_cov(., k))
# (domain, label, training catalog, task, evaluation data) of the second-order comparison: the long-ish texts.
SECOND_ORDER_DOMAINS = (
    ("abt", "Abt-Buy text", "abt_buy_train", "catalog-match", "abt_buy"),
    ("wine", "wine reviews", "wine_train", "halves", "wine_halves"),
)


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


def prepare(
    workdir: Path, halves_items: int, abt_items: int | None = None, wine_train_items: int | None = None
) -> dict[str, Path]:
    """The evaluation and training files, from ../shared/data/raw in the formats docs/evaluation.md gives.
    `abt_items` keeps only the first Abt products with a gold match and their Buy matches, `wine_train_items` only
    the first training wines: smaller runs (smoke tests), not comparable with full ones."""
    abt, buy, gold = abt_buy()
    if abt_items:
        abt = [p for p in abt if p.id in gold][:abt_items]
        gold = {p.id: gold[p.id] for p in abt}
        buy = [p for p in buy if any(p.id in matches for matches in gold.values())]
    folder = write_catalog_match(abt, buy, gold, workdir / "abt_buy")

    paths = {"abt_buy": folder, "abt_buy_train": write_training_catalog(abt, buy, workdir / "abt_buy_train.jsonl")}
    for split in ("train", "test"):
        paths[f"sts_{split}"] = workdir / f"sts_{split}.tsv"
        with paths[f"sts_{split}"].open("w") as f:
            f.write("text_a\ttext_b\tscore\n")
            f.writelines(f"{a}\t{b}\t{score}\n" for a, b, score in sts_pairs(split))

    with (DATA / "wine_reviews_kaggle_130k_head/winemag-data-130k-v2.csv").open(newline="", encoding="utf-8") as f:
        # The file's last line is cut mid-row (SOURCE.md): a row without its trailing fields is left out.
        wines = [r for r in csv.DictReader(f) if r.get("winery") is not None and r["title"] and r["description"]]
    train_wines = wines[halves_items:][:wine_train_items]
    for name, rows in (("wine_halves", wines[:halves_items]), ("wine_train", train_wines)):
        paths[name] = workdir / f"{name}.jsonl"
        with paths[name].open("w") as f:
            f.writelines(
                json.dumps({"id": r["id"], "title": r["title"], "description": r["description"]}) + "\n" for r in rows
            )
    return paths


def export(model: Path, bundle: Path, name: str, export_args: list[str]) -> None:
    run([*CLI, "export", "--model", str(model), "--bundle", str(bundle), "--name", name, *export_args])


def train(name: str, label: str, workdir: Path, train_args: list[str], export_args: list[str]) -> Trained:
    """Train and export, or reuse what an earlier run left in `workdir` (its bundle and the command that made it)."""
    out, bundle, record = workdir / f"run-{name}", workdir / f"bundle-{name}", workdir / f"trained-{name}.json"
    if record.is_file() and (bundle / "bundle.json").is_file():
        print(f"reusing {bundle}", flush=True)
        return Trained(label, bundle, json.loads(record.read_text())["command"], reused=True)
    started = time.perf_counter()
    run([*CLI, "train", *train_args, "--out", str(out)])
    minutes = (time.perf_counter() - started) / 60
    export(out / "best", bundle, name, export_args)
    steps = json.loads((out / "best" / "training.json").read_text())["step"]
    shown = shlex.join(
        ["metricsearch", "train", *[Path(a).name if a.startswith(str(workdir)) else a for a in train_args]]
    )
    extra = f"; `metricsearch export {shlex.join(export_args)}`" if export_args else ""
    command = f"`{shown}` ({steps} steps, {minutes:.1f} min){extra}"
    record.write_text(json.dumps({"command": command}))
    return Trained(label, bundle, command)


def truncate(workdir: Path, cov_name: str, label: str, rank: int) -> Trained:
    """The cov model `cov_name` trained in `workdir`, exported with its factors cut to `rank` rows: no training."""
    name = f"{cov_name}-k{rank}"
    bundle = workdir / f"bundle-{name}"
    export_args = ["--pooling", "cov", "--rank-k", str(rank)]
    reused = (bundle / "bundle.json").is_file()
    if not reused:
        export(workdir / f"run-{cov_name}" / "best", bundle, name, export_args)
    return Trained(label, bundle, f"the cov row's model; `metricsearch export {shlex.join(export_args)}`", reused)


def score(data, scorer: Scorer, how: str, label: str | None = None) -> ModelResult:
    """Evaluate under a row name (default: the scorer's own, read after scoring: LDA names its topic count)."""
    print(f"  {label or scorer.label} ...", flush=True)
    result = evaluate(data, scorer)
    return replace(result, model=label or scorer.label, how=how)


def score_trained(data, models: list[Trained], task: str, skipped: list[str]) -> list[ModelResult]:
    """Each bundle's served inference in-process (its manifest's rerank over every candidate); a bundle that cannot
    be scored is added to `skipped` with the reason."""
    results = []
    for model in models:
        try:
            scorer = BundleScorer(model.bundle)
            served = scorer.label.split("served: ", 1)[-1]
            results.append(score(data, scorer, model.command, f"{model.label}, served: {served}"))
        except MetricSearchError as exc:
            skipped.append(f"{model.label} on {task}: not evaluated: {exc}")
    return results


def task_section(data, results: list[ModelResult], out: Path, workdir: Path) -> str:
    """Write the run's results and plots to `out`; the task's markdown subsection."""
    write_run(out, data, results, f"bench/quality.py ({data.task})")
    table = markdown_table([r.to_json() for r in results], data.is_pairs)
    print(table, flush=True)
    summary = describe(data).replace(str(workdir) + "/", "")
    return f"### {TASK_TITLES[data.task]}\n\n{summary}.\n\n{table}"


def quality_sections(args, paths: dict[str, Path], workdir: Path, common: list[str], trained: dict[str, Trained]):
    """Train the main models (into `trained`) and score every task: (subsections, what was not measured, the
    models in them)."""
    budget = ["--max-steps", str(args.max_steps), "--time-budget-s", str(args.time_budget_s)]
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
    recipe = without(common, "--max-steps", "--time-budget-s", "--val-fraction", "--mlm-weight")
    # capped at the 30 minutes bench/train_bench.py gives its main run
    recipe += [*shlex.split(MAIN_OPTIONS), "--max-steps", str(args.recipe_steps), "--time-budget-s", "1800"]
    trained["metricbert-abt-variants"] = train(
        "metricbert-abt-variants",
        "MetricBERT title variants (Abt-Buy text)",
        workdir,
        ["--objective", "metricbert", "--catalog", str(paths["abt_buy_train"]), *recipe],
        [],
    )
    sbert_args = ["--objective", "sbert-siamese", "--pairs", str(paths["sts_train"]), *budget]
    sbert_args += ["--val-fraction", "0", "--seed", str(args.seed), *base_option(args)]
    trained["sbert"] = train("sbert", "SBERT siamese (STS-B train)", workdir, sbert_args, [])

    plan = {
        "catalog-match": (paths["abt_buy"], ["metricbert-abt-variants", "metricbert-abt", "recobert-abt", "sbert"]),
        "pairs": (paths["sts_test"], ["sbert", "metricbert-abt-variants", "metricbert-abt", "recobert-abt"]),
        "halves": (paths["wine_halves"], ["metricbert-wine", "recobert-wine", "sbert"]),
    }
    sections: list[str] = []
    skipped: list[str] = []
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
        results += score_trained(data, [trained[k] for k in keys], task, skipped)
        sections.append(task_section(data, results, args.out / task, workdir))
    return sections, skipped, list(trained.values())


def second_order_sections(args, paths: dict[str, Path], workdir: Path, common: list[str], trained: dict[str, Trained]):
    """MetricBERT with each pooling of POOLINGS and the cov model cut to TRUNCATIONS, per domain, next to TF-IDF;
    the mean model is the Quality section's (taken from `trained`, or from `workdir` when an earlier run left it):
    (subsections, what was not measured, the models in them)."""
    sections = [
        'Mean, cov and svd pooling of the same model after the same budget (docs/training.md, "Pooling"), trained '
        "on each domain's text as in the Quality section (the mean row is its MetricBERT), and the cov model cut to "
        "k = 1 and 5 rows after training (`metricsearch export --pooling cov --rank-k K`, docs/bundle.md). Every row "
        "is scored in-process by the service's encoder and rerank over every candidate, not the service's top 100: "
        f"per-field S_F of the factors for cov and svd (cov keeps at most FULL_RANK_CAP = {FULL_RANK_CAP} rows), "
        "per-field angular for mean. TF-IDF is there for scale."
    ]
    skipped: list[str] = []
    models: list[Trained] = []
    for domain, label, catalog, task, data_path in SECOND_ORDER_DOMAINS:
        domain_models = []
        for key, pooling_label, pooling in POOLINGS:
            name = f"metricbert-{domain}" if key == "mean" else f"metricbert-{domain}-{key}"
            row_label = f"MetricBERT ({label}), {pooling_label}"
            train_args = ["--objective", "metricbert", "--catalog", str(paths[catalog]), *common, *pooling]
            try:
                trained[name] = trained.get(name) or train(name, row_label, workdir, train_args, pooling)
                domain_models.append(replace(trained[name], label=row_label))
                if key == "cov":
                    domain_models += [
                        truncate(workdir, name, f"MetricBERT ({label}), cov pooling cut to k = {k} after training", k)
                        for k in TRUNCATIONS
                    ]
            except subprocess.CalledProcessError as exc:
                skipped.append(f"MetricBERT ({label}) `{shlex.join(pooling)}`: training or export failed ({exc}).")
        data = read_task(task, paths[data_path])
        print(f"{task}: {describe(data)}", flush=True)
        results = [score(data, TfidfScorer(), "scikit-learn, sublinear tf, cosine", "TF-IDF")]
        results += score_trained(data, domain_models, task, skipped)
        sections.append(task_section(data, results, args.out / f"second-order-{task}", workdir))
        models += domain_models
    return sections, skipped, models


def base_option(args) -> list[str]:
    return ["--base", str(args.base_model)] if args.base_model else []


def preamble(args, command: str, load: tuple[float, ...], minutes: float, models: list[Trained]) -> list[str]:
    """The paragraphs every section opens with: machine, command, budget, how to read the metrics."""
    reused = [t.bundle.name for t in models if t.reused]
    training = f"models reused from an earlier run's --workdir: {', '.join(reused)}" if reused else "training included"
    return [
        f"Machine: {machine()}, CPU only, shared: load average "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min) at the start. Command: `{command}` "
        f"(one run, {minutes:.0f} min in all, {training}). Every trained model gets at most "
        f"{args.max_steps} optimizer steps of 16 examples (or {args.time_budget_s} s): a small budget, so the "
        "rows say what a short fine-tune buys, not what the method can reach. MLM is off (`--mlm-weight 0`, "
        "docs/training.md says why); no validation split (`--val-fraction 0`): each row is the final weights. "
        'The exception is the title-variant MetricBERT: the recipe of docs/training.md ("What worked on '
        f'Abt-Buy"), {args.recipe_steps} steps of 32, its command in its row.',
        "Metrics (docs/evaluation.md): ranks are 1-based with ties broken pessimistically; MPR 1 = top, 0 = "
        "bottom; HR@k = share of queries whose match is in the top k; P@10 and NDCG@10 count every relevant "
        "item. Results, ranks and plots (rank histogram, HR@k curve) are written to a folder per task under "
        f"`{shown_path(args.out)}/`; compare runs with `metricsearch evaluate --compare FOLDER --compare FOLDER`.",
    ]


def not_measured(skipped: list[str]) -> list[str]:
    return ["### Not measured\n\n" + "\n".join(f"- {s}" for s in skipped)] if skipped else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-steps", type=int, default=60, help="optimizer steps of each training run")
    parser.add_argument("--time-budget-s", type=int, default=420, help="cap of each training run, seconds")
    parser.add_argument("--halves-items", type=int, default=1500, help="wines whose halves are evaluated")
    parser.add_argument(
        "--recipe-steps",
        type=int,
        default=120,
        help="optimizer steps of the title-variant MetricBERT (the bench/train_bench.py main recipe)",
    )
    parser.add_argument(
        "--second-order",
        action="store_true",
        help=f"also the {SECOND_ORDER_TITLE!r} section: MetricBERT with mean, cov, svd k = 1 and k = 5 pooling "
        "and the cov model cut to k = 1, 5 after training, on Abt-Buy and wine halves",
    )
    parser.add_argument(
        "--only-second-order",
        action="store_true",
        help="that section alone: the other sections of the report, and their measured rows, stay as they are",
    )
    parser.add_argument(
        "--base-model",
        type=Path,
        help="sentence-transformers folder every model is fine-tuned from (default: the packaged all-MiniLM-L6-v2; "
        "a tiny one makes a smoke run); the Quality section's off-the-shelf rows read bundles/all-minilm-l6-v2 still",
    )
    parser.add_argument("--abt-items", type=int, help="only the first N Abt products with a match (smoke runs)")
    parser.add_argument("--wine-train-items", type=int, help="only the first N training wines (smoke runs)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--out", type=Path, default=ROOT / "build/quality", help="results.json and plots per task")
    parser.add_argument("--report", type=Path, default=REPORT, help="the markdown report whose sections are rewritten")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep data, runs and bundles here (default: a temporary folder); a model whose "
        "bundle and trained-<name>.json are already there is not trained again",
    )
    args = parser.parse_args()
    load = os.getloadavg()
    started = time.perf_counter()
    command = (
        f".venv/bin/python -m bench.quality --max-steps {args.max_steps} --time-budget-s {args.time_budget_s} "
        f"--halves-items {args.halves_items} --recipe-steps {args.recipe_steps} --seed {args.seed}"
        + (" --only-second-order" if args.only_second_order else " --second-order" if args.second_order else "")
        + "".join(
            f" --{option.replace('_', '-')} {value}"
            for option, value in (
                ("base_model", args.base_model),
                ("abt_items", args.abt_items),
                ("wine_train_items", args.wine_train_items),
            )
            if value
        )
    )
    if not args.report.exists():
        args.report.write_text(HEADER)

    with tempfile.TemporaryDirectory(prefix="ms-quality-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        paths = prepare(workdir, args.halves_items, args.abt_items, args.wine_train_items)
        budget = ["--max-steps", str(args.max_steps), "--time-budget-s", str(args.time_budget_s)]
        common = [*budget, "--val-fraction", "0", "--mlm-weight", "0", "--seed", str(args.seed), *base_option(args)]
        parts = [] if args.only_second_order else [("Quality", quality_sections)]
        if args.second_order or args.only_second_order:
            parts.append((SECOND_ORDER_TITLE, second_order_sections))
        trained: dict[str, Trained] = {}  # shared: the second-order section's mean row is the Quality section's
        for title, build in parts:
            sections, skipped, models = build(args, paths, workdir, common, trained)
            minutes = (time.perf_counter() - started) / 60
            body = "\n\n".join([*preamble(args, command, load, minutes, models), *sections, *not_measured(skipped)])
            print(body)
            write_section(args.report, title, body)


if __name__ == "__main__":
    main()
