"""`metricsearch`: serve, index, export, train, evaluate, tune, snapshot and rollout. Each subcommand imports only
what it needs, so `serve` and `index` never import torch, and `export`, `train`, `evaluate` and `tune` need the
`train` extra.

Exit codes: 2 for a usage error (an unknown, missing, conflicting or invalid option: typer's own checks, and the
cross-option checks here), 1 for a runtime failure (any `MetricSearchError`: a bad data file, a missing bundle, a
service that does not answer), reported once by `_Commands`."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import asdict, astuple
from enum import StrEnum
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, get_args

import typer
from typer.core import TyperGroup

from metricsearch.core.bundle import METRICS_OF_POOLING, EncoderSpec, FusionSpec
from metricsearch.core.bundle import Metric as ManifestMetric
from metricsearch.core.errors import MetricSearchError, TrainerError
from metricsearch.core.fusion import NAMED_FUSIONS

if TYPE_CHECKING:  # importing it loads torch, which `serve` and `index` must not
    from metricsearch.trainer import TrainConfig


def _choice(name: str, values: Iterable[str]) -> type[StrEnum]:
    """A choice type typer checks and lists in --help; its members are the strings themselves, so they pass on as
    plain values."""
    return StrEnum(name, [(value, value) for value in values])


Pooling = _choice("Pooling", METRICS_OF_POOLING)
Metric = _choice("Metric", get_args(ManifestMetric))
Precision = _choice("Precision", get_args(EncoderSpec.model_fields["precision"].annotation))
Fusion = _choice("Fusion", NAMED_FUSIONS)
# Mirrors of choices defined where importing them costs torch (metricsearch.trainer.config) or scipy
# (metricsearch.evaluation), which `serve` and `index` must not load: tests check each against its source.
Objective = _choice("Objective", ("metricbert", "recobert", "sbert-siamese", "sbert-triplet"))
Mining = _choice("Mining", ("hardest", "random"))
Loss = _choice("Loss", ("triplet", "contrastive", "cosine"))
Distance = _choice("Distance", ("angular", "cosine"))
SiameseDistance = _choice("SiameseDistance", ("cosine", "euclidean"))
TripletDistance = _choice("TripletDistance", ("euclidean", "cosine"))
Task = _choice("Task", ("catalog-match", "annotated", "pairs", "halves"))
Inference = _choice("Inference", ("served", "metric-two", "mean"))
Baseline = _choice("Baseline", ("tfidf", "lexical", "lda", "mean", "metric-two"))


class _Commands(TyperGroup):
    """The one place a `MetricSearchError` becomes `error: <message>` and exit code 1, for every subcommand."""

    def invoke(self, ctx: typer.Context):
        try:
            return super().invoke(ctx)
        except MetricSearchError as exc:
            typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=1) from exc


app = typer.Typer(cls=_Commands, no_args_is_help=True)


def _print_version(requested: bool) -> None:
    if requested:
        from metricsearch import __version__

        typer.echo(f"metricsearch {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """Text similarity search for item-to-item recommendations."""


def _settings(ctx: typer.Context, **overrides: object):
    """The service settings from MS_* variables and the options given; an invalid value is a usage error."""
    from pydantic import ValidationError

    from metricsearch.service import Settings

    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        ctx.fail("; ".join(_setting_error(e) for e in exc.errors()))


def _setting_error(error: dict) -> str:
    """One setting's error, or one about several settings (no location: its message names them)."""
    where = ".".join(map(str, error["loc"]))
    message = error["msg"].removeprefix("Value error, ")
    return f"setting {where}: {message}" if where else message


