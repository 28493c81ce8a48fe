"""Model rollout without downtime: a new bundle's store is filled while the live one serves, then swapped in between
two requests. What differs between the engines (where the new store lives, what a swap commits, what is dropped
after) is asked of the store package (`store.generations`).

- start: open the new bundle and an empty store `<data_dir>/<collection>.r<n>/` (on a server: the collection
  `<collection>.r<n>`) for it, and have the live indexer apply each write to it too (`Indexer.replicate_to`). A
  thread reads the live store's items a page at a time (their texts and metadata come from the store) and writes
  them, encoded by the new bundle, into the new store. A write that reaches the new store after the copy read the
  item's page wins: the copy leaves that item out.
- swap: once the copy is done, between two writes (`Indexer.writes`), flush the new store and commit it (on disk,
  `<data_dir>/<collection>.serving.json` written by one atomic rename; on a server, one update of the aliases), then
  make its runtime the live one: every request from then on gets it. Writes that still reach the old indexer (their
  request began before) go on to the new one; after RETIRE_AFTER_S the old store is closed and removed.
- abort: stop the copy, close and remove the new store.

A crash before the commit leaves the old store served, which holds every acknowledged write; after it, the new one,
which does too (each write is applied to both before it is acknowledged). Start-up serves what was committed (with
the bundle it was built by, not MS_BUNDLE_DIR, once a rollout was swapped in) and removes the collection's other
stores: a half-filled one, or the store a swap retired.

With a Qdrant server several replicas share the collection, but only the one running the rollout applies its writes
to the new store, and a replica's start-up drops the new store of a rollout under way elsewhere: run the rollout with
writes going to that replica alone, and restart the others after the swap (docs/operations.md)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from anyio.to_thread import run_sync

from metricsearch.core.bundle import MANIFEST_FILE, load_bundle
from metricsearch.core.errors import BundleError, InvalidInputError, NotFoundError, RolloutError
from metricsearch.core.records import Item
from metricsearch.core.schemas import RolloutStatus
from metricsearch.service.config import Settings
from metricsearch.service.engine import Indexer
from metricsearch.service.runtime import Runtime
from metricsearch.service.store import generations
from metricsearch.service.store.base import Condition

log = logging.getLogger(__name__)

PAGE = 256
"""Items the copy reads, encodes and writes per round."""
RETIRE_AFTER_S = 30.0
"""How long a swapped-out runtime stays open for the requests that began on it."""


class _NewStore:
    """The new bundle's runtime while the copy fills its store, and the replica the live indexer applies each write
    to (on after the swap too, for writes that reach the retired indexer)."""

    def __init__(self, runtime: Runtime, source: Runtime, batch_size: int) -> None:
        self.runtime = runtime
        self.source = source
        self.batch_size = batch_size
        self.started = time.monotonic()
        self.copied = 0
        self.done = False
        self.error: str | None = None
        self.swapped = False
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._touched: set[str] = set()
        self._all_touched = False
        self.thread = threading.Thread(target=self._copy, name="rollout-copy", daemon=True)

    @property
    def indexer(self) -> Indexer:
        return self.runtime.engine.indexer

    # --- the replica (Indexer.replicate_to): each live write, applied to the new store
    def indexed(self, items: Sequence[Item]) -> None:
        self._mark([i.id for i in items])
        self._apply(self.indexer.index, items, self.batch_size)

    def deleted(self, ids: Sequence[str]) -> None:
        self._mark(ids)
        self._apply(self.indexer.delete_many, ids)

    def deleted_where(self, conditions: Sequence[Condition]) -> None:
        with self._lock:
            self._all_touched = True
        self._apply(self.indexer.delete_where, conditions)

    def _mark(self, ids: Sequence[str]) -> None:
        """After the live write, before the new store's: a page the copy read before the live write is written
        without these items, or before this mark (under the same lock), so the write below comes after it."""
        with self._lock:
            self._touched.update(ids)

    def _apply(self, write: Callable[..., object], *args: object) -> None:
        if self.swapped:  # the new store is live: a write it misses is lost, so its caller must hear of a failure
            write(*args)
            return
        try:
            write(*args)
        except Exception as e:  # the live write stands; the new store lacks it, so it must not be swapped in
            log.exception("a write could not be applied to the rollout's new store")
            self.error = f"a write could not be applied to the new store ({e}): abort the rollout and start again"

    # --- the copy
    def _copy(self) -> None:
        offset: str | None = None
        try:
            while not self.stop.is_set():
                with self._lock:
                    self._touched.clear()
                    self._all_touched = False
                stored, following = self.source.store.scroll(offset, PAGE)
                items = [Item(i.id, i.title, i.description, i.metadata) for i in stored]
                records = self.indexer.encode_items(items, self.batch_size)
                with self._lock:
                    if self._all_touched:  # a delete by filter meanwhile: read the page again
                        continue
                    self.indexer.write([r for r in records if r.id not in self._touched])
                    self.copied += len(items)
                if following is None:
                    self.runtime.store.optimize_now()  # index the last pages too before the store can be swapped in
                    self.done = True
                    log.info("rollout copy done", extra={"items": self.copied})
                    return
                offset = following
        except Exception as e:
            log.exception("the rollout's copy failed")
            self.error = f"the copy failed ({e}): abort the rollout and start again"

    def status(self, model: str) -> RolloutStatus:
        total = self.source.store.count()
        rate = self.copied / max(time.monotonic() - self.started, 1e-9)
        left = 0 if self.done else max(total - self.copied, 0)
        return RolloutStatus(
            state="failed" if self.error else "ready" if self.done else "copying",
            model=model,
            target=self.runtime.bundle.manifest.name,
            copied=self.copied,
            total=total,
            items_per_s=round(rate, 1),
            eta_s=round(left / rate, 1) if rate > 0 else None,
            error=self.error,
        )


class Rollout:
    """The model rollout of one service: at most one under way; `live` is the runtime served now.

    `settings`: as configured (the collection's own name); `served`: the settings of the store served now (as the
    last swap left them); `open_runtime`: a runtime for settings naming another bundle and store."""

    def __init__(
        self, settings: Settings, served: Settings, live: Runtime, open_runtime: Callable[[Settings], Runtime]
    ) -> None:
        self.live = live
        self._settings = settings
        self._served = served
        self._open_runtime = open_runtime
        self._generations = generations(settings)
        self._state = threading.Lock()
        self._new: _NewStore | None = None
        self._retiring: dict[asyncio.Task[None], Runtime] = {}
        self._swapping = asyncio.Lock()

    def status(self) -> RolloutStatus:
        new = self._new
        model = self.live.bundle.manifest.name
        return RolloutStatus(state="none", model=model) if new is None else new.status(model)

    def start(self, bundle_dir: str) -> RolloutStatus:
        """Open the bundle at `bundle_dir` and a new store for it, apply writes to it too and start the copy."""
        with self._state:
            if self._new is not None:
                raise RolloutError(
                    f"a rollout to {self._new.runtime.bundle.manifest.name} is under way: swap or abort it first"
                )
            try:
                path = Path(bundle_dir).resolve()
                found = (path / MANIFEST_FILE).is_file()
            except (OSError, ValueError) as e:  # a path the OS refuses (a NUL byte, a name too long) names no bundle
                raise NotFoundError(f"no bundle at {bundle_dir!r} on the service's machine: {e}") from e
            if not found:
                raise NotFoundError(
                    f"no bundle at {bundle_dir!r} ({path} holds no {MANIFEST_FILE}) on the service's machine"
                )
            try:
                load_bundle(path)
            except (BundleError, OSError, ValueError, RuntimeError) as e:  # a bundle there, but not one to serve
                raise InvalidInputError(f"cannot roll out {bundle_dir!r}: {e}") from e
            folder = self._generations.next_name()
            runtime = self._open_runtime(self._served.model_copy(update={"bundle_dir": path, "collection": folder}))
            new = _NewStore(runtime, self.live, self._settings.index_batch_size)
            self.live.engine.indexer.replicate_to(new)  # writes under way finish first, so the copy reads them
            self._new = new
            new.thread.start()
            log.info("rollout started", extra={"bundle": runtime.bundle.manifest.name, "folder": folder})
            return self.status()

    async def swap(self) -> RolloutStatus:
        """Serve the new store from the next request on; refused until its copy is done."""
        async with self._swapping:  # a second swap meanwhile finds none under way
            return await self._swap()

    async def _swap(self) -> RolloutStatus:
        new = self._new
        if new is None:
            raise RolloutError("no rollout is under way: start one with `metricsearch rollout start --bundle DIR`")
        if new.error:
            raise RolloutError(f"the rollout failed: {new.error}")
        if not new.done:
            status = new.status(self.live.bundle.manifest.name)
            raise RolloutError(
                f"the new store holds {status.copied} of {status.total} items: swap once `rollout status` says ready"
            )
        new.runtime.batcher.start()  # on the event loop, as the app's own
        try:
            old = await run_sync(self._commit, new)
        except BaseException:
            await new.runtime.batcher.stop()
            raise
        task = asyncio.create_task(self._retire(old, RETIRE_AFTER_S))
        self._retiring[task] = old
        task.add_done_callback(lambda done: self._retiring.pop(done, None))
        return self.status()

    def _commit(self, new: _NewStore) -> Runtime:
        with self._state:
            if self._new is not new:
                raise RolloutError("the rollout was aborted or swapped meanwhile")
            old = self.live
            new.runtime.engine.statistics.warm()  # for the copied catalog now, not by the first request after it
            with old.engine.indexer.writes.exclusive():
                new.runtime.store.flush()
                self._generations.commit(new.runtime.settings)
                new.swapped = True
                self.live = new.runtime
                self._served = new.runtime.settings
                self._new = None
            log.info("rollout swapped in", extra={"bundle": new.runtime.bundle.manifest.name})
            return old

    async def _retire(self, old: Runtime, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        await old.batcher.stop()
        await run_sync(self._remove, old)

    def _remove(self, old: Runtime) -> None:
        old.close()
        self._generations.drop(old.store)

    def abort(self) -> RolloutStatus:
        """Stop the copy, stop applying writes to the new store, and drop it."""
        with self._state:
            new = self._new
            if new is None:
                raise RolloutError("no rollout is under way")
            new.source.engine.indexer.replicate_to(None)
            self._new = None
            new.stop.set()
            new.thread.join()
            self._remove(new.runtime)
            log.info("rollout aborted", extra={"bundle": new.runtime.bundle.manifest.name})
            return self.status()

    async def aclose(self) -> None:
        """At shutdown: drop a rollout under way, and close the runtimes waiting to be retired now."""
        if self._new is not None:
            await run_sync(self.abort)
        for task, old in list(self._retiring.items()):
            task.cancel()
            await old.batcher.stop()
            await run_sync(self._remove, old)
