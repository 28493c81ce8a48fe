"""`metricsearch`: serve, index, export, train and evaluate. Each subcommand imports only what it needs, so `serve`
and `index` never import torch, and `export`, `train` and `evaluate` need the `train` extra."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, astuple
from itertools import islice
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Text similarity search for item-to-item recommendations.", no_args_is_help=True)


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


def _settings(**overrides: object):
    from metricsearch.service import Settings

    return Settings(**{k: v for k, v in overrides.items() if v is not None})


@app.command()
def serve(
    bundle: Annotated[Path | None, typer.Option(help="bundle folder (MS_BUNDLE_DIR)")] = None,
    host: Annotated[str | None, typer.Option(help="bind address (MS_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="port (MS_PORT)")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="embedded store folder (MS_DATA_DIR)")] = None,
    workers: Annotated[
        int | None, typer.Option(min=1, help="worker processes; more than 1 needs a Qdrant server (MS_WORKERS)")
    ] = None,
) -> None:
    """Run the HTTP service: one process by default (the embedded store is owned by one process at a time);
    with a Qdrant server (MS_QDRANT_URL), --workers processes. README "Serving fast" lists the uvicorn settings."""
    import os

    import uvicorn

    from metricsearch.core.errors import MetricSearchError
    from metricsearch.service import build_runtime, configure_logging, create_app

    overrides = {"bundle_dir": bundle, "host": host, "port": port, "data_dir": data_dir, "workers": workers}
    settings = _settings(**overrides)
    configure_logging(settings.log_level)
    # uvloop and httptools are picked by uvicorn's "auto" (uvicorn[standard]); no access log on the hot path.
    options = {
        "host": settings.host,
        "port": settings.port,
        "log_config": None,
        "access_log": False,
        "timeout_graceful_shutdown": 10,
        "timeout_keep_alive": settings.keep_alive_s,
    }
    if settings.workers > 1:
        if not settings.qdrant_url:
            _fail(
                f"{settings.workers} workers need a Qdrant server: the embedded store in {settings.data_dir} is owned "
                "by one process. Serve with one worker, or set MS_QDRANT_URL to a Qdrant server"
            )
        # Each worker builds its own runtime from the environment: hand it the command-line options too.
        os.environ.update({f"MS_{name.upper()}": str(value) for name, value in overrides.items() if value is not None})
        uvicorn.run(
            "metricsearch.service.api.app:app_from_environment", factory=True, workers=settings.workers, **options
        )
        return
    try:
        runtime = build_runtime(settings)
    except MetricSearchError as exc:
        _fail(str(exc))
    uvicorn.run(create_app(runtime), **options)


@app.command()
def index(
    catalog: Annotated[Path, typer.Argument(help="catalog file: .csv (id,title,description,...) or .jsonl")],
    url: Annotated[
        str | None, typer.Option(help="a running service to post to; unset = write the embedded store")
    ] = None,
    api_key: Annotated[str | None, typer.Option(help="write key of the service at --url (MS_API_KEY)")] = None,
    batch: Annotated[int, typer.Option(min=1, max=1000, help="items per request or encoder round")] = 256,
    bundle: Annotated[Path | None, typer.Option(help="bundle folder, without --url (MS_BUNDLE_DIR)")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="embedded store folder, without --url (MS_DATA_DIR)")] = None,
) -> None:
    """Bulk-load a catalog, through a running service (--url) or straight into the store."""
    import time

    from tqdm import tqdm

    from metricsearch.core.errors import MetricSearchError
    from metricsearch.core.readers import read_catalog

    settings = _settings(bundle_dir=bundle, data_dir=data_dir, api_key=api_key)
    started = time.perf_counter()
    indexed = unchanged = 0
    try:
        items = read_catalog(catalog)
        sender = _http_sender(url, settings) if url else _store_sender(settings)
        with sender as send, tqdm(desc="indexing", unit="item") as bar:
            while chunk := list(islice(items, batch)):
                done, same = send(chunk)
                indexed, unchanged = indexed + done, unchanged + same
                bar.update(len(chunk))
    except MetricSearchError as exc:
        _fail(str(exc))
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
def _http_sender(url: str, settings):
    """Post batches to a running service's /index."""
    import httpx

    from metricsearch.core.errors import InvalidInputError

    headers = {"Authorization": f"Bearer {settings.api_key.get_secret_value()}"} if settings.api_key else {}

    def send(chunk):
        body = {"items": [asdict(i) | {"metadata": i.metadata or {}} for i in chunk]}
        try:
            response = client.post("/index", json=body)
        except httpx.HTTPError as exc:
            raise InvalidInputError(f"cannot reach {url}: {exc}") from exc
        if response.status_code != 200:
            raise InvalidInputError(f"{url}/index answered {response.status_code}: {response.text[:500]}")
        data = response.json()
        return data["indexed"], data["unchanged"]

    with httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=300) as client:
        yield send