@app.command()
def serve(
    ctx: typer.Context,
    bundle: Annotated[Path | None, typer.Option(help="bundle folder to serve (MS_BUNDLE_DIR)")] = None,
    host: Annotated[str | None, typer.Option(help="address to bind (MS_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="port to bind (MS_PORT)")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="embedded store folder (MS_DATA_DIR)")] = None,
    workers: Annotated[
        int | None, typer.Option(min=1, help="worker processes; more than 1 needs a Qdrant server (MS_WORKERS)")
    ] = None,
) -> None:
    """Run the HTTP service: one process by default (the embedded store is owned by one process at a time);
    with a Qdrant server (MS_QDRANT_URL), --workers processes. docs/operations.md, "Serving fast", lists the uvicorn
    settings."""
    import os

    import uvicorn

    from metricsearch.service import build_runtime, configure_logging, create_app, uvicorn_options

    overrides = {"bundle_dir": bundle, "host": host, "port": port, "data_dir": data_dir, "workers": workers}
    settings = _settings(ctx, **overrides)
    configure_logging(settings.log_level)
    options = uvicorn_options(settings)
    if settings.workers > 1:
        if not settings.qdrant_url:
            ctx.fail(
                f"{settings.workers} workers need a Qdrant server: the embedded store in {settings.data_dir} is owned "
                "by one process. Serve with one worker, or set MS_QDRANT_URL to a Qdrant server"
            )
        # Each worker builds its own runtime from the environment: hand it the command-line options too.
        os.environ.update({f"MS_{name.upper()}": str(value) for name, value in overrides.items() if value is not None})
        uvicorn.run(
            "metricsearch.service.api.app:app_from_environment", factory=True, workers=settings.workers, **options
        )
        return
    uvicorn.run(create_app(build_runtime(settings)), **options)


@app.command()
def index(
    ctx: typer.Context,
    catalog: Annotated[Path, typer.Option(help="catalog to load: .csv (id,title,description,...) or .jsonl")],
    url: Annotated[
        str | None, typer.Option(help="a running service to post to; unset = write the embedded store")
    ] = None,
    api_key: Annotated[str | None, typer.Option(help="write key of the service at --url (MS_API_KEY)")] = None,
    batch: Annotated[int, typer.Option(min=1, max=1000, help="items per request or encoder round")] = 256,
    bundle: Annotated[Path | None, typer.Option(help="bundle folder, without --url (MS_BUNDLE_DIR)")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="embedded store folder, without --url (MS_DATA_DIR)")] = None,
    start: Annotated[
        int, typer.Option(min=0, help="skip the catalog's first N items (resume where a load that gave up stopped)")
    ] = 0,
    patience: Annotated[
        float,
        typer.Option(min=0, help="with --url: seconds one batch waits out a service that is unreachable or overloaded"),
    ] = 300.0,
) -> None:
    """Bulk-load a catalog, through a running service (--url) or straight into the store. Through a service, a batch
    that fails for lack of an answer (service restarting, overloaded: 429/503) is sent again until --patience runs
    out, and the load goes on from there; sending a batch twice is harmless (upserts by id)."""
    import time

    from tqdm import tqdm

    from metricsearch.core.readers import read_catalog

    settings = _settings(ctx, bundle_dir=bundle, data_dir=data_dir, api_key=api_key)
    started = time.perf_counter()
    indexed = unchanged = 0
    items = islice(read_catalog(catalog), start, None)
    sender = _http_sender(url, settings, patience) if url else _store_sender(settings)
    done = start
    with sender as send, tqdm(desc="indexing", unit="item", initial=start) as bar:
        while chunk := list(islice(items, batch)):
            try:
                written, same = send(chunk)
            except MetricSearchError as exc:
                raise MetricSearchError(
                    f"{exc}. The first {done} items are loaded: fix the cause, then rerun with --start {done}"
                ) from exc
            indexed, unchanged = indexed + written, unchanged + same
            done += len(chunk)
            bar.update(len(chunk))
    seconds = time.perf_counter() - started
    total = indexed + unchanged
    typer.echo(
        f"indexed {indexed}, unchanged {unchanged} of {total} items in {seconds:.1f} s ({total / seconds:.0f}/s)"
    )


@contextmanager
def _store_sender(settings):
    """Index in-process into the embedded store (the service must not be running on the same data dir)."""
    from metricsearch.service import build_runtime

    runtime = build_runtime(settings)
    try:
        yield lambda chunk: astuple(runtime.catalog.index(chunk, settings.index_batch_size))
    finally:
        runtime.close()


@contextmanager
def _http_sender(url: str, settings, patience_s: float):
    """Post batches to a running service's /index through the client, which retries what the service asks it to."""
    from metricsearch.client import Client

    key = settings.api_key.get_secret_value() if settings.api_key else None

    def send(chunk):
        answer = client.index([asdict(i) | {"metadata": i.metadata or {}} for i in chunk])
        return answer.indexed, answer.unchanged

    with Client(url, key, timeout_s=300, retries=1_000_000, patience_s=patience_s) as client:
        yield send


@app.command()
def export(
    bundle: Annotated[Path, typer.Option(help="bundle folder to write (what `serve --bundle` loads)")],
    model: Annotated[
        Path | None,
        typer.Option(help="sentence-transformers folder, e.g. RUN/best of `train`; default: packaged all-MiniLM-L6-v2"),
    ] = None,
    name: Annotated[str | None, typer.Option(help="bundle name (default: from the model folder)")] = None,
    title_weight: Annotated[float, typer.Option(min=0.0, help="weight of the title distance")] = 1.0,
    description_weight: Annotated[float, typer.Option(min=0.0, help="weight of the description distance")] = 1.0,
    metric: Annotated[
        Metric | None,
        typer.Option(
            help="rerank: angular (per-field angular sum, default for mean pooling), recobert (RecoBERT's 4-score "
            "fusion) or frobenius (S_F, default for cov/svd pooling)"
        ),
    ] = None,
    pooling: Annotated[
        Pooling,
        typer.Option(
            help="mean (one vector a text), cov or svd (second-order: the graph returns token embeddings, the "
            "service stores rank-k factors); use what the model was trained with"
        ),
    ] = "mean",
    rank_k: Annotated[
        int | None,
        typer.Option(min=1, help="factor rows kept: needed for svd; with cov, truncates a cov-trained model to rank k"),
    ] = None,
    max_seq_length: Annotated[
        int | None, typer.Option(min=1, help="truncate texts at this many tokens (default: the model's)")
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="replace an existing bundle folder")] = False,
    precision: Annotated[
        Precision,
        typer.Option(
            help="fp32 (exact, ONNX Runtime); int8 (NNCF-quantized, OpenVINO: fastest on CPU); bf16 (OpenVINO "
            "runs the fp32 graph in bf16); fp16 (for CUDA). int8 and bf16 need --catalog (docs/bundle.md)"
        ),
    ] = "fp32",
    catalog: Annotated[
        Path | None,
        typer.Option(
            help="catalog (.csv/.jsonl) whose texts calibrate int8 and measure the agreement with fp32 recorded in "
            "the bundle"
        ),
    ] = None,
    fusion: Annotated[
        Fusion | None,
        typer.Option(
            help="fusion weights to write: default (DEFAULT_FUSION: any text, sentence similarity kept at the "
            "encoder's) or catalog (CATALOG_FUSION: item-to-item on a product catalog, more weight on lexical "
            "evidence); unset: default for the packaged model, none for another until `metricsearch tune`"
        ),
    ] = None,
) -> None:
    """Turn a checkpoint into a model bundle (needs the `train` extra: torch)."""
    from metricsearch.core.bundle import check_bundle_target, load_bundle

    check_bundle_target(bundle, overwrite)
    from metricsearch.export import export_bundle

    path = export_bundle(
        model,
        bundle,
        name=name,
        title_weight=title_weight,
        description_weight=description_weight,
        metric=metric,
        max_seq_length=max_seq_length,
        pooling=pooling,
        rank_k=rank_k,
        overwrite=overwrite,
        precision=precision,
        catalog=catalog,
        fusion=None if fusion is None else _named_fusion(fusion),
    )
    agreement = load_bundle(path).manifest.encoder.agreement
    measured = (
        f" ({precision} keeps {agreement.neighbour_overlap:.3f} of fp32's top-10 neighbours, mean cosine "
        f"{agreement.mean_cosine:.4f}, on {agreement.texts} texts of {agreement.dataset})"
        if agreement
        else ""
    )
    typer.echo(f"bundle written to {path}{measured}")


