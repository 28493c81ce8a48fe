"""Backup and restore of the store behind `metricsearch snapshot create|restore`.

Embedded store: a .tar.gz of `store.json` and the live shard folder, read after a flush with writes held back,
so it is consistent. Both commands open the store themselves, and the store's WAL lock refuses them while a
service holds it (stop the service first): nothing ever reads or replaces files under a running engine.
Restore checks the archive was made for the configured bundle, unpacks next to the target, loads it, and only
then swaps it in. The engine preallocates sparse files, so restore writes zero blocks back as holes.

Qdrant server: the server's own collection snapshot (create, download, delete on the server), restored by
uploading it. The snapshot (a tar) holds the collection's config.json with the metadata that records the bundle:
restore checks it before the upload replaces the collection.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

import httpx
from qdrant_client import QdrantClient
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse
from qdrant_edge import EdgeShard

from metricsearch.core.bundle import load_bundle
from metricsearch.core.errors import InvalidInputError, StoreUnavailableError
from metricsearch.service.catalog import vector_schema
from metricsearch.service.config import Settings
from metricsearch.service.store.base import VectorSchema
from metricsearch.service.store.edge import SIDECAR, EdgeStore
from metricsearch.service.store.payload import check_schema
from metricsearch.service.store.remote import METADATA_KEY, check_collection

_CHUNK = 1 << 16
"""Extraction block: an all-zero one becomes a hole, so it is small enough to find the holes between extents."""
_TRANSFER_TIMEOUT_S = 600
_SERVER_ERRORS = (httpx.HTTPError, ResponseHandlingException, UnexpectedResponse, OSError)


@dataclass(frozen=True)
class SnapshotReport:
    path: Path
    items: int
    bytes: int


def create(settings: Settings, target: Path) -> SnapshotReport:
    """Write a snapshot of the configured store to `target` (a .tar.gz for the embedded store)."""
    target = Path(target)
    if target.exists():
        raise InvalidInputError(f"{target} exists: choose a new path, snapshots are never overwritten")
    target.parent.mkdir(parents=True, exist_ok=True)
    if settings.qdrant_url:
        return _create_remote(settings, target)
    store = EdgeStore(settings.data_dir / settings.collection, _schema(settings), optimize_after_writes=0)
    partial = target.with_name(target.name + ".partial")
    try:
        with store.frozen() as files, tarfile.open(partial, "w:gz", compresslevel=1) as archive:
            for path in files:
                archive.add(path, arcname=path.name)
        items = store.count()
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        store.close()
    partial.rename(target)
    return SnapshotReport(target, items, target.stat().st_size)


def restore(settings: Settings, source: Path, *, overwrite: bool = False) -> SnapshotReport:
    """Replace the configured store by the snapshot at `source`; an existing store only with `overwrite`."""
    source = Path(source)
    if not source.is_file():
        raise InvalidInputError(f"no snapshot at {source}")
    if settings.qdrant_url:
        return _restore_remote(settings, source, overwrite=overwrite)
    schema = _schema(settings)
    store_dir = settings.data_dir / settings.collection
    if store_dir.exists() and any(store_dir.iterdir()):
        if not overwrite:
            raise InvalidInputError(f"{store_dir} holds a store: pass --overwrite to replace it")
        _refuse_if_open(store_dir)
    staging = store_dir.with_name(store_dir.name + ".restoring")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        _unpack(source, staging)
        try:
            state = json.loads((staging / SIDECAR).read_text())
            identity, sizes = state["identity"], state["sizes"]
        except (ValueError, KeyError, TypeError) as e:
            raise InvalidInputError(f"{source}: its {SIDECAR} is damaged ({e!r})") from e
        check_schema(
            identity,
            sizes,
            schema,
            where=f"The snapshot {source}",
            fix="Restore it with the bundle that made it (MS_BUNDLE_DIR), or re-index the catalog.",
        )
        restored = EdgeStore(staging, schema, optimize_after_writes=0)
        items = restored.count()
        restored.close()
        shutil.rmtree(store_dir, ignore_errors=True)
        staging.rename(store_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return SnapshotReport(store_dir, items, source.stat().st_size)


def _schema(settings: Settings) -> VectorSchema:
    return vector_schema(load_bundle(settings.bundle_dir))


def _refuse_if_open(store_dir: Path) -> None:
    """Take each shard's WAL lock for a moment: a running service holds it. A damaged shard is no obstacle,
    since replacing it is what a restore is for."""
    for shard_dir in store_dir.glob("shard-*"):
        try:
            EdgeShard.load(str(shard_dir)).close()
        except Exception as e:
            if "WouldBlock" in str(e):
                raise StoreUnavailableError(
                    f"{store_dir} is open in a running service (its WAL is locked): stop the service, then restore"
                ) from e


def _unpack(source: Path, target: Path) -> None:
    """Extract a snapshot; zero blocks become holes, so the engine's sparse files stay sparse."""
    try:
        with tarfile.open(source, "r:gz") as archive:
            for member in archive:
                member = tarfile.data_filter(member, str(target))  # no absolute paths, '..' or links out
                path = target / member.name
                if member.isdir():
                    path.mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isfile():
                    raise InvalidInputError(f"{source}: {member.name} is not a file: not a metricsearch snapshot")
                path.parent.mkdir(parents=True, exist_ok=True)
                with archive.extractfile(member) as src, path.open("wb") as dst:
                    while block := src.read(_CHUNK):
                        if block.count(0) == len(block):
                            dst.seek(len(block), 1)
                        else:
                            dst.write(block)
                    dst.truncate(member.size)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise InvalidInputError(f"{source} is not a readable snapshot archive ({e})") from e
    if not (target / SIDECAR).is_file():
        raise InvalidInputError(f"{source} holds no {SIDECAR}: it is not a metricsearch snapshot")


