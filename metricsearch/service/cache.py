"""The two caches of the query path, both LRUs (cachetools) behind a lock, since request threads and the event loop
share them, each bounded by entries and by bytes: an answer's size varies with k and its items' metadata (up to 100
results of up to MS_MAX_METADATA_BYTES each), so a count alone bounds nothing. Sizes are estimates of the Python
objects held from CPython's object sizes, erring high, not exact.

- `EmbeddingCache`: a query text's vector, keyed by (bundle identity, text hash). Encoding is a pure function of
  the bundle and the text, so an entry never goes stale; the hash keeps a 20k-character query from being a key.
- `AnswerCache`: a finished item-to-item answer (its matches), keyed by a fixed-size digest of the normalised request
  (a large filter costs its hash, not its size, as a key), kept until a write can change it. A write that changed only
  some items' metadata drops the answers that show one of them and those whose filter reads a changed key, through
  an index of each; any other write (texts, new or deleted items: they move every lexical score, whose idf is the
  live catalog's) and a statistics re-estimate drop them all. Each change is noted *after* the write landed and
  counts a generation; a reader takes the generation *before* it reads the store, and `put` keeps its answer only if
  no change was noted since: a write that raced the read may be missing from it, and the write's check ran before
  the answer was there to drop. So no answer a write could change outlives the write's acknowledgement.
- `VectorCache`: the server store's copy of candidates' vectors, keyed by (collection, point id, content hash). A
  collection holds one bundle's vectors, and a point's are a pure function of the bundle and its texts, which the
  hash names, so an entry never goes stale, however many replicas write to the collection: an update changes the
  hash and misses.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Collection, Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
from cachetools import Cache, LRUCache

from metricsearch.core.records import Match

V = TypeVar("V")


def _noop() -> None:
    pass


ENTRY_OVERHEAD = 200
"""Bytes an entry costs besides its value: key, LRU links, dict slot."""


class _ReportingLru(LRUCache):
    """An LRUCache that tells `on_remove` of every entry it drops, evicted or deleted (popitem deletes too)."""

    def __init__(self, maxsize: int, getsizeof: Callable[[object], int], on_remove: Callable[[Hashable, object], None]):
        super().__init__(maxsize, getsizeof=getsizeof)
        self._on_remove = on_remove

    def __delitem__(self, key: Hashable) -> None:
        value = Cache.__getitem__(self, key)
        super().__delitem__(key)
        self._on_remove(key, value)


class _Lru(Generic[V]):
    def __init__(
        self,
        maxsize: int,
        max_bytes: int,
        sizeof: Callable[[V], int],
        on_hit: Callable[[], None],
        on_miss: Callable[[], None],
        on_remove: Callable[[Hashable, V], None] | None = None,
    ) -> None:
        """At most `maxsize` entries and `max_bytes` estimated bytes; either 0 disables the cache. `on_remove` is told
        of each entry dropped, but not of those `clear` drops."""
        self._entries: LRUCache[Hashable, V] | None = None
        if maxsize > 0 and max_bytes > 0:

            def getsizeof(value: V) -> int:
                return ENTRY_OVERHEAD + sizeof(value)

            reporting = on_remove is not None
            self._entries = (
                _ReportingLru(max_bytes, getsizeof, on_remove) if reporting else LRUCache(max_bytes, getsizeof)
            )
        self._maxsize = maxsize
        self._lock = threading.Lock()
        self._on_hit = on_hit
        self._on_miss = on_miss

    @property
    def enabled(self) -> bool:
        return self._entries is not None

    def _get(self, key: Hashable) -> V | None:
        if self._entries is None:
            return None
        with self._lock:
            value = self._entries.get(key)
        (self._on_miss if value is None else self._on_hit)()
        return value

    def _put(self, key: Hashable, value: V) -> None:
        if self._entries is None:
            return
        with self._lock:
            try:
                self._entries[key] = value
            except ValueError:  # larger than the whole cache: not kept
                return
            while len(self._entries) > self._maxsize:
                self._entries.popitem()

    @property
    def nbytes(self) -> int:
        """The estimated bytes held."""
        return 0 if self._entries is None else int(self._entries.currsize)

    def __len__(self) -> int:
        return 0 if self._entries is None else len(self._entries)


class EmbeddingCache(_Lru[np.ndarray]):
    """Query-text vectors of one bundle; size 0 disables it."""

    def __init__(
        self,
        maxsize: int,
        identity: str,
        on_hit: Callable[[], None] = _noop,
        on_miss: Callable[[], None] = _noop,
        *,
        max_bytes: int = 1 << 62,
    ) -> None:
        super().__init__(maxsize, max_bytes, lambda v: v.nbytes + 112, on_hit, on_miss)
        self._identity = identity

    def _key(self, text: str) -> tuple[str, bytes]:
        return self._identity, hashlib.blake2b(text.encode(), digest_size=16).digest()

    def get(self, text: str) -> np.ndarray | None:
        return self._get(self._key(text))

    def put(self, text: str, vector: np.ndarray) -> None:
        vector = np.array(vector, dtype=np.float32)  # an owned, read-only copy: callers share it
        vector.flags.writeable = False
        self._put(self._key(text), vector)


@dataclass(frozen=True)
class _Answer:
    matches: list[Match]
    shown: frozenset[str]
    filtered_on: frozenset[str]


class AnswerCache(_Lru[_Answer]):
    """Item-to-item answers, each kept until a write can change it; size 0 disables it (and `generation` still counts
    the changes)."""

    def __init__(
        self,
        maxsize: int,
        on_hit: Callable[[], None] = _noop,
        on_miss: Callable[[], None] = _noop,
        *,
        max_bytes: int = 1 << 62,
    ) -> None:
        super().__init__(maxsize, max_bytes, _answer_entry_bytes, on_hit, on_miss, self._unindex)
        self._generation = 0
        self._showing: dict[str, set[Hashable]] = {}
        """Item id -> the keys of the answers that show it."""
        self._filtered: dict[str, set[Hashable]] = {}
        """Metadata key -> the keys of the answers whose filter reads it."""

    @property
    def generation(self) -> int:
        """Take it before reading the store: `put` keeps an answer only if no change was noted since."""
        return self._generation

    def get(self, key: Hashable) -> list[Match] | None:
        answer = self._get(key)
        return None if answer is None else answer.matches

    def put(self, generation: int, key: Hashable, matches: list[Match], filtered_on: Collection[str] = ()) -> None:
        """Keep `matches`, ranked from what the store held after `generation` was taken; `filtered_on`: the metadata
        keys the request's filter reads."""
        if self._entries is None:
            return
        answer = _Answer(matches, frozenset(m.id for m in matches), frozenset(filtered_on))
        with self._lock:
            if generation != self._generation:  # a write landed meanwhile: this answer may predate it
                return
            if key in self._entries:
                del self._entries[key]
            try:
                self._entries[key] = answer
            except ValueError:  # larger than the whole cache: not kept
                return
            while len(self._entries) > self._maxsize:
                self._entries.popitem()
            for item_id in answer.shown:
                self._showing.setdefault(item_id, set()).add(key)
            for name in answer.filtered_on:
                self._filtered.setdefault(name, set()).add(key)

    def clear(self) -> None:
        """After a change that may touch any answer: a write of texts or items, a failed write, new statistics."""
        with self._lock:
            if self._entries is not None:
                self._entries.clear()
            self._showing.clear()
            self._filtered.clear()
            self._generation += 1

    def changed(self, metadata: Mapping[str, Collection[str]]) -> None:
        """After a write that changed only these items' metadata, each with the keys that changed: their vectors and
        terms, hence every score and every lexical statistic, are as they were, so only the answers that show one of
        them (they show its metadata) and those whose filter reads a changed key (an item may pass it now, or no
        more) can differ from a ranking now."""
        with self._lock:
            if self._entries is not None:
                dropped = set().union(
                    *(self._showing.get(item_id, ()) for item_id in metadata),
                    *(self._filtered.get(name, ()) for names in metadata.values() for name in names),
                )
                for key in dropped:
                    del self._entries[key]
            self._generation += 1

    def _unindex(self, key: Hashable, answer: _Answer) -> None:
        """Called under the lock for every answer dropped but by `clear`: the indexes hold only answers kept."""
        for index, names in ((self._showing, answer.shown), (self._filtered, answer.filtered_on)):
            for name in names:
                keys = index[name]
                keys.discard(key)
                if not keys:
                    del index[name]