@app.command()
def export(
    out: Annotated[Path, typer.Option(help="bundle folder to write")],
    model: Annotated[
        Path | None, typer.Option(help="sentence-transformers folder; default: packaged all-MiniLM-L6-v2")
    ] = None,
    name: Annotated[str | None, typer.Option(help="bundle name (default: from the model folder)")] = None,
    title_weight: Annotated[float, typer.Option(min=0.0, help="weight of the title distance")] = 1.0,
    description_weight: Annotated[float, typer.Option(min=0.0, help="weight of the description distance")] = 1.0,
    metric: Annotated[
        str | None,
        typer.Option(
            help="rerank: 'angular' (per-field angular sum, default for mean pooling), 'recobert' (RecoBERT's "
            "4-score fusion) or 'frobenius' (S_F, default for cov/svd pooling)"
        ),
    ] = None,
    pooling: Annotated[
        str,
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
        str,
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
) -> None:
    """Turn a checkpoint into a model bundle (needs the `train` extra: torch)."""
    from metricsearch.core.errors import MetricSearchError
    from metricsearch.export import export_bundle

    try:
        path = export_bundle(
            model,
            out,
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
        )
    except MetricSearchError as exc:
        _fail(str(exc))
    from metricsearch.core.bundle import load_bundle

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
    objective: Annotated[
        str | None, typer.Option(help="metricbert | recobert (catalog) | sbert-siamese | sbert-triplet")
    ] = None,
    catalog: Annotated[Path | None, typer.Option(help="catalog .csv/.jsonl (id, title, description)")] = None,
    pairs: Annotated[Path | None, typer.Option(help="pairs .csv/.tsv/.jsonl (text_a, text_b, score)")] = None,
    triplets: Annotated[
        Path | None, typer.Option(help="triplets .csv/.tsv/.jsonl (anchor, positive, negative)")
    ] = None,
    base: Annotated[
        Path | None, typer.Option(help="sentence-transformers folder to start from (default packaged all-MiniLM-L6-v2)")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="run folder: best/, last/, train_log.jsonl, curves.png")] = None,
    config: Annotated[Path | None, typer.Option(help="JSON/YAML file of these options (the command line wins)")] = None,
    seed: Annotated[int | None, typer.Option(help="seed of data order, masking, mining, dropout (default 42)")] = None,
    max_steps: Annotated[int | None, typer.Option(help="optimizer steps; overrides --epochs")] = None,
    epochs: Annotated[
        int | None, typer.Option(help="passes over the data (default 1; only --time-budget-s: what fits)")
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="examples per step (per process under torchrun) (default 16)")
    ] = None,
    lr: Annotated[float | None, typer.Option(help="peak learning rate of the encoder (default 2e-5)")] = None,
    mlm_head_lr: Annotated[float | None, typer.Option(help="learning rate of the new MLM head (default 5e-4)")] = None,
    warmup_ratio: Annotated[float | None, typer.Option(help="share of encoder steps warming up (default 0.1)")] = None,
    weight_decay: Annotated[float | None, typer.Option(help="AdamW weight decay (default 0.01)")] = None,
    max_grad_norm: Annotated[float | None, typer.Option(help="gradient clipping norm (default 1.0)")] = None,
    max_seq_length: Annotated[
        int | None, typer.Option(help="tokens a text keeps, at most the model's (default 128)")
    ] = None,
    time_budget_s: Annotated[
        float | None, typer.Option(help="stop in time to evaluate and save within this many seconds")
    ] = None,
    bf16: Annotated[
        bool | None, typer.Option("--bf16/--no-bf16", help="bf16 autocast (default auto: where native)")
    ] = None,
    eval_every: Annotated[int | None, typer.Option(help="validate every N steps (default 100)")] = None,
    log_every: Annotated[int | None, typer.Option(help="log the mean losses every N steps (default 10)")] = None,
    patience: Annotated[
        int | None, typer.Option(help="stop after N validations without improvement (default 5)")
    ] = None,
    val_fraction: Annotated[
        float | None, typer.Option(help="share held out for validation; 0 = none (default 0.1)")
    ] = None,
    val_max: Annotated[int | None, typer.Option(help="most held-out examples (default 1000)")] = None,
    mining: Annotated[str | None, typer.Option(help="metricbert negatives: hardest | random (default hardest)")] = None,
    loss: Annotated[
        str | None, typer.Option(help="metricbert loss: triplet | contrastive | cosine (default triplet)")
    ] = None,
    distance: Annotated[
        str | None, typer.Option(help="metricbert distance: angular | cosine (default angular)")
    ] = None,
    margin: Annotated[
        float | None, typer.Option(help="margin of the triplet/contrastive loss (default per objective)")
    ] = None,
    title_variants: Annotated[
        float | None,
        typer.Option(
            help="metricbert: share of positives that are a perturbed copy of the anchor's own title instead of its "
            "description (default 0, the paper's)"
        ),
    ] = None,
    similarity_weight: Annotated[
        float | None, typer.Option(help="lambda: weight of the metric/TDM loss (default 1.0)")
    ] = None,
    mlm_weight: Annotated[
        float | None, typer.Option(help="weight of the MLM loss; 0 disables MLM (default 1.0)")
    ] = None,
    mlm_probability: Annotated[float | None, typer.Option(help="share of tokens masked (default 0.15)")] = None,
    mlm_warmup_steps: Annotated[
        int | None, typer.Option(help="head-only steps with the encoder frozen, before joint training (default 100)")
    ] = None,
    siamese_distance: Annotated[
        str | None, typer.Option(help="sbert-siamese: cosine | euclidean (default cosine)")
    ] = None,
    triplet_distance: Annotated[
        str | None, typer.Option(help="sbert-triplet: euclidean | cosine (default euclidean)")
    ] = None,
    pooling: Annotated[
        str | None,
        typer.Option(help="mean | cov (token covariance A^T A) | svd (rank-k, needs --rank-k); S_F for cov/svd"),
    ] = None,
    rank_k: Annotated[int | None, typer.Option(help="rank k of --pooling svd")] = None,
    resume: Annotated[bool, typer.Option(help="continue the run in --out from last/")] = False,
) -> None:
    """Fine-tune an encoder; the best checkpoint (OUT/best) exports with `metricsearch export --model OUT/best`
    (needs the `train` extra). docs/training.md explains every option."""
    options = {k: v for k, v in locals().items() if k != "config"}  # the options as given; None = not given
    options["resume"] = resume or None  # an unset flag leaves the config file's value
    from metricsearch.core.errors import MetricSearchError
    from metricsearch.trainer import build_config

    try:
        settings = build_config(options, config)
        from transformers.utils import logging as transformers_logging

        from metricsearch.trainer import train as run_training

        transformers_logging.disable_progress_bar()  # per-file load/save bars would break up the training bar

        result = run_training(settings)
    except MetricSearchError as exc:
        _fail(str(exc))
    if result.primary:
        typer.echo(result.summary(settings.objective))


