"""MS_SYNC_WRITES on the embedded store: every write returns only after an fsync of the WAL that covers it,
concurrent writers share fsyncs (group commit), and readers never wait for one."""

from __future__ import annotations

import threading
import time

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
        live = self._live  # the shard's writes (store/edge/writes.py), numbered as applied
        fsync_wal, apply = live._fsync_wal, live.apply

        def recorded_fsync() -> None:
            covered = live._applied
            fsync_wal()
            self.flushed_through.append(covered)

        def numbered_apply(*args) -> int:
            self._mine.written = apply(*args)
            return self._mine.written

        live._fsync_wal, live.apply = recorded_fsync, numbered_apply

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


def by_id_p99_under_writes(path, sync: bool) -> float:
    """p99 of a by-id read (the item with its vectors, then a search with them) while a writer upserts small
    batches without pause; bounded: 300 reads."""
    store = EdgeStore(path, SCHEMA, optimize_after_writes=0, sync_writes=sync)
    try:
        store.upsert([item(n) for n in range(2000)])
        stop = threading.Event()

        def writer() -> None:
            n = 10_000
            while not stop.is_set():
                store.upsert([item(n + i) for i in range(50)])
                n += 50

        thread = threading.Thread(target=writer)
        thread.start()
        latencies = []
        try:
            for n in range(300):
                started = time.perf_counter()
                found = store.get([str(n)], with_vectors=True)[str(n)]
                store.search(found.vectors["ann"], 10, exclude_ids=[str(n)])
                latencies.append(time.perf_counter() - started)
                time.sleep(0.001)
        finally:
            stop.set()
            thread.join(timeout=60)
        return float(np.percentile(latencies, 99))
    finally:
        store.close()


def test_readers_never_wait_for_a_sync_writes_fsync(tmp_path):
    """By-id p99 under concurrent writes with MS_SYNC_WRITES within 2x of without (the best of 3 tries: the test
    machine is shared). With the engine's flush (which holds the GIL and ran under the store lock) it was 5-10x."""
    ratios = []
    for attempt in range(3):
        plain = by_id_p99_under_writes(tmp_path / f"plain-{attempt}", sync=False)
        synced = by_id_p99_under_writes(tmp_path / f"sync-{attempt}", sync=True)
        ratios.append(synced / plain)
        if ratios[-1] <= 2:
            return
    pytest.fail(f"by-id p99 with MS_SYNC_WRITES / without: {[round(r, 2) for r in ratios]}")
