"""`metricsearch`: serve, index, export, train, evaluate, tune, snapshot and rollout, one module per command group.
Each command imports only what it needs, so `serve` and `index` never import torch, and `export`, `train`,
`evaluate` and `tune` need the `train` extra.

Exit codes: 2 for a usage error (an unknown, missing, conflicting or invalid option: typer's own checks, and the
cross-option checks of the commands), 1 for a runtime failure (any `MetricSearchError`: a bad data file, a missing
bundle, a service that does not answer), reported once by `_Commands`."""

from __future__ import annotations

from typing import Annotated

import typer
from typer.core import TyperGroup

from metricsearch.cli import evaluate, export, index, rollout, serve, snapshot, train
from metricsearch.core.errors import MetricSearchError


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


app.command()(serve.serve)
app.command()(index.index)
app.command()(export.export)
app.command("train", cls=train.TrainCommand)(train.listed)
app.command()(evaluate.evaluate)
app.command()(evaluate.tune)
app.add_typer(snapshot.app, name="snapshot")
app.add_typer(rollout.app, name="rollout")

__all__ = ["app"]
