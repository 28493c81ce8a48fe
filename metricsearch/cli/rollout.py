"""`metricsearch rollout start|status|swap|abort`: a new bundle rolled out through a running service."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from metricsearch.cli.options import service_settings

if TYPE_CHECKING:
    from metricsearch.core.schemas import RolloutStatus

app = typer.Typer(
    help="Roll a new model bundle out without downtime, through a running service (embedded store): it re-embeds "
    "every stored item into a second store, for the new bundle, while it answers from the live one; swap when "
    '`status` says ready (docs/operations.md, "Model rollout").',
    no_args_is_help=True,
)
RolloutUrl = Annotated[str, typer.Option(help="the running service")]
RolloutKey = Annotated[str | None, typer.Option(help="the service's write key (MS_API_KEY)")]


@contextmanager
def _rollout_client(ctx: typer.Context, url: str, api_key: str | None):
    from metricsearch.client import Client

    settings = service_settings(ctx, api_key=api_key)
    key = settings.api_key.get_secret_value() if settings.api_key else None
    with Client(url, key, timeout_s=300) as client:
        yield client


def progress_line(status: RolloutStatus) -> str:
    """The rollout's state in one line: items copied, rate and time left while copying, the error of a failed one."""
    if status.state == "none":
        return f"no rollout under way; serving {status.model}"
    share = f" ({100 * status.copied / status.total:.0f}%)" if status.total else ""
    line = f"{status.state}: {status.model} -> {status.target}, {status.copied} of {status.total} items copied{share}"
    if status.items_per_s is not None:
        line += f", {status.items_per_s:.0f} items/s"
    if status.state == "copying" and status.eta_s is not None:
        line += f", ETA {status.eta_s:.0f} s"
    return line + (f"; error: {status.error}" if status.error else "")


@app.command("start")
def rollout_start(
    ctx: typer.Context,
    bundle: Annotated[Path, typer.Option(help="the new bundle's folder (the service reads it: a path on its machine)")],
    url: RolloutUrl = "http://127.0.0.1:8000",
    api_key: RolloutKey = None,
) -> None:
    """Start re-embedding every stored item with --bundle into a second store; the service keeps answering."""
    with _rollout_client(ctx, url, api_key) as client:
        typer.echo(progress_line(client.rollout_start(str(bundle.resolve()))))


@app.command("status")
def rollout_status(ctx: typer.Context, url: RolloutUrl = "http://127.0.0.1:8000", api_key: RolloutKey = None) -> None:
    """Show the rollout's progress: items copied, items/s and time left; exit code 1 when it failed."""
    with _rollout_client(ctx, url, api_key) as client:
        status = client.rollout_status()
    typer.echo(progress_line(status))
    if status.state == "failed":
        raise typer.Exit(code=1)


@app.command("swap")
def rollout_swap(ctx: typer.Context, url: RolloutUrl = "http://127.0.0.1:8000", api_key: RolloutKey = None) -> None:
    """Serve the new bundle from the next request on (refused until `status` says ready)."""
    with _rollout_client(ctx, url, api_key) as client:
        typer.echo(progress_line(client.rollout_swap()))


@app.command("abort")
def rollout_abort(ctx: typer.Context, url: RolloutUrl = "http://127.0.0.1:8000", api_key: RolloutKey = None) -> None:
    """Drop the rollout's second store; the service goes on with its current bundle."""
    with _rollout_client(ctx, url, api_key) as client:
        typer.echo(progress_line(client.rollout_abort()))
