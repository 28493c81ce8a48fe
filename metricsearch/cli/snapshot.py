"""`metricsearch snapshot create|restore`: back up the store and restore it, checked against the bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from metricsearch.cli.options import DataDir, service_settings

app = typer.Typer(
    help="Back up and restore the store: the embedded store (stop the service first: its lock refuses these "
    "while it runs) or, with MS_QDRANT_URL, a collection on a Qdrant server.",
    no_args_is_help=True,
)


@app.command("create")
def snapshot_create(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="archive to write (.tar.gz for the embedded store); must not exist")],
    bundle: Annotated[Path | None, typer.Option(help="bundle folder (MS_BUNDLE_DIR)")] = None,
    data_dir: DataDir = None,
) -> None:
    """Write a consistent snapshot of the store (flushed; writes held back while it is read)."""
    from metricsearch.service import create_snapshot as create

    report = create(service_settings(ctx, bundle_dir=bundle, data_dir=data_dir), path)
    typer.echo(f"snapshot of {report.items} items written to {report.path} ({report.bytes / 1e6:.1f} MB)")


@app.command("restore")
def snapshot_restore(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="archive made by `metricsearch snapshot create`")],
    bundle: Annotated[Path | None, typer.Option(help="bundle folder (MS_BUNDLE_DIR); must be the snapshot's")] = None,
    data_dir: DataDir = None,
    overwrite: Annotated[bool, typer.Option(help="replace an existing store")] = False,
) -> None:
    """Replace the store by a snapshot, after checking it was made for this bundle."""
    from metricsearch.service import restore_snapshot as restore

    report = restore(service_settings(ctx, bundle_dir=bundle, data_dir=data_dir), path, overwrite=overwrite)
    typer.echo(f"restored {report.items} items into {report.path}")