@app.command()
def evaluate(
    task: Annotated[
        str | None, typer.Option(help="catalog-match | annotated | pairs | halves (formats: docs/evaluation.md)")
    ] = None,
    data: Annotated[
        Path | None, typer.Option(help="the task's data: a folder (catalog-match, annotated) or a file (pairs, halves)")
    ] = None,
    bundle: Annotated[
        list[Path] | None,
        typer.Option(help="bundle scored in-process by the service's encoder and scoring; repeatable"),
    ] = None,
    inference: Annotated[
        str,
        typer.Option(help="of --bundle: served (its manifest's rerank) | metric-two (per-field angular 1:1) | mean"),
    ] = "served",
    url: Annotated[
        str | None, typer.Option(help="a running service, scored over HTTP (/index, /similar; its top 100 count)")
    ] = None,
    api_key: Annotated[str | None, typer.Option(help="write key of the service at --url (MS_API_KEY)")] = None,
    baseline: Annotated[
        list[str] | None,
        typer.Option(help="tfidf | lda | mean | metric-two (the last two run --base-bundle); repeatable"),
    ] = None,
    base_bundle: Annotated[
        Path | None, typer.Option(help="off-the-shelf bundle of the mean and metric-two baselines (MS_BUNDLE_DIR)")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="folder for results.json, results.md and the plots")] = None,
    compare: Annotated[
        list[Path] | None, typer.Option(help="run folders written by --out, set side by side; repeatable")
    ] = None,
) -> None:
    """Score models on a task (ranking metrics with pessimistic ties, or correlations for pairs) and/or compare
    earlier runs (needs the `train` extra: scikit-learn, scipy, matplotlib). docs/evaluation.md explains it."""
    import shlex
    import sys
    import time

    from metricsearch.core.errors import MetricSearchError
    from metricsearch.evaluation import compare_tables, load_run, plot_runs

    started = time.perf_counter()
    runs, summary = [], ""
    try:
        if task or data:
            if not (task and data):
                _fail("--task and --data go together")
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

            settings = _settings(api_key=api_key)
            dataset = read_task(task, data)
            scorers = [BundleScorer(b, inference) for b in bundle or []]  # type: ignore[arg-type]
            scorers += baseline_scorers(baseline or [], base_bundle or settings.bundle_dir)
            if url:
                scorers.append(HttpScorer(url, settings.api_key.get_secret_value() if settings.api_key else None))
            if not scorers:
                _fail("nothing to evaluate: give --bundle, --url and/or --baseline")
            results = []
            for scorer in scorers:
                typer.echo(f"evaluating {scorer.label} ...", err=True)
                results.append(evaluate_model(dataset, scorer))
                if isinstance(scorer, HttpScorer):
                    scorer.close()
            typer.echo(
                f"{task}: {describe(dataset)}\n\n{markdown_table([r.to_json() for r in results], dataset.is_pairs)}"
            )
            if out:
                write_run(out, dataset, results, shlex.join(["metricsearch", *sys.argv[1:]]))
                runs.append(load_run(out))
            summary = f"{len(results)} model(s) on {task} ({len(dataset.queries)} queries)"
        elif not compare:
            _fail("give --task and --data to evaluate, and/or --compare RUN_DIR to set earlier runs side by side")
        if compare:
            runs = [load_run(folder) for folder in compare] + runs
            table = compare_tables(runs)
            typer.echo(f"\n{table}")
            if out:
                out.mkdir(parents=True, exist_ok=True)
                (out / "compare.md").write_text(table + "\n")
                plot_runs(runs, out, prefix="compare_")
            summary = ", ".join(filter(None, [summary, f"{len(runs)} run(s) compared"]))
    except MetricSearchError as exc:
        _fail(str(exc))
    where = f" -> {out}" if out else " (add --out DIR for JSON and plots)"
    typer.echo(f"evaluated {summary} in {time.perf_counter() - started:.1f} s{where}")


