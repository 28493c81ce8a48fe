"""Model rollout without downtime: a new bundle's shadow store is filled while the live one serves, then swapped in
between two requests. What differs between the stores is behind `_Folders` (embedded) and `_Collections` (Qdrant
server): where a shadow lives, what a swap commits, what is dropped after.

- start: open the new bundle and an empty shadow store `<data_dir>/<collection>.r<n>/` (on a server: the collection
  `<collection>.r<n>`) for it, and have the live catalog apply each write to the shadow too (`Catalog.follower`). A
  thread reads the live store's items a page at a time (their texts and metadata come from the store) and writes
  them, encoded by the new bundle, into the shadow. A write that reaches the shadow after the copy read the item's
  page wins: the copy leaves that item out.
- swap: once the copy is done, between two writes (`Catalog.writes`), flush the shadow and write
  `<data_dir>/<collection>.serving.json` naming its folder and bundle (one atomic rename: the commit point; on a
  server, one update of the aliases, store/remote.py `Generations`, and the collection records its bundle), then
  publish the runtime around it: every request from then on gets it. Writes that still reach the old catalog (their
  request began before) go on to the new one; after RETIRE_AFTER_S the old store is closed and removed.
- abort: stop the copy, close and remove the shadow.

A crash before the commit leaves `serving.json` (on a server, the aliases) naming the old store, which holds every
acknowledged write; after it, the new one, which does too (each write is applied to both before it is
acknowledged). Start-up serves what it names (with the bundle it was built by, not MS_BUNDLE_DIR, once a rollout was
swapped in) and removes the collection's other stores: a half-built shadow, or the store a swap retired.

With a Qdrant server several replicas share the collection, but only the one running the rollout mirrors its writes
into the shadow, and a replica's start-up drops the shadow of a rollout under way elsewhere: run the rollout with
writes going to that replica alone, and restart the others after the swap (docs/operations.md)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from fastapi.concurrency import run_in_threadpool

from metricsearch.core.bundle import MANIFEST_FILE, load_bundle
from metricsearch.core.errors import (
    BundleError,
    InvalidInputError,
    NotFoundError,
    RolloutError,
    StoreMismatchError,
    StoreUnavailableError,
)
from metricsearch.core.records import Item
from metricsearch.core.schemas import RolloutStatus
from metricsearch.service.config import Settings
from metricsearch.service.store.atomic import written_whole
from metricsearch.service.store.base import Condition
from metricsearch.service.store.remote import Generations, RemoteStore

if TYPE_CHECKING:
    from metricsearch.service.catalog import Catalog
    from metricsearch.service.runtime import Runtime

log = logging.getLogger(__name__)

PAGE = 256
"""Items the copy reads, encodes and writes per round."""
RETIRE_AFTER_S = 30.0
"""How long a swapped-out runtime stays open for the requests that began on it."""


def serving_settings(settings: Settings) -> Settings:
    """The settings as the last swapped rollout left them: its bundle and store (unchanged when none was swapped)."""
    return _generations(settings).serving()


def remove_leftovers(settings: Settings, served: Settings) -> None:
    """Remove the collection's stores that `served` does not use: a shadow a crash or a stop interrupted, the store
    a swap retired. Called once the served store is open (the embedded store's lock keeps a second service out)."""
    _generations(settings).remove_leftovers(served)


class _Generations(Protocol):
    """The store-specific part of a rollout: the stores of one collection, and which one is served."""

    def serving(self) -> Settings: ...

    def remove_leftovers(self, served: Settings) -> None: ...

    def next_name(self) -> str:
        """The collection name of the next rollout's shadow store."""
        ...

    def commit(self, new: Settings) -> None:
        """Serve the store `new` names from now on, also after a restart: the swap's commit point."""
        ...

    def drop(self, runtime: Runtime) -> None:
        """Remove a closed runtime's store (retired or aborted)."""
        ...


def _generations(settings: Settings) -> _Generations:
    return _Collections(settings) if settings.qdrant_url else _Folders(settings)


class _Folders:
    """The embedded store: folders `<data_dir>/<collection>[.r<n>]`, `<collection>.serving.json` naming the one
    served and its bundle once a rollout was swapped in."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._pointer = settings.data_dir / f"{settings.collection}.serving.json"

    def serving(self) -> Settings:
        settings, pointer = self._settings, self._pointer
        if not pointer.is_file():
            return settings
        try:
            state = json.loads(pointer.read_text())
            bundle_dir, folder = Path(state["bundle_dir"]), str(state["collection"])
        except (ValueError, KeyError, TypeError) as e:
            raise StoreMismatchError(
                f"{pointer} is damaged ({e!r}): it names the store and bundle a model rollout swapped in; write it "
                'again as {"collection": "<folder under MS_DATA_DIR>", "bundle_dir": "<bundle folder>"}'
            ) from e
        if not (settings.data_dir / folder).is_dir():
            raise StoreMismatchError(
                f"{pointer} names the store {settings.data_dir / folder}, which is gone: restore a snapshot there, or "
                f"remove {pointer} to serve {settings.data_dir / settings.collection} with MS_BUNDLE_DIR"
            )
        _warn_if_other(bundle_dir, settings, str(pointer))
        return settings.model_copy(update={"bundle_dir": bundle_dir, "collection": folder})

    def remove_leftovers(self, served: Settings) -> None:
        if not self._settings.data_dir.is_dir():
            return
        for child in self._settings.data_dir.iterdir():
            if child.is_dir() and child.name != served.collection and self._of_collection(child.name):
                log.info("removing %s, left by a model rollout", child)
                shutil.rmtree(child)

    def _of_collection(self, name: str) -> bool:
        collection = self._settings.collection
        return name == collection or re.fullmatch(rf"{re.escape(collection)}\.r\d+", name) is not None

    def next_name(self) -> str:
        collection = self._settings.collection
        numbers = [
            int(m.group(1))
            for child in self._settings.data_dir.iterdir()
            if (m := re.fullmatch(rf"{re.escape(collection)}\.r(\d+)", child.name))
        ]
        return f"{collection}.r{1 + max(numbers, default=0)}"

    def commit(self, new: Settings) -> None:
        state = {"collection": new.collection, "bundle_dir": str(new.bundle_dir)}
        with written_whole(self._pointer) as partial:
            partial.write_text(json.dumps(state, indent=2) + "\n")

    def drop(self, runtime: Runtime) -> None:
        shutil.rmtree(self._settings.data_dir / runtime.settings.collection, ignore_errors=True)


class _Collections:
    """A Qdrant server: the plain collection `<collection>`, then collections `<collection>.r<n>` behind the alias
    `<collection>` (store/remote.py `Generations`). Each collection records the bundle that built it, so a restart
    after a swap serves it with that bundle, like `serving.json` does for the embedded store; where that folder is
    missing on this machine, the store refuses the collection at open, naming the bundle it needs."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def serving(self) -> Settings:
        """MS_BUNDLE_DIR unless the served collection was built by another bundle whose folder is here. A server
        that does not answer yet leaves the settings as they are: the store checks the collection when it opens."""
        settings = self._settings
        try:
            with Generations(settings) as generations:
                served = generations.served()
                record = generations.record(served) if served else {}
        except StoreUnavailableError as e:
            log.warning("cannot tell which bundle built the served collection (%s); serving MS_BUNDLE_DIR", e)
            return settings
        recorded = Path(str(record.get("bundle_dir", settings.bundle_dir.resolve())))
        if recorded == settings.bundle_dir.resolve() or not (recorded / MANIFEST_FILE).is_file():
            return settings
        try:
            if load_bundle(settings.bundle_dir).identity == record.get("identity"):
                return settings  # the same bundle, moved
        except BundleError:
            pass  # MS_BUNDLE_DIR does not load: the recorded bundle is the one to serve
        _warn_if_other(recorded, settings, f"collection {served!r}")
        return settings.model_copy(update={"bundle_dir": recorded})

    def remove_leftovers(self, served: Settings) -> None:
        try:
            with Generations(self._settings) as generations:
                generations.remove_leftovers()
        except StoreUnavailableError as e:
            log.warning("left what a model rollout may have left on the server: %s", e)

    def next_name(self) -> str:
        with Generations(self._settings) as generations:
            names = generations.names()
        collection = self._settings.collection
        numbers = [int(m.group(1)) for n in names if (m := re.fullmatch(rf"{re.escape(collection)}\.r(\d+)", n))]
        return f"{collection}.r{1 + max(numbers, default=0)}"

    def commit(self, new: Settings) -> None:
        with Generations(self._settings) as generations:
            generations.point(new.collection)

    def drop(self, runtime: Runtime) -> None:
        """A server that does not answer keeps the collection: the next start drops it (remove_leftovers)."""
        assert isinstance(runtime.store, RemoteStore), "a server's runtime has a RemoteStore"
        try:
            with Generations(self._settings) as generations:
                generations.drop(runtime.store.collection)
        except StoreUnavailableError as e:
            log.warning("collection %r left on the server for the next start to drop: %s", runtime.store.collection, e)


def _warn_if_other(bundle_dir: Path, settings: Settings, where: str) -> None:
    if bundle_dir != settings.bundle_dir.resolve():
        log.warning(
            "serving %s, which a model rollout swapped in (%s), not MS_BUNDLE_DIR %s",
            bundle_dir,
            where,
            settings.bundle_dir,
        )


class _Shadow:
    """The new bundle's runtime while it is filled, and the follower that mirrors the live catalog's writes into it
    (on after the swap too, for writes to the retired catalog)."""

    def __init__(self, runtime: Runtime, source: Catalog, batch_size: int) -> None:
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

    # --- the follower (Catalog.follower): each live write, applied to the shadow
    def indexed(self, items: Sequence[Item]) -> None:
        self._mark([i.id for i in items])
        self._apply(self.runtime.catalog.index, items, self.batch_size)

    def deleted(self, ids: Sequence[str]) -> None:
        self._mark(ids)
        self._apply(self.runtime.catalog.delete_many, ids)

    def deleted_where(self, conditions: Sequence[Condition]) -> None:
        with self._lock:
            self._all_touched = True
        self._apply(self.runtime.catalog.delete_where, conditions)

    def _mark(self, ids: Sequence[str]) -> None:
        """After the live write, before the shadow's: a page the copy read before the live write is written without
        these items, or before this mark (under the same lock), so the write below comes after it."""
        with self._lock:
            self._touched.update(ids)

    def _apply(self, write: Callable[..., object], *args: object) -> None:
        if self.swapped:  # the shadow is live: a write it misses is lost, so its caller must hear of a failure
            write(*args)
            return
        try:
            write(*args)
        except Exception as e:  # the live write stands; the shadow lacks it, so it must not be swapped in
            log.exception("a write could not be applied to the rollout's shadow store")
            self.error = f"a write could not be applied to the shadow store ({e}): abort the rollout and start again"

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
                records = self.runtime.catalog.encode_items(items, self.batch_size)
                with self._lock:
                    if self._all_touched:  # a delete by filter meanwhile: read the page again
                        continue
                    self.runtime.catalog.write([r for r in records if r.id not in self._touched])
                    self.copied += len(items)
                if following is None:
                    self.runtime.store.optimize_now()  # index the last pages too before the shadow can be swapped in
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

    `settings`: as configured (the collection's own name); `served`: as `serving_settings` resolved them; `build`:
    a runtime for settings naming another bundle and store folder (runtime.open_runtime)."""

    def __init__(self, settings: Settings, served: Settings, build: Callable[[Settings], Runtime]) -> None:
        self.live: Runtime
        self._settings = settings
        self._served = served
        self._build = build
        self._publish: Callable[[Runtime], None] = lambda runtime: None
        self._generations = _generations(settings)
        self._state = threading.Lock()
        self._shadow: _Shadow | None = None
        self._retiring: dict[asyncio.Task[None], Runtime] = {}
        self._swapping = asyncio.Lock()

    def on_swap(self, publish: Callable[[Runtime], None]) -> None:
        """`publish(runtime)` makes a swapped-in runtime the one requests get (the app's state)."""
        self._publish = publish

    def status(self) -> RolloutStatus:
        shadow = self._shadow
        model = self.live.bundle.manifest.name
        return RolloutStatus(state="none", model=model) if shadow is None else shadow.status(model)

    def start(self, bundle_dir: str) -> RolloutStatus:
        """Open the bundle at `bundle_dir` and its shadow store, mirror writes into it and start the copy."""
        with self._state:
            if self._shadow is not None:
                raise RolloutError(
                    f"a rollout to {self._shadow.runtime.bundle.manifest.name} is under way: swap or abort it first"
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
            runtime = self._build(self._served.model_copy(update={"bundle_dir": path, "collection": folder}))
            source = self.live.catalog
            shadow = _Shadow(runtime, source, self._settings.index_batch_size)
            with source.writes.exclusive():  # writes under way finish first, so the copy reads them
                source.follower = shadow
            self._shadow = shadow
            shadow.thread.start()
            log.info("rollout started", extra={"bundle": runtime.bundle.manifest.name, "folder": folder})
            return self.status()

    async def swap(self) -> RolloutStatus:
        """Serve the shadow from the next request on; refused until its copy is done."""
        async with self._swapping:  # a second swap meanwhile finds none under way
            return await self._swap()

    async def _swap(self) -> RolloutStatus:
        shadow = self._shadow
        if shadow is None:
            raise RolloutError("no rollout is under way: start one with `metricsearch rollout start --bundle DIR`")
        if shadow.error:
            raise RolloutError(f"the rollout failed: {shadow.error}")
        if not shadow.done:
            status = shadow.status(self.live.bundle.manifest.name)
            raise RolloutError(
                f"the shadow store holds {status.copied} of {status.total} items: swap once `rollout status` says ready"
            )
        shadow.runtime.batcher.start()  # on the event loop, as the app's own
        try:
            old = await run_in_threadpool(self._commit, shadow)
        except BaseException:
            await shadow.runtime.batcher.stop()
            raise
        task = asyncio.create_task(self._retire(old, RETIRE_AFTER_S))
        self._retiring[task] = old
        task.add_done_callback(lambda done: self._retiring.pop(done, None))
        return self.status()

    def _commit(self, shadow: _Shadow) -> Runtime:
        with self._state:
            if self._shadow is not shadow:
                raise RolloutError("the rollout was aborted or swapped meanwhile")
            old = self.live
            shadow.runtime.catalog.warm_stats()  # for the copied catalog now, not by the first request after the swap
            with old.catalog.writes.exclusive():
                shadow.runtime.store.flush()
                new = shadow.runtime.settings
                self._generations.commit(new)
                shadow.swapped = True
                self.live = shadow.runtime
                self._served = new
                self._shadow = None
                self._publish(shadow.runtime)
            log.info("rollout swapped in", extra={"bundle": shadow.runtime.bundle.manifest.name})
            return old

    async def _retire(self, old: Runtime, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        await old.batcher.stop()
        await run_in_threadpool(self._remove, old)

    def _remove(self, old: Runtime) -> None:
        old.close()
        self._generations.drop(old)

    def abort(self) -> RolloutStatus:
        """Stop the copy, stop mirroring writes, and drop the shadow store."""
        with self._state:
            shadow = self._shadow
            if shadow is None:
                raise RolloutError("no rollout is under way")
            with shadow.source.writes.exclusive():
                shadow.source.follower = None
            self._shadow = None
            self._drop(shadow)
            log.info("rollout aborted", extra={"bundle": shadow.runtime.bundle.manifest.name})
            return self.status()

    def _drop(self, shadow: _Shadow) -> None:
        shadow.stop.set()
        shadow.thread.join()
        self._remove(shadow.runtime)

    async def aclose(self) -> None:
        """At shutdown: drop a rollout under way, and close the runtimes waiting to be retired now."""
        if self._shadow is not None:
            await run_in_threadpool(self.abort)
        for task, old in list(self._retiring.items()):
            task.cancel()
            await old.batcher.stop()
            await run_in_threadpool(self._remove, old)
