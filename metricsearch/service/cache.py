"""The two caches of the query path, both bounded LRUs (cachetools) behind a lock, since request threads and the
event loop share them.

- `EmbeddingCache`: a query text's vector, keyed by (bundle identity, text hash). Encoding is a pure function of
  the bundle and the text, so an entry never goes stale; the hash keeps a 20k-character query from being a key.
- `AnswerCache`: a finished item-to-item answer (its matches), keyed by (write generation, request digest). Every
  write bumps the generation *after* it landed, and a reader takes the generation *before* it reads the store, so
  an answer is only ever found under a generation that no write has followed: one bump retires every older answer
  at once (they age out of the LRU) with no scan and no window in which a stale answer could be served.
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


class _Lru(Generic[V]):
    def __init__(self, maxsize: int, on_hit: Callable[[], None], on_miss: Callable[[], None]) -> None:
        self._entries: LRUCache[Hashable, V] | None = LRUCache(maxsize) if maxsize > 0 else None
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
        if self._entries is not None:
            with self._lock:
                self._entries[key] = value

    def __len__(self) -> int:
        return 0 if self._entries is None else len(self._entries)


class EmbeddingCache(_Lru[np.ndarray]):
    """Query-text vectors of one bundle; size 0 disables it."""

    def __init__(
        self, maxsize: int, identity: str, on_hit: Callable[[], None] = _noop, on_miss: Callable[[], None] = _noop
    ) -> None:
        super().__init__(maxsize, on_hit, on_miss)
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

    def __init__(self, maxsize: int, on_hit: Callable[[], None] = _noop, on_miss: Callable[[], None] = _noop) -> None:
        super().__init__(maxsize, on_hit, on_miss)
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
