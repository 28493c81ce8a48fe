"""`metricsearch serve`: the HTTP service, in one process or, with a Qdrant server, in several."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from metricsearch.cli.options import DataDir, service_settings


def serve(
    ctx: typer.Context,
    bundle: Annotated[Path | None, typer.Option(help="bundle folder to serve (MS_BUNDLE_DIR)")] = None,
    host: Annotated[str | None, typer.Option(help="address to bind (MS_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="port to bind (MS_PORT)")] = None,
    data_dir: DataDir = None,
    workers: Annotated[
        int | None, typer.Option(min=1, help="worker processes; more than 1 needs a Qdrant server (MS_WORKERS)")
    ] = None,
) -> None:
    """Run the HTTP service: one process by default (the embedded store is owned by one process at a time);
    with a Qdrant server (MS_QDRANT_URL), --workers processes. docs/operations.md, "Serving fast", lists the uvicorn
    settings."""
    import faulthandler
    import os
    import signal

    import uvicorn

    from metricsearch.service import Service, configure_logging, create_app, store_traits, uvicorn_options

    overrides = {"bundle_dir": bundle, "host": host, "port": port, "data_dir": data_dir, "workers": workers}
    settings = service_settings(ctx, **overrides)
    configure_logging(settings.log_level)
    # A service that stops answering says where each thread waits: `kill -USR1 PID` writes their stacks to stderr.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    options = uvicorn_options(settings)
    if settings.workers > 1:
        if store_traits(settings).one_process:
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
    uvicorn.run(create_app(Service(settings)), **options)