@app.command()
def train(
    ctx: typer.Context,
    objective: Annotated[
        Objective | None,
        typer.Option(help="metricbert, recobert (on --catalog), sbert-siamese (--pairs) or sbert-triplet (--triplets)"),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="run folder to write: best/, last/, train_log.jsonl, curves.png (required)")
    ] = None,
    catalog: Annotated[Path | None, typer.Option(help="catalog .csv/.jsonl (id, title, description)")] = None,
    pairs: Annotated[Path | None, typer.Option(help="pairs .csv/.tsv/.jsonl (text_a, text_b, score)")] = None,
    triplets: Annotated[
        Path | None, typer.Option(help="triplets .csv/.tsv/.jsonl (anchor, positive, negative)")
    ] = None,
    base: Annotated[
        Path | None, typer.Option(help="sentence-transformers folder to start from; default: packaged all-MiniLM-L6-v2")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="JSON/YAML file of these options, keys as named here; the command line wins")
    ] = None,
    seed: Annotated[int, typer.Option(help="seed of data order, masking, mining and dropout")] = 42,
    max_steps: Annotated[int | None, typer.Option(help="optimizer steps; overrides --epochs")] = None,
    epochs: Annotated[
        int | None, typer.Option(help="passes over the data; unset: 1, or what fits --time-budget-s")
    ] = None,
    batch_size: Annotated[int, typer.Option(help="examples per step (per process under torchrun)")] = 16,
    lr: Annotated[float, typer.Option(help="peak learning rate of the encoder")] = 2e-5,
    mlm_head_lr: Annotated[float, typer.Option(help="learning rate of the new MLM head")] = 5e-4,
    weight_decay: Annotated[float, typer.Option(help="AdamW weight decay")] = 0.01,
    warmup_ratio: Annotated[float, typer.Option(help="share of encoder steps warming up")] = 0.1,
    max_grad_norm: Annotated[float, typer.Option(help="gradient clipping norm")] = 1.0,
    max_seq_length: Annotated[int, typer.Option(help="tokens a text keeps, at most the model's")] = 128,
    time_budget_s: Annotated[
        float | None, typer.Option(help="stop in time to evaluate and save within this many seconds")
    ] = None,
    bf16: Annotated[
        bool | None, typer.Option("--bf16/--no-bf16", help="bf16 autocast; unset: where the GPU runs it natively")
    ] = None,
    eval_every: Annotated[int, typer.Option(help="validate every N steps")] = 100,
    log_every: Annotated[int, typer.Option(help="log the mean losses every N steps")] = 10,
    patience: Annotated[int, typer.Option(help="stop after N validations without improvement")] = 5,
    val_fraction: Annotated[float, typer.Option(help="share held out for validation; 0 = none")] = 0.1,
    val_max: Annotated[int, typer.Option(help="most held-out examples")] = 1000,
    mining: Annotated[Mining, typer.Option(help="metricbert negatives")] = "hardest",
    loss: Annotated[Loss, typer.Option(help="metricbert loss")] = "triplet",
    distance: Annotated[Distance, typer.Option(help="metricbert distance")] = "angular",
    title_variants: Annotated[
        float | None,
        typer.Option(
            help="metricbert: share of positives that are a perturbed copy of the anchor's own title instead of its "
            "description; unset: 0, the paper's"
        ),
    ] = None,
    margin: Annotated[
        float | None,
        typer.Option(help="margin of the triplet/contrastive loss; unset: the objective's (docs/training.md)"),
    ] = None,
    similarity_weight: Annotated[float, typer.Option(help="lambda: weight of the metric/TDM loss")] = 1.0,
    mlm_weight: Annotated[
        float | None, typer.Option(help="metricbert, recobert: weight of the MLM loss, 0 disables MLM; unset: 1")
    ] = None,
    mlm_probability: Annotated[float, typer.Option(help="share of tokens masked")] = 0.15,
    mlm_warmup_steps: Annotated[
        int | None,
        typer.Option(help="metricbert, recobert: head-only steps with the encoder frozen, before joint; unset: 100"),
    ] = None,
    siamese_distance: Annotated[SiameseDistance, typer.Option(help="sbert-siamese distance")] = "cosine",
    triplet_distance: Annotated[TripletDistance, typer.Option(help="sbert-triplet distance")] = "euclidean",
    pooling: Annotated[
        Pooling,
        typer.Option(help="mean, cov (token covariance A^T A) or svd (rank-k, needs --rank-k); S_F for cov/svd"),
    ] = "mean",
    rank_k: Annotated[int | None, typer.Option(help="rank k of --pooling svd")] = None,
    resume: Annotated[bool, typer.Option(help="continue the run in --out from last/")] = False,
    bundle: Annotated[
        Path | None,
        typer.Option(
            help="when training ends, export OUT/best to this new bundle folder and, for a --catalog objective other "
            "than recobert, tune its fusion weights on the catalog (`metricsearch tune`, no labels)"
        ),
    ] = None,
) -> None:
    """Fine-tune an encoder; the best checkpoint (OUT/best) exports with `metricsearch export --model OUT/best`,
    or at once with --bundle (needs the `train` extra). Options may also come from a --config file;
    docs/training.md explains each."""
    # Only the options typed on the command line override the --config file; the rest keep the file's value or,
    # failing that, TrainConfig's default (the one the signature repeats for --help; a test keeps them equal).
    given = {
        name: value
        for name, value in ctx.params.items()
        if name not in ("config", "bundle") and ctx.get_parameter_source(name).name == "COMMANDLINE"
    }
    if bundle is not None and bundle.exists():
        ctx.fail(f"--bundle {bundle} exists: name a new folder (checked before training, not after)")
    from metricsearch.trainer import build_config

    try:
        settings = build_config(given, config)
    except TrainerError as exc:
        ctx.fail(str(exc))  # the options or the --config file are wrong: checked before any model loads
    from transformers.utils import logging as transformers_logging

    from metricsearch.trainer import train as run_training

    transformers_logging.disable_progress_bar()  # per-file load/save bars would break up the training bar
    result = run_training(settings)
    if result.primary:
        typer.echo(result.summary(settings.objective))
        if bundle is not None:
            _bundle_from_training(settings, result.best_dir, bundle)


