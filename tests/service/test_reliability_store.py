"""MS_SYNC_WRITES on the embedded store: every write returns only after a flush (the engine's one fsync) that
covers it, and concurrent writers share flushes (group commit)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from metricsearch.service.store.base import StoredItem, VectorSchema
from metricsearch.service.store.edge import EdgeStore

SCHEMA = VectorSchema(sizes={"ann": 8}, ann="ann", identity="sync-test")


class FlushRecordingStore(EdgeStore):
    """Records how many writes each finished flush covered, and counts writes that returned before a finished
    flush covered them."""

    def __init__(self, *args, **kwargs) -> None:
        self.flushed_through: list[int] = []
        self.returned_unsynced = 0
        self._mine = threading.local()
        super().__init__(*args, **kwargs)

    def flush(self) -> None:
        covered = self._applied
        super().flush()
        self.flushed_through.append(covered)

    def _apply(self, *args) -> int:
        self._mine.written = super()._apply(*args)
        return self._mine.written

    def upsert(self, items) -> None:
        super().upsert(items)
        if max(self.flushed_through, default=0) < self._mine.written:
            self.returned_unsynced += 1


def item(n: int) -> StoredItem:
    vector = np.random.default_rng(n).standard_normal(8).astype(np.float32)
    return StoredItem(str(n), f"t{n}", "", {}, f"{n:032x}", {"ann": vector})


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "wal-only"])
def test_sync_writes_flush_each_write_and_share_flushes(tmp_path, sync):
    store = FlushRecordingStore(tmp_path / "store", SCHEMA, optimize_after_writes=0, sync_writes=sync)
    try:
        for n in range(5):  # one writer: one flush per write, each covering it
            store.upsert([item(n)])
        assert store.flushed_through == ([1, 2, 3, 4, 5] if sync else [])

        def writer(w: int) -> None:
            for n in range(10):
                store.upsert([item(100 * (w + 1) + n)])

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        if sync:
            assert store.flushed_through[-1] == 45  # every write is covered by the end
            assert store.flushed_through == sorted(store.flushed_through)
            assert len(store.flushed_through) <= 45
            assert store.returned_unsynced == 0
        else:
            assert store.flushed_through == [] and store.returned_unsynced == 45
        assert store.count() == 45
    finally:
        store.close()
