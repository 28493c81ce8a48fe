"""The two caches of the query path, both LRUs (cachetools) behind a lock, since request threads and the event loop
share them, each bounded by entries and by bytes: an answer's size varies with k and its items' metadata (up to 100
results of up to MS_MAX_METADATA_BYTES each), so a count alone bounds nothing. Sizes are estimates of the Python
objects held from CPython's object sizes, erring high, not exact.

- `EmbeddingCache`: a query text's vector, keyed by (bundle identity, text hash). Encoding is a pure function of
  the bundle and the text, so an entry never goes stale; the hash keeps a 20k-character query from being a key.
- `AnswerCache`: a finished item-to-item answer (its matches), keyed by a fixed-size digest of the normalised request
  (a large filter costs its hash, not its size, as a key), kept until a write can change it. A write that changed only
  some items' metadata drops the answers that show one of them and those whose filter reads a changed key, through
  an index of each. A write of texts (new, replaced or deleted items) is logged with its ids (`writing`): an
  unfiltered answer that carries a `Margin` outlives it and is checked when next asked (engine/recheck.py); a
  filtered one, a larger write, a delete by filter, a failed write and a statistics re-estimate drop them all. Each
  write counts a generation when it starts and when it ends; a reader takes the generation *before* it reads the
  store, and `put` keeps its answer only if it is unchanged and no write is under way: an answer then ranks one
  state of the store, and every write after it is in the log (or the answer is gone).
- `VectorCache`: the server store's copy of candidates' vectors, keyed by (collection, point id, content hash). A
  collection holds one bundle's vectors, and a point's are a pure function of the bundle and its texts, which the
  hash names, so an entry never goes stale, however many replicas write to the collection: an update changes the
  hash and misses.
"""

from __future__ import annotations

import hashlib
import threading
from collections import deque
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping
from contextlib import contextmanager
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


WRITE_LOG = 1024
"""Writes of texts remembered: an answer older than the oldest is ranked anew."""
WRITE_LOG_ITEMS = 64
"""The most items a write of texts may hold and be logged; a larger one (a bulk load) drops every answer, each of
whose checks would rescore all of them."""
RECHECK_MAX = 256
"""The most items written since an answer that its check rescores; past that it is ranked anew."""


@dataclass(frozen=True)
class Margin:
    """What a cached answer needs to be checked after writes (engine/recheck.py): the ids of the next candidates
    after those shown (`reserve`), the best score of every other candidate (`next_best`; -inf when there was none),
    and each lexical query's idf of its terms when it was ranked, since a write moves every idf."""

    reserve: tuple[str, ...]
    next_best: float
    idf: Mapping[str, np.ndarray]


@dataclass(frozen=True)
class Cached:
    """A cached answer as looked up: its matches, its margin (None: it cannot be checked) and the ids of the items
    written since it was ranked (empty: none; None: more than a check rescores, or older than the log)."""

    matches: list[Match]
    margin: Margin | None
    written: frozenset[str] | None


@dataclass(frozen=True)
class _Answer:
    matches: list[Match]
    shown: frozenset[str]
    filtered_on: frozenset[str]
    generation: int
    margin: Margin | None