def _named_fusion(name: str) -> FusionSpec:
    weights, rule = NAMED_FUSIONS[name]
    return FusionSpec(weights=weights, chosen_by=rule)


def _bundle_from_training(settings: TrainConfig, best: Path, bundle: Path) -> None:
    """`train --bundle`: the best checkpoint exported as `metricsearch export` would, then, when its metric fuses
    with lexical scores, given CATALOG_FUSION and tuned on the catalog it was trained on."""
    from metricsearch.evaluation import tune as tune_weights
    from metricsearch.export import export_bundle

    recobert = settings.objective == "recobert"
    tuned_here = settings.catalog is not None and not recobert
    export_bundle(
        best,
        bundle,
        metric="recobert" if recobert else None,
        pooling=settings.pooling,
        rank_k=settings.rank_k,
        objective=settings.objective,
        fusion=_named_fusion("catalog") if tuned_here else None,
    )
    if not tuned_here:
        typer.echo(f"bundle written to {bundle} (default fusion weights: no catalog to tune on)")
        return
    tuned = tune_weights(settings.catalog, bundle)
    weights = ", ".join(f"{name} {w:g}" for name, w in tuned.weights.items())
    typer.echo(f"bundle written to {bundle}, tuned on {settings.catalog.name}: {weights}")


