"""Snapshots of the embedded store through the Store interface: a snapshot restores the same items, a failed snapshot
leaves no file under its name, and a restore interrupted at any filesystem step (an error or a crash) leaves either
the old store or the new one, never none."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from metricsearch.service.config import Settings
from metricsearch.service.store import EdgeStore, store_type
from tests.service.store.conftest import SCHEMA

OLD_IDS, NEW_IDS = range(10), range(100, 120)
STEPS = {"os": ("rename", "replace", "fsync"), "shutil": ("rmtree",)}
"""The calls that change (or make durable) the files of a restore; a run of fsyncs counts as one step, and an
rmtree is interrupted after removing one file, half done."""
CRASH_STEPS = {"os": ("rename", "replace"), "shutil": ("rmtree",)}
"""The steps that change which folders exist, for the slower crash runs (one process each)."""


def ids(numbers: range) -> set[str]:
    return {f"item-{i}" for i in numbers}


def stored_ids(settings: Settings) -> set[str]:
    store = EdgeStore(settings.data_dir / settings.collection, SCHEMA, optimize_after_writes=0)
    try:
        found = set(store.get([*ids(OLD_IDS), *ids(NEW_IDS)]))
        assert store.count() == len(found)
        return found
    finally:
        store.close()


@pytest.fixture
def stores(tmp_path, items) -> tuple[Settings, Path, Path]:
    """A store holding the old items, a snapshot of it, and a snapshot of another store holding the new ones."""
    snapshots = []
    for name, numbers in (("live", OLD_IDS), ("source", NEW_IDS)):
        settings = Settings(data_dir=tmp_path / name)
        store = EdgeStore.from_settings(settings, SCHEMA)
        store.upsert(items(numbers, seed=numbers[0]))
        store.close()
        snapshots.append(EdgeStore.create_snapshot(settings, SCHEMA, tmp_path / f"{name}.tar.gz").path)
    return Settings(data_dir=tmp_path / "live"), *snapshots


@contextmanager
def interrupted(at: int, interrupt: Callable[[], None], steps: dict[str, tuple[str, ...]] = STEPS) -> Iterator[list]:
    """Call `interrupt` at the `at`-th step (counted from 0 over `steps`); yields the steps seen."""
    seen: list[str] = []
    patch = pytest.MonkeyPatch()
    for module, names in ((os, steps["os"]), (shutil, steps["shutil"])):
        for name in names:
            original = getattr(module, name)

            def step(*args, _name=name, _original=original, **kwargs):
                if not (_name == "fsync" and seen and seen[-1] == "fsync"):
                    seen.append(_name)
                    if len(seen) - 1 == at:
                        if _name == "rmtree":
                            remove_one_file(Path(args[0]))
                        interrupt()
                return _original(*args, **kwargs)

            patch.setattr(module, name, step)
    try:
        yield seen
    finally:
        patch.undo()


def remove_one_file(folder: Path) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            path.unlink()
            return


def fail() -> None:
    raise OSError(5, "injected failure")


def restore_counting_steps(live: Settings, archive: Path, steps: dict[str, tuple[str, ...]]) -> int:
    with interrupted(-1, fail, steps) as seen:
        EdgeStore.restore_snapshot(live, SCHEMA, archive, overwrite=True)
    return len(seen)


def test_snapshot_restores_the_same_items_and_replaces_a_store(stores, tmp_path):
    live, _, archive = stores
    fresh = Settings(data_dir=tmp_path / "fresh")
    report = store_type(fresh).restore_snapshot(fresh, SCHEMA, archive)
    assert report.items == len(NEW_IDS) and stored_ids(fresh) == ids(NEW_IDS)
    assert stored_ids(live) == ids(OLD_IDS)
    assert EdgeStore.restore_snapshot(live, SCHEMA, archive, overwrite=True).items == len(NEW_IDS)
    assert stored_ids(live) == ids(NEW_IDS)
    assert sorted(p.name for p in (live.data_dir).iterdir()) == ["items"]  # no staging left behind
    assert [p.name for p in (live.data_dir / "items").iterdir() if p.name.startswith("shard-")] == ["shard-2"]


def test_a_failed_snapshot_leaves_no_file_under_its_name(stores, tmp_path, monkeypatch):
    live, _, _ = stores
    target = tmp_path / "backup.tar.gz"
    written = []

    def add_then_fail(self, name, *args, **kwargs):
        if written:
            raise OSError(28, "No space left on device")
        written.append(name)
        return original(self, name, *args, **kwargs)

    original = tarfile.TarFile.add
    monkeypatch.setattr(tarfile.TarFile, "add", add_then_fail)
    with pytest.raises(OSError, match="No space"):
        EdgeStore.create_snapshot(live, SCHEMA, target)
    assert written and list(tmp_path.glob("backup*")) == []
    assert stored_ids(live) == ids(OLD_IDS)  # and the store was released


def test_restore_failing_at_every_step_leaves_the_old_or_the_new_store(stores):
    live, old, new = stores
    n_steps = restore_counting_steps(live, new, STEPS)
    outcomes = []
    for at in range(n_steps):
        EdgeStore.restore_snapshot(live, SCHEMA, old, overwrite=True)
        with interrupted(at, fail):
            try:
                EdgeStore.restore_snapshot(live, SCHEMA, new, overwrite=True)
            except OSError as e:  # some steps are cleanup whose errors are ignored
                assert "injected failure" in str(e)
        found = stored_ids(live)
        assert found in (ids(OLD_IDS), ids(NEW_IDS)), f"failure at step {at}"
        outcomes.append(found == ids(NEW_IDS))
    assert not outcomes[0] and outcomes[-1], "the steps cover both sides of the swap"
    EdgeStore.restore_snapshot(live, SCHEMA, new, overwrite=True)  # a retry succeeds
    assert stored_ids(live) == ids(NEW_IDS)


CRASH = """
import os, sys
from pathlib import Path
from metricsearch.service.config import Settings
from metricsearch.service.store import EdgeStore
from tests.service.store.conftest import SCHEMA
from tests.service.store.edge.test_snapshot import CRASH_STEPS, interrupted
with interrupted(int(sys.argv[1]), lambda: os._exit(70), CRASH_STEPS):
    EdgeStore.restore_snapshot(Settings(data_dir=Path(sys.argv[2])), SCHEMA, Path(sys.argv[3]), overwrite=True)
"""


@pytest.mark.slow
def test_restore_killed_at_every_step_leaves_the_old_or_the_new_store(stores):
    live, old, new = stores
    n_steps = restore_counting_steps(live, new, CRASH_STEPS)
    outcomes = []
    for at in range(n_steps):
        EdgeStore.restore_snapshot(live, SCHEMA, old, overwrite=True)
        killed = subprocess.run(
            [sys.executable, "-c", CRASH, str(at), str(live.data_dir), str(new)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=Path(__file__).parents[4],
        )
        assert killed.returncode == 70, killed.stderr
        found = stored_ids(live)
        assert found in (ids(OLD_IDS), ids(NEW_IDS)), f"killed at step {at}"
        outcomes.append(found == ids(NEW_IDS))
    assert not outcomes[0] and outcomes[-1], "the steps cover both sides of the swap"
    EdgeStore.restore_snapshot(live, SCHEMA, new, overwrite=True)  # what a crash left does not block a retry
    assert stored_ids(live) == ids(NEW_IDS)