class AnswerCache(_Lru[_Answer]):
    """Item-to-item answers, each kept until a write can change it; size 0 disables it (and `generation` still counts
    the changes)."""

    def __init__(
        self,
        maxsize: int,
        on_hit: Callable[[], None] = _noop,
        on_miss: Callable[[], None] = _noop,
        on_checked: Callable[[], None] = _noop,
        *,
        max_bytes: int = 1 << 62,
    ) -> None:
        """`on_checked`: an answer served after writes, once checked (`rechecked`)."""
        super().__init__(maxsize, max_bytes, _answer_entry_bytes, on_hit, on_miss, self._unindex)
        self._on_checked = on_checked
        self._generation = 0
        self._writing = 0
        """Writes under way: an answer ranked meanwhile is not kept."""
        self._log: deque[tuple[int, frozenset[str]]] = deque()
        """(generation at its start, ids) of each write of texts logged, oldest first."""
        self._log_floor = 0
        """An answer of a generation below this one predates a write the log no longer holds."""
        self._showing: dict[str, set[Hashable]] = {}
        """Item id -> the keys of the answers that show it."""
        self._filtered: dict[str, set[Hashable]] = {}
        """Metadata key -> the keys of the answers whose filter reads it."""
        self._unchecked: set[Hashable] = set()
        """The keys of the answers without a margin, which a write of texts drops."""

    @property
    def generation(self) -> int:
        """Take it before reading the store: `put` keeps an answer only if no change was noted since."""
        return self._generation

    def quiet_since(self, generation: int) -> bool:
        """Whether no write started or ended since `generation` was taken, and none is under way."""
        with self._lock:
            return generation == self._generation and not self._writing

    def lookup(self, key: Hashable) -> Cached | None:
        """The answer kept under `key`, if any, with what was written since; counts a hit where nothing was (else the
        caller tells `rechecked` what came of its check)."""
        if self._entries is None:
            return None
        with self._lock:
            answer = self._entries.get(key)
            if answer is not None:
                written = self._written_since(answer.generation)
        if answer is None:
            self._on_miss()
            return None
        if written == frozenset():
            self._on_hit()
        return Cached(answer.matches, answer.margin, written)

    def rechecked(self, kept: bool) -> None:
        """Count how a looked-up answer with writes since it fared: served once checked, or ranked anew."""
        (self._on_checked if kept else self._on_miss)()

    def _written_since(self, generation: int) -> frozenset[str] | None:
        if generation < self._log_floor:
            return None
        written: set[str] = set()
        for started, ids in reversed(self._log):
            if started <= generation:
                break
            written |= ids
            if len(written) > RECHECK_MAX:
                return None
        return frozenset(written)

    def put(
        self,
        generation: int,
        key: Hashable,
        matches: list[Match],
        filtered_on: Collection[str] = (),
        margin: Margin | None = None,
    ) -> None:
        """Keep `matches`, ranked from what the store held after `generation` was taken; `filtered_on`: the metadata
        keys the request's filter reads; `margin`: what checks the answer after writes of texts (None: they drop
        it)."""
        if self._entries is None:
            return
        answer = _Answer(matches, frozenset(m.id for m in matches), frozenset(filtered_on), generation, margin)
        with self._lock:
            if generation != self._generation or self._writing:  # this answer may predate a write, or miss one
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
            if margin is None:
                self._unchecked.add(key)

    @contextmanager
    def writing(self, ids: Collection[str] | None) -> Iterator[None]:
        """Around a write of texts: new, replaced or deleted items, `ids` (None: not known, as a delete by filter).
        Logged where it holds WRITE_LOG_ITEMS or fewer, and the answers without a margin dropped; else, or when the
        write fails (some points may have landed), every answer is dropped (a cache that is off logs nothing)."""
        logged = self._entries is not None and ids is not None and len(ids) <= WRITE_LOG_ITEMS
        with self._lock:
            self._generation += 1
            self._writing += 1
            if not logged:
                self._drop_all()
            else:
                if len(self._log) >= WRITE_LOG:
                    self._log_floor = self._log.popleft()[0]
                self._log.append((self._generation, frozenset(ids)))
                for key in list(self._unchecked):
                    del self._entries[key]
        try:
            yield
        except BaseException:
            self.clear()
            raise
        finally:
            with self._lock:
                self._writing -= 1
                self._generation += 1

    def clear(self) -> None:
        """After a change that may touch any answer: a failed write, new statistics, a payload index built."""
        with self._lock:
            self._drop_all()
            self._generation += 1

    def _drop_all(self) -> None:
        if self._entries is not None:
            self._entries.clear()
        self._showing.clear()
        self._filtered.clear()
        self._unchecked.clear()
        self._log.clear()
        self._log_floor = self._generation

    def changed(self, metadata: Mapping[str, Collection[str]]) -> None:
        """After a write that changed only these items' metadata, each with the keys that changed: their vectors and
        terms, hence every score and every lexical statistic, are as they were, so only the answers that show one of
        them (they show its metadata) and those whose filter reads a changed key (an item may pass it now, or no
        more) can differ from a ranking now. A reserve's metadata is read anew when it is checked."""
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
        self._unchecked.discard(key)


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
    indexed = len(answer.shown) + len(answer.filtered_on)
    return answer_bytes(answer.matches) + SETS_BYTES + INDEXED_BYTES * indexed + _margin_bytes(answer.margin)


def _margin_bytes(margin: Margin | None) -> int:
    """The margin's dataclass, its reserve's ids and tuple, and its idf arrays with their dict."""
    if margin is None:
        return 0
    ids = sum(_value_bytes(item_id) + 8 for item_id in margin.reserve)
    return 200 + ids + 64 + sum(50 + 112 + a.nbytes for a in margin.idf.values())


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
