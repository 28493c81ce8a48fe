"""Snapshots of the embedded store: a .tar.gz of `store.json` and the live shard folder, read after a flush with
writes held back, so it is consistent. Both snapshot commands open the store themselves, and its WAL lock refuses
them while a service holds it (stop the service first): nothing ever reads or replaces files under a running engine.
A restore unpacks next to the store, checks the snapshot was made for the configured bundle, loads it, and only then
swaps it in the way a build's copy goes live: as a new generation that `store.json`, replaced by one atomic rename,
names. Until that rename the old store is whole; after it the new one is, and the old generation is removed. The
engine preallocates sparse files, so a restore writes zero blocks back as holes."""

from __future__ import annotations

import json
import logging
import shutil
import tarfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from qdrant_edge import EdgeShard

from metricsearch.core.errors import InvalidInputError, StoreUnavailableError
from metricsearch.service.store.atomic import fsync_tree, written_whole
from metricsearch.service.store.base import VectorSchema
from metricsearch.service.store.edge.layout import SIDECAR, live_generation, shard_dir, shard_dirs, write_sidecar
from metricsearch.service.store.edge.writes import LiveShard
from metricsearch.service.store.payload import check_schema

logger = logging.getLogger(__name__)

_UNPACK_CHUNK = 1 << 16
"""Extraction block: an all-zero one becomes a hole, so it is small enough to find the holes between extents."""


def write(live: LiveShard, count: Callable[[], int], target: Path) -> int:
    """Write the store's snapshot to `target` (whole or not at all); returns the items it holds."""
    with (
        live.frozen() as files,
        written_whole(target) as partial,
        tarfile.open(partial, "w:gz", compresslevel=1) as archive,
    ):
        for path in files:
            archive.add(path, arcname=path.name)
        return count()


def restore(path: Path, schema: VectorSchema, source: Path, *, overwrite: bool, count_at: Callable[[Path], int]) -> int:
    """Replace the store at `path` by the snapshot at `source`; returns the items it holds (`count_at(folder)` opens
    a store there and counts them, which also proves it loads). The live shards' WAL locks are held from the start
    until the swap, so no service opens the store meanwhile."""
    occupied = path.exists() and any(path.iterdir())
    if occupied and not overwrite:
        raise InvalidInputError(f"{path} holds a store: pass --overwrite to replace it")
    staging = path.with_name(path.name + ".restoring")
    try:
        with _holding(path):
            shutil.rmtree(staging, ignore_errors=True)
            _unpack(source, staging, schema)
            items = count_at(staging)  # which upgrades a snapshot of an older format to a new generation
            generation, _ = live_generation(staging, schema)
            if occupied:
                old = _swap_in(path, shard_dir(staging, generation), schema)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                staging.rename(path)  # replaces an empty folder; refuses one a store appeared in meanwhile
                old = []
        for folder in old:  # after the locks are released: no engine holds them any more
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return items


@contextmanager
def _holding(path: Path) -> Iterator[None]:
    """Hold the WAL lock of every shard under `path`: a running service holds the live one, so this refuses a store
    in use, and no service opens it while held. A shard that does not load is no obstacle: replacing a damaged store
    is what a restore is for."""
    with ExitStack() as held:
        for folder in sorted(path.glob("shard-*")):
            try:
                shard = EdgeShard.load(str(folder))
            except Exception as e:
                if "WouldBlock" in str(e):
                    raise StoreUnavailableError(
                        f"{path} is open in a running service (its WAL is locked): stop the service, then restore"
                    ) from e
                logger.info("%s does not load (%s); the restore replaces it", folder, e)
                continue
            held.callback(shard.close)
        yield


def _unpack(source: Path, target: Path, schema: VectorSchema) -> None:
    """Extract a snapshot made for `schema`'s bundle, checking it holds the generation it names; zero blocks become
    holes, so the engine's sparse files stay sparse."""
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
                    while block := src.read(_UNPACK_CHUNK):
                        if block.count(0) == len(block):
                            dst.seek(len(block), 1)
                        else:
                            dst.write(block)
                    dst.truncate(member.size)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise InvalidInputError(f"{source} is not a readable snapshot archive ({e})") from e
    if not (target / SIDECAR).is_file():
        raise InvalidInputError(f"{source} holds no {SIDECAR}: it is not a metricsearch snapshot")
    try:
        state = json.loads((target / SIDECAR).read_text())
        identity, sizes, generation = state["identity"], state["sizes"], int(state["generation"])
    except (ValueError, KeyError, TypeError) as e:
        raise InvalidInputError(f"{source}: its {SIDECAR} is damaged ({e!r})") from e
    check_schema(
        identity,
        sizes,
        schema,
        where=f"The snapshot {source}",
        fix="Restore it with the bundle that made it (MS_BUNDLE_DIR), or re-index the catalog.",
    )
    if not shard_dir(target, generation).is_dir():
        raise InvalidInputError(f"{source} holds no shard-{generation}/, which its {SIDECAR} names: it is damaged")


def _swap_in(path: Path, staged_shard: Path, schema: VectorSchema) -> list[Path]:
    """Move the staged shard into the store as its next generation, then make that generation live by rewriting
    `store.json`: one atomic rename, before which the old store is whole and after which the new one is (the next
    open removes the other generation). Returns the old generations' folders, for the caller to remove."""
    fsync_tree(staged_shard)
    generations = shard_dirs(path)
    generation = 1 + max(generations, default=0)
    staged_shard.rename(shard_dir(path, generation))
    # No cleanup when this fails: whether the rename happened, only store.json says, and the next open removes
    # whichever generation it does not name.
    write_sidecar(path, schema, generation)
    return list(generations.values())
