"""Payload indexes learned from filters (MS_AUTO_INDEX), for both stores: the first filter on a metadata key without
an index schedules one background build, typed from the stored values, so later filters on it go to the engine's
index instead of checking every point (a Qdrant server) or an exact search over every item they keep (the embedded
store's metadata index: edge/metadata_index.py; docs/operations.md, "Indexed filters"). The filtered search itself
never waits: it runs without the index meanwhile.

Filters are user input, so what a client can make the store do is bounded. The stores report only filters that
matched an item, so every key looked at is held: a look at a key no item holds reads every point to find none
(150 ms at 100k points, under the embedded store's lock), and filters on new made-up keys in every search kept the
store busy. A key is indexed only when stored items hold it, all with one type (a key holding strings and numbers
gets none: an index of one type would serve only part of its filters), at most `limit` learned indexes in all (a
key filtered on after that is warned of once: nothing else would say its filters stay unindexed for good), and
at most _QUEUED keys wait for a look at the data at a time (one worker; a key turned away is looked at again on a
later search). A key refused or whose build failed is remembered (the last _REMEMBERED of them) for RETRY_AFTER_S,
so it is not tried again on every search, but is once that time passed: a key refused before items held it (a
service started empty) is looked at again once a filter on it matches."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from metricsearch.service.store.base import Condition

logger = logging.getLogger(__name__)

_QUEUED = 8
_REMEMBERED = 1024
RETRY_AFTER_S = 60.0


class AutoIndex:
    """`kinds(key)`: the index types of the values stored under a metadata key (payload.value_kinds); `create(key,
    kind)`: the store's index build, a write. Off (every search ignored) until `known` tells it which keys have an
    index, once the store opened; `on_outcome` is called with built, refused or failed for each key looked at."""

    def __init__(
        self,
        *,
        limit: int,
        kinds: Callable[[str], set[str]],
        create: Callable[[str, str], None],
        where: str,
        on_outcome: Callable[[str], None] | None = None,
    ) -> None:
        self._limit = limit
        self._kinds = kinds
        self._create = create
        self._where = where
        self._on_outcome = on_outcome or (lambda outcome: None)
        self._lock = threading.Lock()
        self._indexed: dict[str, str] | None = None
        self._learned = 0
        self._queued: set[str] = set()
        self._refused: OrderedDict[str, float] = OrderedDict()  # key: when it was refused (time.monotonic)
        self._over_limit: OrderedDict[str, None] = OrderedDict()  # keys warned of once the limit was reached
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="auto-index")
        self._idle = threading.Condition(self._lock)

    @property
    def indexed(self) -> dict[str, str]:
        """The metadata keys with an index, declared or learned, {key: type}."""
        with self._lock:
            return dict(self._indexed or {})

    def known(self, indexed: Mapping[str, str], declared: Mapping[str, str]) -> None:
        """The store's metadata indexes after its start-up sync; those not declared were learned before a restart and
        count towards the limit."""
        with self._lock:
            self._indexed = dict(indexed)
            self._learned = len(set(indexed) - set(declared))

    def saw(self, conditions: Sequence[Condition]) -> None:
        """A search filtered on these (validated) conditions matched an item: schedule a build for each new key;
        never blocks."""
        if not conditions:  # most searches: no lock taken on the hot path
            return
        unserved = []
        with self._lock:
            if self._indexed is None:
                return
            for key in {c.key for c in conditions}:
                if key in self._indexed or key in self._queued or self._refused_lately(key):
                    continue
                if self._learned >= self._limit:
                    if key not in self._over_limit:
                        self._over_limit[key] = None
                        if len(self._over_limit) > _REMEMBERED:
                            self._over_limit.popitem(last=False)
                        unserved.append(key)
                    continue
                if self._learned + len(self._queued) >= self._limit or len(self._queued) >= _QUEUED:
                    break
                self._queued.add(key)
                self._worker.submit(self._learn, key)
        for key in unserved:
            self._warn_over_limit(key)

    def _warn_over_limit(self, key: str) -> None:
        """Once per key: its filters run without an index for good (on a Qdrant server, each a check of every point:
        seconds at 100k items), and nothing else would tell."""
        logger.warning(
            "%s: filters on metadata.%s run without a payload index: no more automatic indexes are built "
            "(MS_AUTO_INDEX_MAX=%d reached); declare it in MS_INDEXED_FIELDS",
            self._where,
            key,
            self._limit,
            extra={"key": key},
        )
        self._on_outcome("over_limit")

    def _refused_lately(self, key: str) -> bool:
        """Whether the key was refused (or failed) less than RETRY_AFTER_S ago; forgets an older refusal."""
        refused_at = self._refused.get(key)
        if refused_at is None:
            return False
        if time.monotonic() - refused_at < RETRY_AFTER_S:
            return True
        del self._refused[key]
        return False

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no key is queued or being built; True when none is."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._queued, timeout)

    def close(self) -> None:
        """Drop the keys still queued and wait for a build under way (the store closes after it)."""
        self._worker.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._queued.clear()
            self._idle.notify_all()

    def _learn(self, key: str) -> None:
        outcome = "refused"
        try:
            kinds = self._kinds(key)
            if len(kinds) != 1 or kinds == {"other"}:
                found = ", ".join(sorted(kinds)) or "no stored item has it"
                logger.info(
                    "%s: no automatic payload index on metadata.%s (values: %s); looked at again after %.0f s",
                    self._where,
                    key,
                    found,
                    RETRY_AFTER_S,
                )
                return
            (kind,) = kinds
            started = time.perf_counter()
            self._create(key, kind)
            took_ms = (time.perf_counter() - started) * 1e3
            logger.info(
                "%s: built an automatic %r payload index on metadata.%s in %.0f ms (a filter used it)",
                self._where,
                kind,
                key,
                took_ms,
                extra={"key": key, "index_type": kind, "ms": round(took_ms, 1)},
            )
            outcome = "built"
        except Exception:
            logger.exception(
                "%s: automatic payload index on metadata.%s failed; retried after %.0f s at the earliest",
                self._where,
                key,
                RETRY_AFTER_S,
            )
            outcome = "failed"
        finally:
            with self._lock:
                self._queued.discard(key)
                if outcome == "built":
                    self._indexed[key] = kind
                    self._learned += 1
                else:
                    self._refused[key] = time.monotonic()
                    if len(self._refused) > _REMEMBERED:
                        self._refused.popitem(last=False)
                self._idle.notify_all()
            self._on_outcome(outcome)
