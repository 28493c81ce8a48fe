"""The embedded store's background HNSW build. qdrant-edge builds HNSW only on an explicit `optimize()`, which holds
the GIL for seconds: run in a thread it would freeze every request (QDRANT_EDGE.md). So the build copies the flushed
shard to the next generation folder, a child process (optimize.py) optimises the copy, and the copy replaces the
live shard after replaying the writes made meanwhile. Queries use the live shard throughout; a failed build leaves
it in place."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from qdrant_edge import CountRequest, EdgeConfig, EdgeShard, Filter, HasVectorCondition

from metricsearch.service.store.atomic import fsync_tree
from metricsearch.service.store.base import VectorSchema
from metricsearch.service.store.edge.layout import copy_tree, shard_dir, write_sidecar
from metricsearch.service.store.edge.writes import LiveShard

logger = logging.getLogger(__name__)


BUILD_NICE = 19
"""The optimiser's nice value: the lowest priority that still guarantees it progress (SCHED_IDLE could starve a build
for as long as the cores stay busy, leaving new items brute-forced). What it buys: BENCHMARKS.md "Latency", by id
during a build."""


def lower_priority(pid: int) -> None:
    """Set the optimiser's nice value as soon as it has started. On Linux a nice value belongs to a thread and new
    threads take their creator's, so this must reach the child's main thread before it starts the threads that build
    the graph: it has ~0.1 s of imports and loading first, and should this lose that race, the child's own nice 10
    (optimize.py) still holds. (Forking from a lowered thread would have no race, but optimize.py dies with the thread
    that forked it.)"""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, BUILD_NICE)
    except (AttributeError, OSError) as exc:  # no setpriority (Windows), or the child is gone already
        logger.info("HNSW build: the optimiser keeps its own priority (%s)", exc)


def optimizer_command(shard_dir: Path) -> list[str]:
    """The child process that optimises a shard copy (a function so tests can make it fail)."""
    return [sys.executable, str(Path(__file__).with_name("optimize.py")), str(shard_dir), str(os.getpid())]


class HnswBuild:
    """Builds of the live shard's HNSW index: started after `optimize_after_writes` points written since the last
    (0 = never) once the unindexed points pass the engine's indexing threshold (`threshold_kb`), or on demand."""

    def __init__(
        self,
        live: LiveShard,
        schema: VectorSchema,
        config: EdgeConfig,
        *,
        optimize_after_writes: int,
        threshold_kb: int,
    ) -> None:
        self._live = live
        self._schema = schema
        self._config = config
        self._optimize_after_writes = optimize_after_writes
        self._threshold_kb = threshold_kb
        self._writes_since_build = 0
        self._builder: threading.Thread | None = None
        self._child: subprocess.Popen[str] | None = None

    def wrote(self, points: int) -> None:
        """After each write, under the write lock: start a build when one is due."""
        self._writes_since_build += points
        if self._due():
            self.start()

    def start(self) -> None:
        """Start a build (no-op while one runs, or once the store closed); the caller holds the write lock."""
        if self._live.closed or self.running:
            return
        self._builder = threading.Thread(target=self._build, name="edge-hnsw-build", daemon=True)
        self._builder.start()

    @property
    def running(self) -> bool:
        return self._builder is not None and self._builder.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a running build to finish; True when none runs any more."""
        builder = self._builder
        if builder is not None:
            builder.join(timeout)
        return not self.running

    def stop(self) -> None:
        """Kill the child and wait for the build to give up; the store is marked closed first, so its copy is
        discarded."""
        child = self._child
        if child is not None and child.poll() is None:
            child.kill()
        if self._builder is not None:
            self._builder.join()

    def dense_indexed(self, indexed_vectors_count: int) -> int:
        """Dense vectors in indexed segments, out of the live shard's indexed_vectors_count; the caller holds the
        lock. The engine counts every stored sparse vector as indexed too (a sparse index is always built), so those
        are taken off."""
        shard = self._live.shard
        sparse = sum(
            shard.count(CountRequest(filter=Filter(must=[HasVectorCondition(name)]))) for name in self._schema.sparse
        )
        return indexed_vectors_count - sparse

    def start_if_unindexed(self) -> None:
        """At open, under the write lock: start a build when builds are on and the unindexed points are above the
        threshold (a store just upgraded or restored, or one closed while a build ran), rather than serve them by
        brute force until `optimize_after_writes` more points are written."""
        if self._optimize_after_writes and not self.running and self._unindexed_above_threshold():
            self.start()

    def _due(self) -> bool:
        if not self._optimize_after_writes or self._writes_since_build < self._optimize_after_writes:
            return False
        if self.running:
            return False
        return self._unindexed_above_threshold()

    def _unindexed_above_threshold(self) -> bool:
        with self._live.lock:
            info = self._live.shard.info()
            indexed = self.dense_indexed(info.indexed_vectors_count)
        # Points outside indexed segments, as float32 bytes of the ANN vector: the engine indexes a segment only
        # above its threshold, so a build below it would copy the shard for nothing. (Deleted points still count
        # as indexed, so this errs towards later builds.)
        unindexed = info.points_count - indexed // len(self._schema.sizes)
        return unindexed * self._schema.sizes[self._schema.ann] * 4 >= self._threshold_kb * 1024

    def _build(self) -> None:
        live = self._live
        generation = live.generation + 1
        target = shard_dir(live.path, generation)
        try:
            copy_ms = self._copy_live_shard(target)
            if copy_ms is None:
                return
            report = self._optimize_copy(target)
            if not report["optimized"]:
                logger.info("HNSW build of %s: nothing to optimise (%s)", live.path, report)
                return
            swap = self._swap_in(target, generation)
            if swap is not None:
                logger.info(
                    "HNSW build of %s: copy %.0f ms, child %s, swap %s (ms; writes wait during copy and swap)",
                    live.path,
                    copy_ms,
                    report,
                    swap,
                )
        except Exception:
            if not live.closed:
                logger.exception("HNSW build of %s failed; the store keeps serving its current shard", live.path)
        finally:
            if live.generation != generation:
                with live.write_lock:
                    live.journal = None
                # A leftover copy is garbage, and open() removes stale generations anyway.
                shutil.rmtree(target, ignore_errors=True)

    def _copy_live_shard(self, target: Path) -> float | None:
        """Flush and copy with writes held back, so the copy plus the journal is exactly the live shard; returns
        how long that took (ms), None when the store closed meanwhile."""
        live = self._live
        with live.write_lock:
            if live.closed:
                return None
            started = time.perf_counter()
            with live.lock:
                live.flush()
            shutil.rmtree(target, ignore_errors=True)
            copy_tree(shard_dir(live.path, live.generation), target)
            live.journal = []
            self._writes_since_build = 0
            return _ms_since(started)

    def _optimize_copy(self, target: Path) -> dict[str, object]:
        command = optimizer_command(target)
        with self._live.write_lock:
            if self._live.closed:
                raise RuntimeError("store closed")
            self._child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            lower_priority(self._child.pid)
        out, err = self._child.communicate()
        if self._child.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited with {self._child.returncode}: {err.strip()[-2000:]}")
        return json.loads(out.strip().splitlines()[-1])

    def _swap_in(self, target: Path, generation: int) -> dict[str, float] | None:
        """Load the optimised copy, replay the journal, make it live, close the old shard; returns each step's
        milliseconds (load and close hold the GIL, so queries wait for them too), None when the store closed."""
        live = self._live
        # The copy must be on disk before store.json names it and the old generation is removed; fsync releases the
        # GIL and holds no lock, so requests go on meanwhile.
        fsync_tree(target)
        with live.write_lock:
            if live.closed:
                return None
            started = time.perf_counter()
            shard = EdgeShard.load(str(target), self._config)
            loaded = time.perf_counter()
            journal = live.journal or []
            try:
                for operation in journal:
                    shard.update(operation)
                write_sidecar(live.path, self._schema, generation)
            except BaseException:
                shard.close()
                raise
            old_dir = shard_dir(live.path, live.generation)
            old = live.replace(shard, generation)
            replayed = time.perf_counter()
        old.close()
        timings = {
            "load": _ms_since(started, loaded),
            "replay": _ms_since(loaded, replayed),
            "writes_replayed": len(journal),
            "close_old": _ms_since(replayed),
        }
        shutil.rmtree(old_dir)
        return timings


def _ms_since(start: float, end: float | None = None) -> float:
    return round(((time.perf_counter() if end is None else end) - start) * 1000, 1)
