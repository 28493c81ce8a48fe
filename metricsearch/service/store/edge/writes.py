"""The embedded store's live shard and the order of its writes: one lock for every call on the shard, held only for
that call, and one that serialises writes with each other and with a background build's copy and swap (order: the
write lock first). Writes are numbered as applied, so with `sync_writes` one WAL fsync covers every write applied
before it began (group commit), and a write flushes the shard once a checkpoint interval has passed."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from qdrant_edge import EdgeShard, UpdateOperation

from metricsearch.core.errors import StorageFullError
from metricsearch.service.store.atomic import fsync_tree
from metricsearch.service.store.edge.layout import SIDECAR, shard_dir

logger = logging.getLogger(__name__)

MIN_FREE_BYTES = 32 * 2**20
"""Free space a write needs first: the engine's WAL segment size. The WAL is written through mmap, so a write that
finds the disk full is not an error the engine can return: the kernel kills the process (SIGBUS)."""


class LiveShard:
    """The shard a store at `path` serves (generation `generation`), with its locks. `lock` guards every call on
    `shard`; `write_lock` is held by a whole write, a build's copy and swap, and close. Without `sync_writes` a
    returned write is in the WAL (an mmap), which survives a crash of this process but not of the machine
    (QDRANT_EDGE.md)."""

    def __init__(
        self, path: Path, shard: EdgeShard, generation: int, *, sync_writes: bool, checkpoint_interval_s: float
    ) -> None:
        self.path = path
        self.shard = shard
        self.generation = generation
        self.lock = threading.Lock()
        self.write_lock = threading.Lock()
        self.closed = False
        """Set under the write lock by close: no write, build or swap starts after it."""
        self.journal: list[UpdateOperation] | None = None
        """Writes made since a build copied the shard, replayed into the copy before it goes live."""
        self._sync_writes = sync_writes
        self._checkpoint_interval_s = checkpoint_interval_s
        self._flushed_at = time.monotonic()
        self._sync_lock = threading.Lock()
        self._applied = 0
        self._synced = 0

    def apply(self, operation: UpdateOperation, also: Callable[[], None]) -> int:
        """One write, to the shard and, with `also`, to the in-memory copies under one lock hold (a search sees both
        or neither); the caller holds the write lock. Returns the write's number, for `sync`. Refused while the disk
        has less than MIN_FREE_BYTES free, and accepted again as soon as it has, without a restart."""
        free = shutil.disk_usage(self.path).free
        if free < MIN_FREE_BYTES:
            raise StorageFullError(
                f"no space left for writes in {self.path} (MS_DATA_DIR): {free // 2**20} MiB free, a write needs "
                f"{MIN_FREE_BYTES // 2**20} MiB; free space or grow the volume (reads still answer)"
            )
        with self.lock:
            self.shard.update(operation)
            also()
            self._checkpoint_if_due()
        self._applied += 1
        if self.journal is not None:
            self.journal.append(operation)
        return self._applied

    def sync(self, written: int) -> None:
        """With sync_writes, return once write number `written` is fsynced. Writers that wait here while an fsync
        runs share the next one, so concurrent writes cost about one fsync each round, not one each."""
        if not self._sync_writes:
            return
        with self._sync_lock:
            if self._synced >= written:
                return
            covered = self._applied  # every write numbered up to here has returned from update()
            self._fsync_wal()
            self._synced = covered

    def _fsync_wal(self) -> None:
        """Make the live shard's WAL durable: it holds every applied write, and a load replays it (QDRANT_EDGE.md).
        fsync of the WAL files, not the engine's flush(), which holds the GIL for its whole run (25-114 ms) and so
        stalls every reader; os.fsync releases the GIL, and no lock is held, so reads go on meanwhile. The WAL is
        written through a shared mmap, whose dirty pages are the file's page cache, which fsync writes out."""
        with self.lock:
            wal = shard_dir(self.path, self.generation) / "wal"
        fsync_tree(wal, missing_ok=True)

    def flush(self) -> None:
        """The engine's flush; the caller holds the lock. It persists the segments and drops the WAL segments they
        cover."""
        self.shard.flush()
        self._flushed_at = time.monotonic()

    def _checkpoint_if_due(self) -> None:
        """A write's flush once checkpoint_interval_s passed since the last, under the lock. Without it a store that
        starts no build (a small catalog, or updates only) kept every write's WAL on disk, 32 MB files a restart
        replays; each flush holds the GIL for 25-114 ms (QDRANT_EDGE.md). The write is in the WAL already, so a
        failed flush is logged, not raised, and tried again an interval later."""
        if not self._checkpoint_interval_s or time.monotonic() - self._flushed_at < self._checkpoint_interval_s:
            return
        try:
            self.flush()
        except Exception:
            logger.warning(
                "embedded store at %s: checkpoint flush failed; the WAL keeps the writes", self.path, exc_info=True
            )
            self._flushed_at = time.monotonic()

    @contextmanager
    def frozen(self) -> Iterator[list[Path]]:
        """Flush, then hold writes back (reads go on) while the caller copies the yielded files: the sidecar and
        the live shard folder, together a consistent copy of the store (snapshots)."""
        with self.write_lock:
            with self.lock:
                self.flush()
            yield [self.path / SIDECAR, shard_dir(self.path, self.generation)]

    def replace(self, shard: EdgeShard, generation: int) -> EdgeShard:
        """Serve `shard` as generation `generation` from now on; returns the old shard, for the caller to close. The
        caller holds the write lock."""
        with self.lock:
            old, self.shard = self.shard, shard
        self.generation = generation
        self.journal = None
        return old
