"""The entry `metricsearch snapshot create|restore` calls: what both stores share (a snapshot never overwrites a
file, a restore needs a snapshot file and the configured bundle's schema); the snapshot itself is the store's
(`Store.create_snapshot`, `Store.restore_snapshot`)."""

from __future__ import annotations

from pathlib import Path

from metricsearch.core.bundle import load_bundle
from metricsearch.core.errors import InvalidInputError
from metricsearch.service.config import Settings
from metricsearch.service.engine import vector_schema
from metricsearch.service.store import generations, store_type
from metricsearch.service.store.base import SnapshotReport

__all__ = ["SnapshotReport", "create", "restore"]


def create(settings: Settings, target: Path) -> SnapshotReport:
    """Write a snapshot of the configured store to `target` (a .tar.gz for the embedded store)."""
    target = Path(target)
    if target.exists():
        raise InvalidInputError(f"{target} exists: choose a new path, snapshots are never overwritten")
    target.parent.mkdir(parents=True, exist_ok=True)
    settings = generations(settings).serving()  # the store and bundle a model rollout swapped in, if any
    return store_type(settings).create_snapshot(settings, vector_schema(load_bundle(settings.bundle_dir)), target)


def restore(settings: Settings, source: Path, *, overwrite: bool = False) -> SnapshotReport:
    """Replace the configured store by the snapshot at `source`; an existing store only with `overwrite`."""
    source = Path(source)
    if not source.is_file():
        raise InvalidInputError(f"no snapshot at {source}")
    settings = generations(settings).serving()
    schema = vector_schema(load_bundle(settings.bundle_dir))
    return store_type(settings).restore_snapshot(settings, schema, source, overwrite=overwrite)