@app.command()
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

        settings = _settings(ctx, api_key=api_key)
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


snapshot_app = typer.Typer(
    help="Back up and restore the store: the embedded store (stop the service first: its lock refuses these "
    "while it runs) or, with MS_QDRANT_URL, a collection on a Qdrant server.",
    no_args_is_help=True,
)
app.add_typer(snapshot_app, name="snapshot")


@app.command()
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


@snapshot_app.command("create")
def snapshot_create(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="archive to write (.tar.gz for the embedded store); must not exist")],
    bundle: Annotated[Path | None, typer.Option(help="bundle folder (MS_BUNDLE_DIR)")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="embedded store folder (MS_DATA_DIR)")] = None,
) -> None:
    """Write a consistent snapshot of the store (flushed; writes held back while it is read)."""
    from metricsearch.service import create_snapshot as create

    report = create(_settings(ctx, bundle_dir=bundle, data_dir=data_dir), path)
    typer.echo(f"snapshot of {report.items} items written to {report.path} ({report.bytes / 1e6:.1f} MB)")


@snapshot_app.command("restore")
def snapshot_restore(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="archive made by `metricsearch snapshot create`")],
    bundle: Annotated[Path | None, typer.Option(help="bundle folder (MS_BUNDLE_DIR); must be the snapshot's")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="embedded store folder (MS_DATA_DIR)")] = None,
    overwrite: Annotated[bool, typer.Option(help="replace an existing store")] = False,
) -> None:
    """Replace the store by a snapshot, after checking it was made for this bundle."""
    from metricsearch.service import restore_snapshot as restore

    report = restore(_settings(ctx, bundle_dir=bundle, data_dir=data_dir), path, overwrite=overwrite)
    typer.echo(f"restored {report.items} items into {report.path}")


