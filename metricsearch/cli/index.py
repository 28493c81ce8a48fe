"""`metricsearch index`: bulk-load a catalog through a running service or straight into the embedded store."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, astuple
from itertools import islice
from pathlib import Path
from typing import Annotated

import typer

from metricsearch.cli.options import service_settings
from metricsearch.core.errors import MetricSearchError


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

    settings = service_settings(ctx, bundle_dir=bundle, data_dir=data_dir, api_key=api_key)
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
    from metricsearch.service import Service

    runtime = Service(settings).live
    try:
        yield lambda chunk: astuple(runtime.engine.indexer.index(chunk, settings.index_batch_size))
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
