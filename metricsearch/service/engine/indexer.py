"""Writes: upsert items (embed each field once, store once, with its term vectors when the bundle has lexical
vectors), delete them, and apply each write to a replica while a model rollout fills a new bundle's store. Every
write passes the write gate, so a replica is attached or a store retired between writes, never in one."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from metricsearch.core.errors import NotFoundError
from metricsearch.core.lexical import LexicalFields
from metricsearch.core.records import Item
from metricsearch.encoder import Encoder
from metricsearch.service.cache import AnswerCache
from metricsearch.service.engine.layout import FieldLayout, content_hash
from metricsearch.service.engine.limits import Limits
from metricsearch.service.engine.statistics import Statistics
from metricsearch.service.store.base import Condition, Store, StoredItem
from metricsearch.service.store.payload import same_metadata


@dataclass(frozen=True)
class IndexResult:
    indexed: int
    unchanged: int


class Replica(Protocol):
    """Another store each write is applied to as well, after it reached this one: the new bundle's store while a
    model rollout fills it (service/rollout.py)."""

    def indexed(self, items: Sequence[Item]) -> None: ...

    def deleted(self, ids: Sequence[str]) -> None: ...

    def deleted_where(self, conditions: Sequence[Condition]) -> None: ...


class WriteGate:
    """Writes pass together (shared); `exclusive()` waits for those under way and holds new ones back meanwhile."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._writing = 0
        self._closed = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._closed)
            self._writing += 1
        try:
            yield
        finally:
            with self._cond:
                self._writing -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._closed)
            self._closed = True
            self._cond.wait_for(lambda: self._writing == 0)
        try:
            yield
        finally:
            with self._cond:
                self._closed = False
                self._cond.notify_all()


