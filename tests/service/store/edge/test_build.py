"""The embedded store's background HNSW build (store/edge/build.py): queries stay right during it, writes made during
it survive the swap, a failed or stopped build loses nothing, and builds start when enough is written above the
engine's threshold."""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from metricsearch.core.lexical import term_vector
from metricsearch.service.store import EdgeStore
from metricsearch.service.store.edge import build, layout
from tests.service.store.conftest import SCHEMA, Reference
from tests.service.store.edge.test_store import assert_same_answers, shard_dirs


@pytest.fixture
def slow_optimizer(monkeypatch):
    """The real optimiser, started `delay` seconds late, so a test can act while the build runs."""

    def install(delay: float) -> None:
        script = str(Path(build.__file__).with_name("optimize.py"))

        def command(shard_dir: Path) -> list[str]:
            code = (
                f"import runpy, sys, time; time.sleep({delay}); sys.argv = ['optimize', {str(shard_dir)!r}]; "
                f"runpy.run_path({script!r}, run_name='__main__')"
            )
            return [sys.executable, "-c", code]

        monkeypatch.setattr(build, "optimizer_command", command)

    return install


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


def test_a_store_opened_with_points_above_the_threshold_unindexed_builds_at_open(tmp_path, items):
    """As a store upgraded at open, restored, or closed while a build ran is; one indexed already does not build."""
    for _ in range(2):
        store = EdgeStore(tmp_path / "s", SCHEMA, optimize_after_writes=0, indexing_threshold_kb=1)
        store.upsert(items(range(300)))
        store.close()
    assert shard_dirs(tmp_path / "s") == ["shard-1"], "builds off: none at open"
    store = EdgeStore(tmp_path / "s", SCHEMA, optimize_after_writes=200, indexing_threshold_kb=1)
    try:
        assert store.wait_for_maintenance(60) and store.has_hnsw and shard_dirs(tmp_path / "s") == ["shard-2"]
    finally:
        store.close()
    store = EdgeStore(tmp_path / "s", SCHEMA, optimize_after_writes=200, indexing_threshold_kb=1)
    try:
        assert store.wait_for_maintenance(0) and shard_dirs(tmp_path / "s") == ["shard-2"]
        assert store.count() == 300
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


def test_failed_build_keeps_the_shard(tmp_path, items, monkeypatch, caplog):
    monkeypatch.setattr(
        build, "optimizer_command", lambda _: [sys.executable, "-c", "import sys, time; time.sleep(0.5); sys.exit(3)"]
    )
    reference = Reference()
    store = EdgeStore(tmp_path / "s", SCHEMA, optimize_after_writes=0, indexing_threshold_kb=1)
    try:
        store.upsert(items(range(300)))
        reference.upsert(items(range(300)))
        with caplog.at_level(logging.ERROR, logger=build.__name__):
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


def test_the_optimiser_runs_at_the_lowest_priority_and_the_service_keeps_its_own(tmp_path, items, monkeypatch):
    """By-id requests during a build stay near their idle latency only if the optimiser yields the cores to them."""
    script, seen = str(Path(build.__file__).with_name("optimize.py")), tmp_path / "nice"

    def command(shard_dir: Path) -> list[str]:
        code = (
            f"import os, runpy, sys, time; time.sleep(0.5); "
            f"open({str(seen)!r}, 'w').write(str(os.getpriority(os.PRIO_PROCESS, 0))); "
            f"sys.argv = ['optimize', {str(shard_dir)!r}]; runpy.run_path({script!r}, run_name='__main__')"
        )
        return [sys.executable, "-c", code]

    monkeypatch.setattr(build, "optimizer_command", command)
    own = os.getpriority(os.PRIO_PROCESS, 0)
    store = EdgeStore(tmp_path / "s", SCHEMA, optimize_after_writes=0, indexing_threshold_kb=1)
    try:
        store.upsert(items(range(300)))
        store.optimize_now()
        assert store.wait_for_maintenance(60) and store.has_hnsw
    finally:
        store.close()
    assert int(seen.read_text()) == build.BUILD_NICE
    assert os.getpriority(os.PRIO_PROCESS, 0) == own


def _int8_copies(store_path: Path) -> tuple[int, int]:
    """The live shard's segments with an HNSW graph on the ANN vector, and how many of them also hold its int8 copies
    (the engine's files: each beside that vector's floats)."""
    graphs = [s for s in store_path.glob("shard-*/segments/*") if (s / f"vector_index-{SCHEMA.ann}").is_dir()]
    return len(graphs), sum((s / f"vector_storage-{SCHEMA.ann}" / "quantized.data").exists() for s in graphs)


def test_a_build_gives_the_ann_vector_int8_copies_and_searches_keep_float_scores(tmp_path, items):
    """The walk ranks by int8 copies and rescores its hits; an exact search (a filter a payload index serves) compares
    the floats: both answer as the brute-force reference does, with its scores."""
    reference = Reference()
    store = EdgeStore(
        tmp_path / "s",
        SCHEMA,
        optimize_after_writes=0,
        indexing_threshold_kb=1,
        indexed_fields={"new": "bool", "price": "float"},
    )
    try:
        store.upsert(items(range(600)))
        reference.upsert(items(range(600)))
        assert _int8_copies(tmp_path / "s") == (0, 0), "no graph and no copies before a build"
        store.optimize_now()
        assert store.wait_for_maintenance(60) and store.has_hnsw
        graphs, copies = _int8_copies(tmp_path / "s")
        assert graphs >= 1 and copies == graphs
        assert_same_answers(store, reference)
    finally:
        store.close()


def test_a_store_built_without_int8_copies_gets_them_at_its_next_build(tmp_path, items, monkeypatch):
    """A store an earlier version built keeps answering as it is, and its next build (after enough writes, or on
    demand) adds the copies: the engine rebuilds a segment whose configuration differs from the shard's."""
    reference = Reference()
    monkeypatch.setattr(layout, "ANN_INT8", None)
    store = EdgeStore(tmp_path / "s", SCHEMA, optimize_after_writes=0, indexing_threshold_kb=1)
    store.upsert(items(range(600)))
    reference.upsert(items(range(600)))
    store.optimize_now()
    assert store.wait_for_maintenance(60) and store.has_hnsw
    store.close()
    graphs, copies = _int8_copies(tmp_path / "s")
    assert graphs >= 1 and copies == 0
    monkeypatch.undo()

    store = EdgeStore(tmp_path / "s", SCHEMA, optimize_after_writes=0, indexing_threshold_kb=1)
    try:
        assert_same_answers(store, reference)
        store.optimize_now()
        assert store.wait_for_maintenance(60)
        graphs, copies = _int8_copies(tmp_path / "s")
        assert graphs >= 1 and copies == graphs and shard_dirs(tmp_path / "s") == ["shard-3"]
        assert_same_answers(store, reference)
    finally:
        store.close()