class VectorCache(_Lru[dict[str, np.ndarray]]):
    """Points' dense vectors by name; max_bytes 0 disables it."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(1 << 62, max_bytes, lambda v: sum(a.nbytes + 112 for a in v.values()), _noop, _noop)

    def get(self, collection: str, point: str, content_hash: str) -> dict[str, np.ndarray] | None:
        return self._get((collection, point, content_hash))

    def put(self, collection: str, point: str, content_hash: str, vectors: dict[str, np.ndarray]) -> None:
        self._put((collection, point, content_hash), vectors)


MATCH_BYTES = 500
"""A Match's objects besides its texts and metadata (the dataclass, its score, its field-scores dict)."""


INDEXED_BYTES = 150
"""An id shown or a key filtered on, besides its string: its slot in the answer's frozenset and in an index's set,
and a share of those sets' own size."""
SETS_BYTES = 2 * 216
"""The answer's two frozensets, empty (sys.getsizeof)."""


def _answer_entry_bytes(answer: _Answer) -> int:
    return answer_bytes(answer.matches) + SETS_BYTES + INDEXED_BYTES * (len(answer.shown) + len(answer.filtered_on))


def answer_bytes(matches: list[Match]) -> int:
    """Estimated bytes of an answer's Python objects; errs high: 1.1-1.7x sys.getsizeof summed over the objects,
    for metadata of strings, of numbers, of lists, or none."""
    return 56 + sum(
        MATCH_BYTES + _value_bytes(m.id) + _value_bytes(m.title) + _value_bytes(m.metadata) for m in matches
    )


def _value_bytes(value: object) -> int:
    """CPython's sizes: a str 49 + its length (ASCII), an int or float 32, True/False/None shared, a list 56 + 8 a
    slot, a dict about 64 + 50 a slot."""
    if isinstance(value, str):
        return 49 + len(value)
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, int | float):
        return 32
    if isinstance(value, list):
        return 56 + sum(8 + _value_bytes(v) for v in value)
    if isinstance(value, dict):
        return 64 + sum(50 + _value_bytes(k) + _value_bytes(v) for k, v in value.items())
    return 64
