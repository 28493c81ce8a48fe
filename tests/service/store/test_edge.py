"""The embedded store alone: persistence, refusing another bundle's store, one owner, and the background HNSW build
(queries stay right during it, writes made during it survive the swap, a failed build loses nothing)."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from qdrant_edge import EdgeShard

from metricsearch.core.errors import StoreMismatchError, StoreUnavailableError
from metricsearch.core.lexical import term_vector
from metricsearch.service.config import Settings
from metricsearch.service.store import EdgeStore, edge, open_store
from metricsearch.service.store.base import Equals, Range
from tests.service.store.conftest import SCHEMA, Reference, unit


def shard_dirs(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.startswith("shard-"))


def query(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=SCHEMA.sizes[SCHEMA.ann]).astype(np.float32)


def assert_same_answers(store: EdgeStore, reference: Reference) -> None:
    assert store.count() == len(reference.items)
    for seed, conditions in enumerate([(), (Equals("new", True),), (Range("price", gte=20.0),)]):
        expected_ids, expected_scores = reference.search(query(seed), 10, conditions)
        result = store.search(query(seed), 10, conditions)
        assert result.ids == expected_ids
        np.testing.assert_allclose(result.scores, expected_scores, atol=1e-5)
        for listing in result.listings:  # from the mirror too, also after a reopen or a build's swap
            stored = reference.items[listing.id]
            assert (listing.title, listing.metadata) == (stored.title, stored.metadata)
        for name, matrix in result.vectors.items():  # read from the in-memory mirror, not the engine
            expected = np.array([unit(reference.items[i].vectors[name]) for i in expected_ids]).reshape(matrix.shape)
            np.testing.assert_allclose(matrix, expected, atol=1e-6)
    stored = store.get(list(reference.items), with_vectors=True)
    assert stored.keys() == reference.items.keys()
    for item_id, item in stored.items():
        assert item.content_hash == reference.items[item_id].content_hash
        np.testing.assert_allclose(
            item.vectors["description"], unit(reference.items[item_id].vectors["description"]), atol=1e-6
        )


@pytest.fixture
def slow_optimizer(monkeypatch):
    """The real optimiser, started `delay` seconds late, so a test can act while the build runs."""

    def install(delay: float) -> None:
        script = str(Path(edge.__file__).with_name("edge_optimize.py"))

        def command(shard_dir: Path) -> list[str]:
            code = (
                f"import runpy, sys, time; time.sleep({delay}); sys.argv = ['edge_optimize', {str(shard_dir)!r}]; "
                f"runpy.run_path({script!r}, run_name='__main__')"
            )
            return [sys.executable, "-c", code]

        monkeypatch.setattr(edge, "optimizer_command", command)

    return install


def test_reopen_keeps_everything(tmp_path, items):
    reference = Reference()
    store = EdgeStore(tmp_path / "s", SCHEMA)
    for batch in (items(range(30)), items(range(5, 10), seed=1, version=1)):
        store.upsert(batch)
        reference.upsert(batch)
    assert store.delete(["item-0", "item-1"]) == 2
    reference.delete(["item-0", "item-1"])
    store.close()
    store.close()  # idempotent

    reopened = EdgeStore(tmp_path / "s", SCHEMA)
    try:
        assert_same_answers(reopened, reference)
        assert reopened.get(["item-6"])["item-6"].title == "title 6 v1"
    finally:
        reopened.close()


@pytest.mark.parametrize(
    ("other", "needle"),
    [
        (replace(SCHEMA, sizes={"title": 8, "description": 16}), "'description': 16"),
        (replace(SCHEMA, sizes={"title": 8}), "{'title': 8}"),
        (replace(SCHEMA, identity="other-bundle@2"), "'other-bundle@2'"),
    ],
)
def test_store_of_another_bundle_refused(tmp_path, items, other, needle):
    EdgeStore(tmp_path / "s", SCHEMA).close()
    with pytest.raises(StoreMismatchError) as error:
        EdgeStore(tmp_path / "s", other)
    message = str(error.value)
    assert "'test-bundle@1'" in message and "{'title': 8, 'description': 12}" in message and needle in message
    assert "MS_DATA_DIR" in message and "re-index" in message
    EdgeStore(tmp_path / "s", SCHEMA).close()  # the refused open changed nothing


def test_foreign_folder_refused(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "notes.txt").write_text("mine")
    with pytest.raises(StoreMismatchError, match="not a metricsearch store"):
        EdgeStore(tmp_path / "s", SCHEMA)


def test_one_owner(edge_store, tmp_path):
    with pytest.raises(StoreUnavailableError, match="already open"):
        EdgeStore(tmp_path / "edge", SCHEMA)
    assert edge_store.readiness() is None


def test_open_store_without_url_is_embedded(tmp_path, items):
    store = open_store(Settings(data_dir=tmp_path, collection="things"), SCHEMA)
    try:
        assert isinstance(store, EdgeStore)
        store.upsert(items(range(2)))
    finally:
        store.close()
    assert json.loads((tmp_path / "things" / edge.SIDECAR).read_text())["identity"] == SCHEMA.identity


def test_build_keeps_queries_right_and_writes_made_meanwhile(tmp_path, items, slow_optimizer):
    slow_optimizer(1.0)
    reference = Reference()
    store = EdgeStore(tmp_path / "s", SCHEMA, optimize_after_writes=0, indexing_threshold_kb=1)
    try:
        store.upsert(items(range(600)))
        reference.upsert(items(range(600)))
        assert not store.has_hnsw

        store.optimize_now()
        during = [items(range(600, 650), seed=3), items(range(100, 110), seed=4, version=1)]
        for batch in during:
            store.upsert(batch)
            reference.upsert(batch)
        assert store.delete([f"item-{i}" for i in range(200, 210)]) == 10
        reference.delete([f"item-{i}" for i in range(200, 210)])
        assert not store.wait_for_maintenance(0), "the writes must land while the build runs"
        assert_same_answers(store, reference)
        assert not store.has_hnsw

        assert store.wait_for_maintenance(60)
        assert store.has_hnsw
        assert shard_dirs(tmp_path / "s") == ["shard-2"]
        assert_same_answers(store, reference)
        store.upsert(items(range(700, 705), seed=5))
        reference.upsert(items(range(700, 705), seed=5))
    finally:
        store.close()

    reopened = EdgeStore(tmp_path / "s", SCHEMA)
    try:
        assert reopened.has_hnsw
        assert_same_answers(reopened, reference)
    finally:
        reopened.close()


def test_build_starts_after_enough_writes(tmp_path, items):
    store = EdgeStore(tmp_path / "s", SCHEMA, optimize_after_writes=200, indexing_threshold_kb=1)
    try:
        for start in range(0, 150, 50):
            store.upsert(items(range(start, start + 50), seed=start))
        assert store.wait_for_maintenance(0) and not store.has_hnsw
        store.upsert(items(range(150, 250), seed=150))
        assert store.wait_for_maintenance(60)
        assert store.has_hnsw
        assert shard_dirs(tmp_path / "s") == ["shard-2"]

        store.upsert(items(range(250, 400), seed=250))
        assert store.wait_for_maintenance(0) and shard_dirs(tmp_path / "s") == ["shard-2"]
        store.upsert(items(range(400, 460), seed=400))
        assert store.wait_for_maintenance(60)
        assert shard_dirs(tmp_path / "s") == ["shard-3"]
        assert store.count() == 460
    finally:
        store.close()


def test_no_build_below_the_engine_threshold(tmp_path, items):
    """With the default threshold (about 10 MB a vector name) a build of a few hundred points would index nothing."""
    store = EdgeStore(tmp_path / "s", SCHEMA, optimize_after_writes=100)
    try:
        store.upsert(items(range(300)))
        assert store.wait_for_maintenance(0)
        assert not store.has_hnsw
        assert shard_dirs(tmp_path / "s") == ["shard-1"]
    finally:
        store.close()


@pytest.mark.parametrize(("interval", "flushed"), [(0.2, True), (0, False)])
def test_writes_flush_the_engine_every_checkpoint_interval(tmp_path, items, interval, flushed):
    """A write past the interval flushes: the segments then hold every point without the WAL, which the engine may
    drop. Without checkpoints (and no build) the WAL alone held them, and grew with every write."""
    store = EdgeStore(tmp_path / "s", SCHEMA, optimize_after_writes=0, checkpoint_interval_s=interval)
    try:
        store.upsert(items(range(50)))
        time.sleep(interval * 1.5)
        store.upsert(items(range(50, 60)))
        shutil.copytree(tmp_path / "s" / "shard-1", tmp_path / "copy", ignore=shutil.ignore_patterns("wal"))
    finally:
        store.close()
    copy = EdgeShard.load(str(tmp_path / "copy"))
    try:
        assert copy.info().points_count == (60 if flushed else 0)
    finally:
        copy.close()


def test_a_failed_checkpoint_keeps_the_write_and_says_so(tmp_path, items, monkeypatch, caplog):
    store = EdgeStore(tmp_path / "s", SCHEMA, optimize_after_writes=0, checkpoint_interval_s=0.01)
    try:
        store.upsert(items(range(5)))

        def disk_full() -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(store, "_flush_shard", disk_full)
        time.sleep(0.02)
        with caplog.at_level(logging.WARNING):
            store.upsert(items(range(5, 10)))
        assert "checkpoint flush failed" in caplog.text
        assert store.count() == 10
    finally:
        monkeypatch.undo()
        store.close()


def test_failed_build_keeps_the_shard(tmp_path, items, monkeypatch, caplog):
    monkeypatch.setattr(
        edge, "optimizer_command", lambda _: [sys.executable, "-c", "import sys, time; time.sleep(0.5); sys.exit(3)"]
    )
    reference = Reference()
    store = EdgeStore(tmp_path / "s", SCHEMA, optimize_after_writes=0, indexing_threshold_kb=1)
    try:
        store.upsert(items(range(300)))
        reference.upsert(items(range(300)))
        with caplog.at_level(logging.ERROR, logger=edge.__name__):
            store.optimize_now()
            store.upsert(items(range(300, 320), seed=1))
            reference.upsert(items(range(300, 320), seed=1))
            assert store.wait_for_maintenance(60)
        assert "failed" in caplog.text and "exited with 3" in caplog.text
        assert not store.has_hnsw
        assert shard_dirs(tmp_path / "s") == ["shard-1"]
        assert_same_answers(store, reference)

        monkeypatch.undo()
        store.optimize_now()
        assert store.wait_for_maintenance(60)
        assert store.has_hnsw
        assert_same_answers(store, reference)
    finally:
        store.close()


def test_close_during_build(tmp_path, items, slow_optimizer):
    slow_optimizer(5.0)
    reference = Reference()
    store = EdgeStore(tmp_path / "s", SCHEMA, optimize_after_writes=0, indexing_threshold_kb=1)
    store.upsert(items(range(300)))
    reference.upsert(items(range(300)))
    store.optimize_now()
    store.upsert(items(range(300, 310), seed=1))
    reference.upsert(items(range(300, 310), seed=1))
    started = time.perf_counter()
    store.close()
    assert time.perf_counter() - started < 3.0, "close() must stop the build, not wait for it"
    assert shard_dirs(tmp_path / "s") == ["shard-1"]
    reopened = EdgeStore(tmp_path / "s", SCHEMA)
    try:
        assert_same_answers(reopened, reference)
    finally:
        reopened.close()


def test_copies_left_by_a_crash_are_removed(tmp_path, items):
    EdgeStore(tmp_path / "s", SCHEMA).close()
    (tmp_path / "s" / "shard-2" / "segments").mkdir(parents=True)
    store = EdgeStore(tmp_path / "s", SCHEMA)
    try:
        assert shard_dirs(tmp_path / "s") == ["shard-1"]
        store.upsert(items(range(3)))
        assert store.count() == 3
    finally:
        store.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_optimizer_child_dies_with_the_service(tmp_path):
    """A build's child left running after `kill -9` of the service wrote on into a copy that the restarted service
    was deleting: it must die with its parent, and not start when the parent is already gone."""
    script = Path(edge.__file__).with_name("edge_optimize.py")
    # The parent starts a child that arms the death signal as the optimiser does, then waits forever.
    child_code = (
        f"import runpy, sys, time; ns = runpy.run_path({str(script)!r}); "
        "assert ns['die_with_parent'](int(sys.argv[1])); print('armed', flush=True); time.sleep(60)"
    )
    parent_code = (
        "import os, subprocess, sys, time; "
        f"child = subprocess.Popen([sys.executable, '-c', {child_code!r}, str(os.getpid())]); "
        "print(child.pid, flush=True); child.wait()"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    assert parent.stdout.readline().strip() == "armed"
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child_pid):
        time.sleep(0.05)
    assert not _alive(child_pid)

    gone = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "1"], capture_output=True, text=True, timeout=60
    )  # pid 1 is never this test's process, so the parent counts as gone
    assert gone.returncode == 3 and "gone" in gone.stderr


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, killed but not yet reaped by init, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_builds_still_start_when_items_carry_sparse_vectors(tmp_path, items):
    """The engine counts every sparse vector as indexed; counted as dense, they once hid every point from the build
    rule, and no HNSW was built again after the first, and made has_hnsw true before any build."""
    schema = replace(SCHEMA, sparse=("lexical_title", "lexical_text"))

    def with_terms(ids, seed):
        sparse = {"lexical_title": term_vector("red shirt"), "lexical_text": term_vector("red shirt cotton")}
        return [replace(item, sparse=sparse) for item in items(ids, seed=seed)]

    store = EdgeStore(tmp_path / "s", schema, optimize_after_writes=200, indexing_threshold_kb=1)
    try:
        store.upsert(with_terms(range(0, 150), seed=0))
        assert store.wait_for_maintenance(0) and not store.has_hnsw, "sparse vectors are no HNSW"
        store.upsert(with_terms(range(150, 250), seed=150))
        assert store.wait_for_maintenance(60) and store.has_hnsw
        assert shard_dirs(tmp_path / "s") == ["shard-2"]
        store.upsert(with_terms(range(250, 460), seed=250))
        assert store.wait_for_maintenance(60)
        assert shard_dirs(tmp_path / "s") == ["shard-3"]
    finally:
        store.close()