# --- Qdrant server


def _server(settings: Settings) -> tuple[QdrantClient, dict[str, str]]:
    api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
    client = QdrantClient(
        url=settings.qdrant_url, api_key=api_key, timeout=_TRANSFER_TIMEOUT_S, check_compatibility=False
    )
    return client, ({"api-key": api_key} if api_key else {})


def _create_remote(settings: Settings, target: Path) -> SnapshotReport:
    client, headers = _server(settings)
    collection = settings.collection
    try:
        snapshot = client.create_snapshot(collection, wait=True)
        if snapshot is None:
            raise StoreUnavailableError(f"Qdrant at {settings.qdrant_url} made no snapshot of {collection!r}")
        url = f"{settings.qdrant_url.rstrip('/')}/collections/{collection}/snapshots/{snapshot.name}"
        try:
            with httpx.stream("GET", url, headers=headers, timeout=_TRANSFER_TIMEOUT_S) as response:
                response.raise_for_status()
                with target.open("wb") as f:
                    for block in response.iter_bytes(_CHUNK):
                        f.write(block)
        finally:
            client.delete_snapshot(collection, snapshot.name, wait=True)
        items = client.count(collection, exact=True).count
    except _SERVER_ERRORS as e:
        raise StoreUnavailableError(f"snapshot of {collection!r} on {settings.qdrant_url} failed: {e}") from e
    finally:
        client.close()
    return SnapshotReport(target, items, target.stat().st_size)


def _restore_remote(settings: Settings, source: Path, *, overwrite: bool) -> SnapshotReport:
    _check_server_snapshot(source, _schema(settings))
    client, headers = _server(settings)
    collection = settings.collection
    try:
        if client.collection_exists(collection) and not overwrite:
            raise InvalidInputError(
                f"collection {collection!r} exists on {settings.qdrant_url}: pass --overwrite to replace it"
            )
        url = f"{settings.qdrant_url.rstrip('/')}/collections/{collection}/snapshots/upload"
        with source.open("rb") as f:
            response = httpx.post(
                url,
                params={"priority": "snapshot", "wait": "true"},
                files={"snapshot": (source.name, f)},
                headers=headers,
                timeout=_TRANSFER_TIMEOUT_S,
            )
        response.raise_for_status()
        items = client.count(collection, exact=True).count
    except _SERVER_ERRORS as e:
        raise StoreUnavailableError(f"restore of {collection!r} on {settings.qdrant_url} failed: {e}") from e
    finally:
        client.close()
    return SnapshotReport(source, items, source.stat().st_size)


def _check_server_snapshot(source: Path, schema: VectorSchema) -> None:
    """Refuse a snapshot of another bundle's collection (or not a Qdrant collection snapshot) before anything on the
    server changes: its config.json gives the vector sizes and the bundle record (RemoteStore's metadata)."""
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
