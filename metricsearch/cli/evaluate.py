"""`metricsearch evaluate` and `tune`: score models on a task, compare reports, choose a bundle's fusion weights."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from metricsearch.cli.options import choice, service_settings

# Restated from metricsearch.evaluation, whose import loads scipy, which `serve` and `index` must not: a test checks
# each against its source.
Task = choice("Task", ("catalog-match", "annotated", "pairs", "halves"))
Inference = choice("Inference", ("served", "metric-two", "mean"))
Baseline = choice("Baseline", ("tfidf", "lexical", "lda", "mean", "metric-two"))


def evaluate(
    ctx: typer.Context,
    task: Annotated[Task | None, typer.Option(help="what to score; formats in docs/evaluation.md")] = None,
    data: Annotated[
        Path | None, typer.Option(help="the task's data: a folder (catalog-match, annotated) or a file (pairs, halves)")
    ] = None,
    bundle: Annotated[
        list[Path] | None,
        typer.Option(help="bundle scored in-process by the service's encoder and scoring; repeatable"),
    ] = None,
    inference: Annotated[
        Inference,
        typer.Option(help="of --bundle: served (its manifest's rerank), metric-two (per-field angular 1:1) or mean"),
    ] = "served",
    url: Annotated[
        str | None, typer.Option(help="a running service, scored over HTTP (/index, /similar; its top 100 count)")
    ] = None,
    api_key: Annotated[str | None, typer.Option(help="write key of the service at --url (MS_API_KEY)")] = None,
    baseline: Annotated[
        list[Baseline] | None,
        typer.Option(help="tfidf, lexical, lda, mean or metric-two (the last two run --base-bundle); repeatable"),
    ] = None,
    base_bundle: Annotated[
        Path | None, typer.Option(help="off-the-shelf bundle of the mean and metric-two baselines (MS_BUNDLE_DIR)")
    ] = None,
    report_dir: Annotated[
        Path | None, typer.Option(help="report folder to write: results.json, results.md and the plots")
    ] = None,
    compare: Annotated[
        list[Path] | None, typer.Option(help="report folders written by --report-dir, set side by side; repeatable")
    ] = None,
) -> None:
    """Score models on a task (ranking metrics with pessimistic ties, or correlations for pairs) and/or compare
    earlier reports (needs the `train` extra: scikit-learn, scipy, matplotlib). docs/evaluation.md explains it."""
    import shlex
    import sys
    import time

    from metricsearch.evaluation import compare_tables, load_run, plot_runs

    started = time.perf_counter()
    runs, summary = [], ""
    if task or data:
        if not (task and data):
            ctx.fail("--task and --data go together")
        from metricsearch.evaluation import (
            BundleScorer,
            HttpScorer,
            baseline_scorers,
            describe,
            markdown_table,
            read_task,
            write_run,
        )
        from metricsearch.evaluation import evaluate as evaluate_model

        settings = service_settings(ctx, api_key=api_key)
        dataset = read_task(task, data)
        scorers = [BundleScorer(b, inference) for b in bundle or []]
        scorers += baseline_scorers(baseline or [], base_bundle or settings.bundle_dir)
        if url:
            scorers.append(HttpScorer(url, settings.api_key.get_secret_value() if settings.api_key else None))
        if not scorers:
            ctx.fail("nothing to evaluate: give --bundle, --url and/or --baseline")
        results = []
        for scorer in scorers:
            typer.echo(f"evaluating {scorer.label} ...", err=True)
            results.append(evaluate_model(dataset, scorer))
            if isinstance(scorer, HttpScorer):
                scorer.close()
        typer.echo(f"{task}: {describe(dataset)}\n\n{markdown_table([r.to_json() for r in results], dataset.is_pairs)}")
        if report_dir:
            write_run(report_dir, dataset, results, shlex.join(["metricsearch", *sys.argv[1:]]))
            runs.append(load_run(report_dir))
        summary = f"{len(results)} model(s) on {task} ({len(dataset.queries)} queries)"
    elif not compare:
        ctx.fail("give --task and --data to evaluate, and/or --compare REPORT_DIR to set earlier reports side by side")
    if compare:
        runs = [load_run(folder) for folder in compare] + runs
        table = compare_tables(runs)
        typer.echo(f"\n{table}")
        if report_dir:
            report_dir.mkdir(parents=True, exist_ok=True)
            (report_dir / "compare.md").write_text(table + "\n")
            plot_runs(runs, report_dir, prefix="compare_")
        summary = ", ".join(filter(None, [summary, f"{len(runs)} run(s) compared"]))
    where = f" -> {report_dir}" if report_dir else " (add --report-dir DIR for JSON and plots)"
    typer.echo(f"evaluated {summary} in {time.perf_counter() - started:.1f} s{where}")


def tune(
    catalog: Annotated[Path, typer.Option(help="the catalog to serve (.csv or .jsonl of id, title, description)")],
    bundle: Annotated[Path, typer.Option(help="bundle folder whose fusion weights are chosen and written")],
    pairs: Annotated[
        Path | None,
        typer.Option(
            help="labelled matches (left_id,right_id: ids of --catalog) to rank instead of self-supervised queries; "
            "each left item ranks among the catalog's items that are no left item (with two shops: the other shop)"
        ),
    ] = None,
    queries: Annotated[
        int, typer.Option(min=10, help="pseudo-queries (and at most as many code pairs) made from the catalog's items")
    ] = 400,
    seed: Annotated[int, typer.Option(help="seed of the pseudo-queries and of the code pairs' sample")] = 13,
) -> None:
    """Choose the bundle's fusion weights (learned metric per field, lexical per field and over the whole text) for a
    catalog without labels: its own items as another shop would list them, and items that alone share a part number,
    are the queries; new weights are written only when both prefer them (docs/bundle.md, "Fusion")."""
    import time

    from metricsearch.evaluation import tune as tune_weights

    started = time.perf_counter()
    tuned = tune_weights(catalog, bundle, pairs=pairs, queries=queries, seed=seed)
    weights = ", ".join(f"{name} {w:g}" for name, w in tuned.weights.items())
    typer.echo(
        f"tuned {bundle} on {tuned.queries} queries in {time.perf_counter() - started:.0f} s: {weights} "
        f"({tuned.chosen_by})"
    )