snapshot_app = typer.Typer(
    help="Back up and restore the store: the embedded store (stop the service first: its lock refuses these "
    "while it runs) or, with MS_QDRANT_URL, a collection on a Qdrant server.",
    no_args_is_help=True,
)
app.add_typer(snapshot_app, name="snapshot")


@snapshot_app.command("create")
def snapshot_create(
    path: Annotated[Path, typer.Argument(help="archive to write (.tar.gz for the embedded store); must not exist")],
    bundle: Annotated[Path | None, typer.Option(help="bundle folder (MS_BUNDLE_DIR)")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="embedded store folder (MS_DATA_DIR)")] = None,
) -> None:
    """Write a consistent snapshot of the store (flushed; writes held back while it is read)."""
    from metricsearch.core.errors import MetricSearchError
    from metricsearch.service import create_snapshot as create

    try:
        report = create(_settings(bundle_dir=bundle, data_dir=data_dir), path)
    except MetricSearchError as exc:
        _fail(str(exc))
    typer.echo(f"snapshot of {report.items} items written to {report.path} ({report.bytes / 1e6:.1f} MB)")


@snapshot_app.command("restore")
def snapshot_restore(
    path: Annotated[Path, typer.Argument(help="archive made by `metricsearch snapshot create`")],
    bundle: Annotated[Path | None, typer.Option(help="bundle folder (MS_BUNDLE_DIR); must be the snapshot's")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="embedded store folder (MS_DATA_DIR)")] = None,
    overwrite: Annotated[bool, typer.Option(help="replace an existing store")] = False,
) -> None:
    """Replace the store by a snapshot, after checking it was made for this bundle."""
    from metricsearch.core.errors import MetricSearchError
    from metricsearch.service import restore_snapshot as restore

    try:
        report = restore(_settings(bundle_dir=bundle, data_dir=data_dir), path, overwrite=overwrite)
    except MetricSearchError as exc:
        _fail(str(exc))
    typer.echo(f"restored {report.items} items into {report.path}")


if __name__ == "__main__":
    app()