rollout_app = typer.Typer(
    help="Roll a new model bundle out without downtime, through a running service (embedded store): it re-embeds "
    "every stored item into a shadow store while it answers from the live one; swap when `status` says ready "
    '(docs/operations.md, "Model rollout").',
    no_args_is_help=True,
)
app.add_typer(rollout_app, name="rollout")
RolloutUrl = Annotated[str, typer.Option(help="the running service")]
RolloutKey = Annotated[str | None, typer.Option(help="the service's write key (MS_API_KEY)")]


@contextmanager
def _rollout_client(ctx: typer.Context, url: str, api_key: str | None):
    from metricsearch.client import Client

    settings = _settings(ctx, api_key=api_key)
    key = settings.api_key.get_secret_value() if settings.api_key else None
    with Client(url, key, timeout_s=300) as client:
        yield client


def _progress(status) -> str:
    if status.state == "none":
        return f"no rollout under way; serving {status.model}"
    share = f" ({100 * status.copied / status.total:.0f}%)" if status.total else ""
    line = f"{status.state}: {status.model} -> {status.target}, {status.copied} of {status.total} items copied{share}"
    if status.items_per_s is not None:
        line += f", {status.items_per_s:.0f} items/s"
    if status.state == "copying" and status.eta_s is not None:
        line += f", ETA {status.eta_s:.0f} s"
    return line + (f"; error: {status.error}" if status.error else "")


@rollout_app.command("start")
def rollout_start(
    ctx: typer.Context,
    bundle: Annotated[Path, typer.Option(help="the new bundle's folder (the service reads it: a path on its machine)")],
    url: RolloutUrl = "http://127.0.0.1:8000",
    api_key: RolloutKey = None,
) -> None:
    """Start re-embedding every stored item with --bundle into a shadow store; the service keeps answering."""
    with _rollout_client(ctx, url, api_key) as client:
        typer.echo(_progress(client.rollout_start(str(bundle.resolve()))))


@rollout_app.command("status")
def rollout_status(ctx: typer.Context, url: RolloutUrl = "http://127.0.0.1:8000", api_key: RolloutKey = None) -> None:
    """Show the rollout's progress: items copied, items/s and time left; exit code 1 when it failed."""
    with _rollout_client(ctx, url, api_key) as client:
        status = client.rollout_status()
    typer.echo(_progress(status))
    if status.state == "failed":
        raise typer.Exit(code=1)


@rollout_app.command("swap")
def rollout_swap(ctx: typer.Context, url: RolloutUrl = "http://127.0.0.1:8000", api_key: RolloutKey = None) -> None:
    """Serve the new bundle from the next request on (refused until `status` says ready)."""
    with _rollout_client(ctx, url, api_key) as client:
        typer.echo(_progress(client.rollout_swap()))


@rollout_app.command("abort")
def rollout_abort(ctx: typer.Context, url: RolloutUrl = "http://127.0.0.1:8000", api_key: RolloutKey = None) -> None:
    """Drop the shadow store; the service goes on with its current bundle."""
    with _rollout_client(ctx, url, api_key) as client:
        typer.echo(_progress(client.rollout_abort()))


if __name__ == "__main__":
    app()