class Indexer:
    def __init__(
        self,
        store: Store,
        encoder: Encoder,
        layout: FieldLayout,
        lexical: LexicalFields | None,
        statistics: Statistics,
        *,
        limits: Limits | None = None,
        batch_size: int = 64,
        answers: AnswerCache | None = None,
        on_indexed: Callable[[IndexResult], None] | None = None,
    ) -> None:
        """`answers`: the cached answers each write is told of (service/cache.py): a write of texts around it
        (`writing`, with the items' ids), a write that changed only some items' metadata after it landed
        (`changed`, with each item's keys that did). `on_indexed` counts what an /index request wrote, for the
        metrics."""
        self.store = store
        self.encoder = encoder
        self.layout = layout
        self.lexical = lexical
        self.statistics = statistics
        self.limits = limits
        self.batch_size = batch_size
        self.answers = AnswerCache(0) if answers is None else answers
        self._on_indexed = on_indexed or (lambda _result: None)
        self.writes = WriteGate()
        self.replica: Replica | None = None
        """Set (under `writes.exclusive()`, by `replicate_to`) while a model rollout copies this store."""

    def replicate_to(self, replica: Replica | None) -> None:
        """Apply every write from the next on to `replica` as well (None: stop); writes under way finish first."""
        with self.writes.exclusive():
            self.replica = replica

    def submit(self, items: Sequence[Item]) -> IndexResult:
        """An /index request: refused whole past the limits, else indexed and counted in the metrics."""
        if self.limits is not None:
            self.limits.check_items(items)
        result = self.index(items)
        self._on_indexed(result)
        return result

    def index(self, items: Sequence[Item], batch_size: int | None = None) -> IndexResult:
        """Upsert by id (the last of duplicate ids wins); re-encode only items whose text changed."""
        with self.writes.shared():
            result, written = self._index(items, batch_size or self.batch_size)
            if self.replica is not None and written:
                self.replica.indexed(written)
        return result

    def _index(self, items: Sequence[Item], batch_size: int) -> tuple[IndexResult, list[Item]]:
        """The upsert, and the items it wrote (not those found unchanged)."""
        latest = {item.id: item for item in items}
        existing = self.store.get(list(latest))
        to_encode: list[Item] = []
        metadata_only: list[Item] = []
        unchanged = 0
        for item in latest.values():
            old = existing.get(item.id)
            digest = content_hash(item.title, item.description)
            if old is None or old.content_hash != digest:
                to_encode.append(item)
            elif not same_metadata(old.metadata, item.metadata or {}):
                metadata_only.append(item)
            else:
                unchanged += 1

        records: list[StoredItem] = []
        changed: dict[str, frozenset[str]] = {}
        if metadata_only:
            kept = self.store.get([i.id for i in metadata_only], with_vectors=True)
            for item in metadata_only:
                # A concurrent write may have changed or deleted the item since the read above: encode it afresh
                # rather than pair its texts with another text's vectors, or drop an item we acknowledge.
                old = kept.get(item.id)
                if old is not None and old.content_hash == content_hash(item.title, item.description):
                    records.append(self._record(item, old.vectors))
                    changed[item.id] = changed_keys(old.metadata, item.metadata or {})
                else:
                    to_encode.append(item)
        written = [Item(r.id, r.title, r.description, r.metadata) for r in records] + to_encode
        self._write(records, to_encode, batch_size, changed)
        return IndexResult(indexed=len(written), unchanged=unchanged), written

    def _write(
        self,
        records: list[StoredItem],
        to_encode: list[Item],
        batch_size: int,
        changed: Mapping[str, Collection[str]],
    ) -> None:
        """Upsert `records` and `to_encode` once encoded, in chunks of batch_size x workers items (an encoder call
        or two per worker), each encoded while the one before it is written. Chunks are written in order and nothing
        after a failure, which leaves what a single upsert's failure leaves: some points written, none acknowledged.
        `changed`: the metadata keys changed of each of `records`, which hold the vectors they had."""
        size = batch_size * self.encoder.bulk_workers
        chunks = [to_encode[start : start + size] for start in range(0, len(to_encode), size)]
        if not chunks:
            self._upsert(records, changed)
            return
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="index-encode") as encoding:
            pending = encoding.submit(self.encode_items, chunks[0], batch_size)
            for following in [*chunks[1:], None]:
                encoded = pending.result()
                if following:
                    pending = encoding.submit(self.encode_items, following, batch_size)
                self.write(records + encoded)
                records = []

    def write(self, records: Sequence[StoredItem]) -> None:
        """Upsert records made by `encode_items` as they are (a rollout's copy: no change detection)."""
        self._upsert(records, None)

    def _upsert(self, records: Sequence[StoredItem], changed: Mapping[str, Collection[str]] | None) -> None:
        """`changed`: the metadata keys changed of each record, where that is all they change; None: anything."""
        if not records:
            return
        try:
            if changed is None:
                with self.answers.writing([record.id for record in records]):
                    self.store.upsert(records)
            else:
                try:
                    self.store.upsert(records)
                except BaseException:  # a failed upsert may still have written some points
                    self.answers.clear()
                    raise
                self.answers.changed(changed)
        finally:
            self.statistics.written(len(records))

    def encode_items(self, items: Sequence[Item], batch_size: int) -> list[StoredItem]:
        """Items as the records this store holds: every field encoded, and their lexical vectors."""
        if not items:
            return []
        fields = self.layout.fields
        texts, slots = [], []  # slots[j] = (item row, field column) of texts[j]
        for row, item in enumerate(items):
            for col, name in enumerate(fields):
                text = item.title if name == "title" else item.description
                if text.strip():
                    texts.append(text)
                    slots.append((row, col))
        encoded = self.encoder.encode_bulk(texts, batch_size=batch_size)
        per_field = np.zeros((len(items), len(fields), encoded.shape[1]), dtype=np.float32)
        rows, cols = zip(*slots, strict=True)
        per_field[list(rows), list(cols)] = encoded
        vectors = self.layout.vectors_of(per_field)
        return [self._record(item, vectors[row]) for row, item in enumerate(items)]

    def _record(self, item: Item, vectors: dict[str, np.ndarray]) -> StoredItem:
        return StoredItem(
            id=item.id,
            title=item.title,
            description=item.description,
            metadata=dict(item.metadata or {}),
            content_hash=content_hash(item.title, item.description),
            vectors=dict(vectors),
            sparse=self.lexical.documents(item.title, item.description) if self.lexical else {},
        )

    def delete(self, item_id: str) -> None:
        if self.delete_many([item_id]) == 0:
            raise NotFoundError(f"no item with id {item_id!r}")

    def delete_many(self, ids: Sequence[str]) -> int:
        """Remove the items of `ids` that exist; returns how many did."""
        distinct = list(dict.fromkeys(ids))
        with self.writes.shared():
            try:
                with self.answers.writing(distinct):
                    deleted = self.store.delete(distinct)
            finally:
                self.statistics.written(len(distinct))
            if self.replica is not None:
                self.replica.deleted(distinct)
        return deleted

    def delete_where(self, conditions: Sequence[Condition]) -> int:
        """Remove every item that meets all `conditions`; returns how many."""
        deleted = 0
        with self.writes.shared():
            try:
                with self.answers.writing(None):
                    deleted = self.store.delete_where(conditions)
            finally:
                self.statistics.written(max(deleted, 1))
            if self.replica is not None:
                self.replica.deleted_where(conditions)
        return deleted


def changed_keys(old: Mapping[str, object], new: Mapping[str, object]) -> frozenset[str]:
    """The metadata keys whose value differs (added and removed ones too), compared as stored (`same_metadata`)."""
    return frozenset(
        key
        for key in old.keys() | new.keys()
        if key not in old or key not in new or not same_metadata({key: old[key]}, {key: new[key]})
    )
