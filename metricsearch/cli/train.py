"""`metricsearch train`: fine-tune an encoder. Its options are TrainConfig's fields (name, type, default and
description as --help), built only when the command runs or shows its own help: importing TrainConfig loads torch,
which `metricsearch --help`, `serve` and `index` must not."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from functools import cache, wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.main
from typer.core import TyperCommand

from metricsearch.cli.export import named_fusion
from metricsearch.core.errors import MetricSearchError, TrainerError

if TYPE_CHECKING:
    from pydantic import BaseModel
    from pydantic.fields import FieldInfo

    from metricsearch.trainer import TrainConfig


# The entry `metricsearch --help` lists for `train` (TrainCommand parses and runs it); its docstring is the help.
def listed() -> None:
    """Fine-tune an encoder; the best checkpoint (OUT/best) exports with `metricsearch export --model OUT/best`,
    or at once with --bundle (needs the `train` extra). Options may also come from a --config file;
    docs/training.md explains each."""


class TrainCommand(TyperCommand):
    """`train` as the command list shows it (its name and help). typer builds every command's options when the CLI
    starts and cannot defer one, so this hands the parsing, and the command's own --help, to `full_command()`."""

    def make_context(self, info_name: str | None, args: list[str], parent=None, **extra: Any):
        return full_command().make_context(info_name, args, parent, **extra)


@cache
def full_command() -> TyperCommand:
    """`train` with all its options."""
    try:
        from metricsearch.trainer import TrainConfig
    except ModuleNotFoundError as exc:
        raise MetricSearchError(
            f"`metricsearch train` needs the `train` extra ({exc.name} is not installed): "
            "pip install 'metricsearch[train]'"
        ) from exc
    app = typer.Typer(add_completion=False)
    app.command(help=listed.__doc__)(with_options_of(TrainConfig, train))
    return typer.main.get_command(app)


def with_options_of(model: type[BaseModel], command: Callable[..., None]) -> Callable[..., None]:
    """`command` taking one option per field of `model` besides its own; a required field is an option left unset,
    so a --config file may give it. typer reads a function's signature, not a model, so this writes the signature."""
    parameters = inspect.signature(command, eval_str=True).parameters.values()
    own = [p.replace(kind=p.KEYWORD_ONLY) for p in parameters if p.kind is not p.VAR_KEYWORD]
    context = [p for p in own if p.annotation is typer.Context]
    rest = [p for p in own if p.annotation is not typer.Context]
    fields = [_option(name, field) for name, field in model.model_fields.items()]

    @wraps(command)
    def with_options(**values: Any) -> None:
        command(**values)

    with_options.__signature__ = inspect.Signature([*context, *fields, *rest])
    return with_options


def _option(name: str, field: FieldInfo) -> inspect.Parameter:
    annotation = field.annotation | None if field.is_required() else field.annotation
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        annotation=Annotated[annotation, typer.Option(help=field.description)],
        default=None if field.is_required() else field.default,
    )


def train(
    ctx: typer.Context,
    config: Annotated[
        Path | None, typer.Option(help="JSON/YAML file of these options, keys as named here; the command line wins")
    ] = None,
    bundle: Annotated[
        Path | None,
        typer.Option(
            help="when training ends, export OUT/best to this new bundle folder and, for a --catalog objective other "
            "than recobert, tune its fusion weights on the catalog (`metricsearch tune`, no labels)"
        ),
    ] = None,
    **options: Any,
) -> None:
    """Train with TrainConfig's `options`: only those typed on the command line override the --config file; the
    rest keep the file's value or, failing that, TrainConfig's default (the one --help shows)."""
    given = {name: value for name, value in options.items() if ctx.get_parameter_source(name).name == "COMMANDLINE"}
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
    if settings.pseudo_matches is not None and not settings.resume:
        _mine(settings)
    result = run_training(settings)
    if result.primary:
        typer.echo(result.summary(settings.objective))
        if bundle is not None:
            _bundle_from_training(settings, result.best_dir, bundle)


def run_name(out: Path) -> str:
    """The bundle's name: the run folder's (runs/abt-pm -> abt-pm), not its checkpoint's, which is always `best`."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", Path(out).resolve().name).strip("-.") or "trained"


def _mine(settings: TrainConfig) -> None:
    """--pseudo-matches: the bundle's fused ranking and the lexical scores, as `metricsearch evaluate` computes them
    in process, mine the triplets the run trains on (into OUT, before the trainer reads it)."""
    from metricsearch.core.records import Item
    from metricsearch.evaluation import BundleScorer, EvalData, LexicalScorer
    from metricsearch.trainer import PSEUDO_FILE, mine_pseudo_matches

    def scores(left: list[Item], right: list[Item]):
        data = EvalData("catalog-match", str(settings.catalog), left, right, [[] for _ in left], [None] * len(left))
        return BundleScorer(settings.pseudo_matches).scores(data), LexicalScorer().scores(data)

    typer.echo(mine_pseudo_matches(settings.catalog, scores, Path(settings.out) / PSEUDO_FILE))


def _bundle_from_training(settings: TrainConfig, best: Path, bundle: Path) -> None:
    """`train --bundle`: the best checkpoint exported as `metricsearch export` would, then, when its metric fuses
    with lexical scores, given CATALOG_FUSION (after --pseudo-matches, the mining bundle's weights) and tuned on the
    catalog it was trained on."""
    from metricsearch.core.bundle import load_bundle
    from metricsearch.evaluation import tune as tune_weights
    from metricsearch.export import export_bundle

    recobert = settings.objective == "recobert"
    tuned_here = settings.catalog is not None and not recobert
    fusion = named_fusion("catalog") if tuned_here else None
    if settings.pseudo_matches is not None:  # the encoder refines the mining bundle's: it starts from its weights
        fusion = load_bundle(settings.pseudo_matches).manifest.fusion or fusion
    export_bundle(
        best,
        bundle,
        name=run_name(settings.out),
        metric="recobert" if recobert else None,
        pooling=settings.pooling,
        rank_k=settings.rank_k,
        objective=settings.objective,
        fusion=fusion,
    )
    if not tuned_here:
        why = "RecoBERT's own score fusion ranks" if recobert else "no catalog to tune on: the metric alone ranks"
        typer.echo(f"bundle written to {bundle} (no lexical fusion: {why})")
        return
    tuned = tune_weights(settings.catalog, bundle)
    weights = ", ".join(f"{name} {w:g}" for name, w in tuned.weights.items())
    typer.echo(f"bundle written to {bundle}, tuned on {settings.catalog.name}: {weights}")
