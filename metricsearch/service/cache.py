"""The two caches of the query path, both LRUs (cachetools) behind a lock, since request threads and the event loop
share them, each bounded by entries and by bytes: an answer's size varies with k and its items' metadata (up to 100
results of up to MS_MAX_METADATA_BYTES each), so a count alone bounds nothing. Sizes are estimates of the Python
objects held from CPython's object sizes, erring high, not exact.

- `EmbeddingCache`: a query text's vector, keyed by (bundle identity, text hash). Encoding is a pure function of
  the bundle and the text, so an entry never goes stale; the hash keeps a 20k-character query from being a key.
- `AnswerCache`: a finished item-to-item answer (its matches), keyed by (write generation, a fixed-size digest of the
  normalised request, so a large filter costs its hash, not its size, as a key). Every
  write bumps the generation *after* it landed, and a reader takes the generation *before* it reads the store, so
  an answer is only ever found under a generation that no write has followed: one bump retires every older answer
  at once (they age out of the LRU) with no scan and no window in which a stale answer could be served.
- `VectorCache`: the server store's copy of candidates' vectors, keyed by (collection, point id, content hash). A
  collection holds one bundle's vectors, and a point's are a pure function of the bundle and its texts, which the
  hash names, so an entry never goes stale, however many replicas write to the collection: an update changes the
  hash and misses.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import numpy as np
from cachetools import LRUCache

from metricsearch.core.records import Match

V = TypeVar("V")


def _noop() -> None:
    pass


ENTRY_OVERHEAD = 200
"""Bytes an entry costs besides its value: key, LRU links, dict slot."""


class _Lru(Generic[V]):
    def __init__(
        self,
        maxsize: int,
        max_bytes: int,
        sizeof: Callable[[V], int],
        on_hit: Callable[[], None],
        on_miss: Callable[[], None],
    ) -> None:
        """At most `maxsize` entries and `max_bytes` estimated bytes; either 0 disables the cache."""
        enabled = maxsize > 0 and max_bytes > 0
        self._entries: LRUCache[Hashable, V] | None = (
            LRUCache(max_bytes, getsizeof=lambda v: ENTRY_OVERHEAD + sizeof(v)) if enabled else None
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


class AnswerCache(_Lru[list[Match]]):
    """Item-to-item answers; size 0 disables it (and `generation` still counts writes)."""

    def __init__(
        self,
        maxsize: int,
        on_hit: Callable[[], None] = _noop,
        on_miss: Callable[[], None] = _noop,
        *,
        max_bytes: int = 1 << 62,
    ) -> None:
        super().__init__(maxsize, max_bytes, answer_bytes, on_hit, on_miss)
        self._counter = itertools.count(1)
        self._generation = 0

    @property
    def generation(self) -> int:
        """Take it before reading the store; an answer put under it is served only until the next write."""
        return self._generation

    def bump(self) -> None:
        """Call after every write has landed in the store (next() on a count is atomic under the GIL)."""
        self._generation = next(self._counter)

    def get(self, generation: int, key: Hashable) -> list[Match] | None:
        return self._get((generation, key))

    def put(self, generation: int, key: Hashable, answer: list[Match]) -> None:
        self._put((generation, key), answer)


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
