"""Snapshots of a server's collection: the server's own collection snapshots (create, download, delete on the
server), restored by uploading one. A snapshot (a tar) holds the collection's config.json with the metadata that
records the bundle: restore checks it before the upload replaces the collection. Both use a client of their own,
not an open store, which would create a missing collection."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import httpx
from qdrant_client import QdrantClient

from metricsearch.core.errors import InvalidInputError, StoreUnavailableError
from metricsearch.service.config import Settings
from metricsearch.service.store.atomic import written_whole
from metricsearch.service.store.base import VectorSchema
from metricsearch.service.store.remote.collection import METADATA_KEY, check_collection
from metricsearch.service.store.remote.server import SERVER_ERRORS, api_key, client, server_url

_TRANSFER_TIMEOUT_S = 600
_TRANSFER_CHUNK = 1 << 16


def create(settings: Settings, target: Path) -> int:
    """Download a snapshot of the collection the settings name to `target` (whole or not at all); returns its
    items."""
    transfer, url, headers = _transfer_client(settings)
    collection = settings.collection
    try:
        snapshot = transfer.create_snapshot(collection, wait=True)
        if snapshot is None:
            raise StoreUnavailableError(f"Qdrant at {url} made no snapshot of {collection!r}")
        try:
            with (
                written_whole(target) as partial,
                httpx.stream(
                    "GET",
                    f"{url}/collections/{collection}/snapshots/{snapshot.name}",
                    headers=headers,
                    timeout=_TRANSFER_TIMEOUT_S,
                ) as response,
            ):
                response.raise_for_status()
                with partial.open("wb") as f:
                    for block in response.iter_bytes(_TRANSFER_CHUNK):
                        f.write(block)
        finally:
            transfer.delete_snapshot(collection, snapshot.name, wait=True)
        return transfer.count(collection, exact=True).count
    except SERVER_ERRORS as e:
        raise StoreUnavailableError(f"snapshot of {collection!r} on {url} failed: {e}") from e
    finally:
        transfer.close()


def restore(settings: Settings, schema: VectorSchema, source: Path, *, overwrite: bool) -> int:
    """Upload the snapshot; the server recovers the collection from it (replacing it is Qdrant's part). Returns the
    items it holds."""
    _check_snapshot(source, schema)
    transfer, url, headers = _transfer_client(settings)
    collection = settings.collection
    try:
        if transfer.collection_exists(collection) and not overwrite:
            raise InvalidInputError(f"collection {collection!r} exists on {url}: pass --overwrite to replace it")
        with source.open("rb") as f:
            response = httpx.post(
                f"{url}/collections/{collection}/snapshots/upload",
                params={"priority": "snapshot", "wait": "true"},
                files={"snapshot": (source.name, f)},
                headers=headers,
                timeout=_TRANSFER_TIMEOUT_S,
            )
        response.raise_for_status()
        return transfer.count(collection, exact=True).count
    except SERVER_ERRORS as e:
        raise StoreUnavailableError(f"restore of {collection!r} on {url} failed: {e}") from e
    finally:
        transfer.close()


def _transfer_client(settings: Settings) -> tuple[QdrantClient, str, dict[str, str]]:
    """A client with a timeout long enough for snapshot transfers, the server's URL and the headers for the REST
    calls made without the client (streamed download, multipart upload)."""
    key = api_key(settings)
    return client(settings, _TRANSFER_TIMEOUT_S), server_url(settings).rstrip("/"), ({"api-key": key} if key else {})


def _check_snapshot(source: Path, schema: VectorSchema) -> None:
    """Refuse a snapshot of another bundle's collection (or not a Qdrant collection snapshot) before anything on the
    server changes: its config.json gives the vector sizes and the bundle record (the collection's metadata)."""
    try:
        with tarfile.open(source, "r:") as archive:  # a server writes plain tar; members are skipped by seeking
            member = next((m for m in archive if os.path.normpath(m.name) == "config.json" and m.isfile()), None)
            if member is None:
                raise InvalidInputError(f"{source} holds no config.json: it is not a Qdrant collection snapshot")
            config = json.loads(archive.extractfile(member).read())
        vectors = config["params"]["vectors"]
        named = {"": vectors} if "size" in vectors else vectors
        sizes = {name: int(params["size"]) for name, params in named.items()}
    except (tarfile.TarError, EOFError, OSError, ValueError, KeyError, TypeError) as e:
        raise InvalidInputError(f"{source} is not a readable Qdrant collection snapshot ({e!r})") from e
    check_collection(
        (config.get("metadata") or {}).get(METADATA_KEY),
        sizes,
        schema,
        where=f"The snapshot {source}",
        fix="Restore it with the bundle that made it (MS_BUNDLE_DIR), or re-index the catalog.",
    )
