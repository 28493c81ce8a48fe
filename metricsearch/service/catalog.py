"""Use cases: index items (embed each field once, store once, with its term vectors when the bundle has lexical
vectors) and find similar items (candidates from the store: ANN, plus the best lexical matches over the whole text;
then an exact rerank in numpy with the bundle's metric, fused with the lexical scores when the bundle says so,
normalised with statistics of the whole catalog, so a ranking depends neither on k nor on the filter).

A second-order bundle (pooling cov or svd) stores two vectors per item: the packed first-order (mean) vector that
the ANN search uses, and the per-field factors (F x rank x dim, flattened) that the Frobenius rerank reads back."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from metricsearch.core import scoring, second_order
from metricsearch.core.bundle import Bundle, Manifest
from metricsearch.core.errors import InvalidInputError, NotFoundError, StoreMismatchError, StoreUnavailableError
from metricsearch.core.fusion import STATS_SAMPLE, ComponentStats
from metricsearch.core.lexical import WHOLE_TEXT, SparseVector, lexical_fields
from metricsearch.core.records import Item, Match
from metricsearch.core.rerank import FieldVectors, Reranker
from metricsearch.core.spans import span
from metricsearch.encoder import Encoder
from metricsearch.service.store.base import Condition, SearchResult, Store, StoredItem, VectorSchema
from metricsearch.service.store.payload import same_metadata

log = logging.getLogger(__name__)

ANN_VECTOR = "ann"
FACTORS_VECTOR = "factors"
STATS_REFRESH = 0.2
"""Writes, as a share of the items counted at the last estimate, after which the statistics are estimated anew."""


@dataclass(frozen=True)
class IndexResult:
    indexed: int
    unchanged: int


class Follower(Protocol):
    """Another catalog each write is applied to as well, after it reached this one: a model rollout's shadow
    (service/rollout.py)."""

    def indexed(self, items: Sequence[Item]) -> None: ...

    def deleted(self, ids: Sequence[str]) -> None: ...

    def deleted_where(self, conditions: Sequence[Condition]) -> None: ...


class WriteGate:
    """Writes pass together (shared); `exclusive()` waits for those under way and holds new ones back meanwhile, so
    a follower is attached or a catalog retired between writes, never in the middle of one."""

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


def content_hash(title: str, description: str) -> str:
    """What decides re-encoding: the texts the encoder sees, nothing else."""
    return hashlib.sha256(f"{title}\x1f{description}".encode()).hexdigest()[:32]


def vector_schema(bundle: Bundle) -> VectorSchema:
    manifest = bundle.manifest
    fields = [f for f in manifest.fields if f.weight > 0]
    sizes = {ANN_VECTOR: manifest.encoder.dim * len(fields)}
    if manifest.pooling != "mean":
        rank = second_order.serving_rank(manifest.pooling, manifest.rank_k)
        sizes[FACTORS_VECTOR] = len(fields) * rank * manifest.encoder.dim
    lexical = lexical_fields(manifest)
    sparse = tuple(lexical.names.values()) if lexical else ()
    return VectorSchema(sizes=sizes, ann=ANN_VECTOR, identity=bundle.identity, sparse=sparse)


class Catalog:
    def __init__(
        self,
        manifest: Manifest,
        encoder: Encoder,
        store: Store,
        *,
        candidates_min: int,
        candidates_factor: int,
        on_write: Callable[[], None] = lambda: None,
    ) -> None:
        """`on_write` runs after every write (or failed write attempt) reached the store: it retires cached answers."""
        self.manifest = manifest
        self.encoder = encoder
        self.store = store
        self.rerank = Reranker(manifest)
        self.fields = self.rerank.fields
        self.weights = self.rerank.weights
        self.lexical = lexical_fields(manifest)
        self._component_order = [*self.fields, *(self.lexical.components if self.lexical else ())]
        """How a match's `scores` lists its components: the metric's per field, then the lexical ones."""
        self._shown_only = set(self._component_order) - set(self.fields) - self.rerank.scored
        """The lexical components no score reads: computed for the rows shown, not for every candidate."""
        self._stats: ComponentStats | None = None
        self._stats_items = 0
        self._stats_lock = threading.Lock()
        self._writes_since_stats = 0
        self._writes_lock = threading.Lock()
        """Orders writer threads' counts with the refresh's subtraction (`+=` is not atomic across threads)."""
        self._stats_refresh: threading.Thread | None = None
        """The last background refresh (`stats`), which `wait_for_stats` waits for."""
        self._candidates_min = candidates_min
        self._candidates_factor = candidates_factor
        self._on_write = on_write
        self.writes = WriteGate()
        self.follower: Follower | None = None
        """Set (under `writes.exclusive()`) while a model rollout mirrors this catalog's writes."""

    # ---------------------------------------------------------------- writes
    def index(self, items: Sequence[Item], batch_size: int = 64) -> IndexResult:
        """Upsert by id (the last of duplicate ids wins); re-encode only items whose text changed."""
        with self.writes.shared():
            result, written = self._index(items, batch_size)
            if self.follower is not None and written:
                self.follower.indexed(written)
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
        if metadata_only:
            kept = self.store.get([i.id for i in metadata_only], with_vectors=True)
            for item in metadata_only:
                # A concurrent write may have changed or deleted the item since the read above: encode it afresh
                # rather than pair its texts with another text's vectors, or drop an item we acknowledge.
                old = kept.get(item.id)
                if old is not None and old.content_hash == content_hash(item.title, item.description):
                    records.append(self._record(item, old.vectors))
                else:
                    to_encode.append(item)
        written = [Item(r.id, r.title, r.description, r.metadata) for r in records] + to_encode
        self._write(records, to_encode, batch_size)
        return IndexResult(indexed=len(written), unchanged=unchanged), written

    def _write(self, records: list[StoredItem], to_encode: list[Item], batch_size: int) -> None:
        """Upsert `records` and `to_encode` once encoded, in chunks of batch_size x workers items (an encoder call
        or two per worker), each encoded while the one before it is written. Chunks are written in order and nothing
        after a failure, which leaves what a single upsert's failure leaves: some points written, none acknowledged."""
        size = batch_size * self.encoder.bulk_workers
        chunks = [to_encode[start : start + size] for start in range(0, len(to_encode), size)]
        if not chunks:
            self.write(records)
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
        if records:
            try:
                self.store.upsert(records)
            finally:  # a failed upsert may still have written some points
                self._written(len(records))

    def encode_items(self, items: Sequence[Item], batch_size: int) -> list[StoredItem]:
        """Items as the records this catalog stores: every field encoded, and their lexical vectors."""
        if not items:
            return []
        texts, slots = [], []  # slots[j] = (item row, field column) of texts[j]
        for row, item in enumerate(items):
            for col, name in enumerate(self.fields):
                text = item.title if name == "title" else item.description
                if text.strip():
                    texts.append(text)
                    slots.append((row, col))
        encoded = self.encoder.encode_bulk(texts, batch_size=batch_size)
        dim = self.encoder.dim
        per_field = np.zeros((len(items), len(self.fields), encoded.shape[1]), dtype=np.float32)
        rows, cols = zip(*slots, strict=True)
        per_field[list(rows), list(cols)] = encoded
        packed = scoring.pack(per_field[:, :, :dim], self.weights)
        if not self.encoder.rank:
            return [self._record(item, {ANN_VECTOR: packed[row]}) for row, item in enumerate(items)]
        factors = per_field[:, :, dim:].reshape(len(items), -1)  # missing fields: zero factors
        return [
            self._record(item, {ANN_VECTOR: packed[row], FACTORS_VECTOR: factors[row]})
            for row, item in enumerate(items)
        ]

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

    def _written(self, n: int) -> None:
        with self._writes_lock:
            self._writes_since_stats += n
        self._on_write()

    def delete(self, item_id: str) -> None:
        with self.writes.shared():
            try:
                deleted = self.store.delete([item_id])
            finally:
                self._written(1)
            if self.follower is not None:
                self.follower.deleted([item_id])
        if deleted == 0:
            raise NotFoundError(f"no item with id {item_id!r}")

    def delete_many(self, ids: Sequence[str]) -> int:
        """Remove the items of `ids` that exist; returns how many did."""
        with self.writes.shared():
            try:
                deleted = self.store.delete(list(dict.fromkeys(ids)))
            finally:
                self._written(len(ids))
            if self.follower is not None:
                self.follower.deleted(ids)
        return deleted

    def delete_where(self, conditions: Sequence[Condition]) -> int:
        """Remove every item that meets all `conditions`; returns how many."""
        deleted = 0
        with self.writes.shared():
            try:
                deleted = self.store.delete_where(conditions)
            finally:
                self._written(max(deleted, 1))
            if self.follower is not None:
                self.follower.deleted_where(conditions)
        return deleted

    # ---------------------------------------------------------------- reads
    def get(self, item_id: str) -> StoredItem:
        found = self.store.get([item_id]).get(item_id)
        if found is None:
            raise NotFoundError(f"no item with id {item_id!r}")
        return found

    def query_texts(self, text: str | None, title: str | None, description: str | None) -> list[str]:
        """The texts to encode for a free-text query: one text, or a title and an optional description."""
        if text is not None:
            return [text]
        texts = [title or ""]
        if "description" in self.fields and description and description.strip():
            texts.append(description)
        return texts

    def query_vectors_from_texts(self, encoded: np.ndarray, *, free_text: bool) -> FieldVectors:
        """Lay encoded query texts out per field: a free text stands for every field; otherwise title, description."""
        n_fields = len(self.fields)
        fields = np.zeros((n_fields, encoded.shape[1]), dtype=np.float32)
        present = np.zeros(n_fields, dtype=bool)
        if free_text:
            fields[:], present[:] = encoded[0], True
        else:
            fields[: len(encoded)], present[: len(encoded)] = encoded, True
        dim = self.encoder.dim
        factors = self._factors(fields[:, dim:].reshape(-1)) if self.encoder.rank else None
        return FieldVectors(scoring.normalize_rows(fields[:, :dim]), present, factors)

    def _lexical(
        self,
        terms: dict[str, SparseVector],
        present: np.ndarray,
        points: Sequence[str | int],
        names: Collection[str] | None = None,
    ) -> dict[str, np.ndarray] | None:
        """Each candidate's lexical score per lexical component (those in `names`, else all), from the store (its idf
        is the live catalog's): `_lexical_components` of `lexical_scores`."""
        if self.lexical is None:
            return None
        scores = self.store.lexical_scores(self._lexical_queries(terms, names), points, self.lexical.using)
        return self._lexical_components(scores, terms, present, names)

    def _lexical_queries(
        self, terms: dict[str, SparseVector], names: Collection[str] | None
    ) -> dict[str, SparseVector]:
        """The query's vectors of the lexical components in `names` (else of all) that the store scores."""
        components = self.lexical.components if self.lexical else ()
        return {n: v for n, v in terms.items() if n in components and (names is None or n in names)}

    def _lexical_components(
        self,
        scores: Mapping[str, np.ndarray],
        terms: dict[str, SparseVector],
        present: np.ndarray,
        names: Collection[str] | None,
    ) -> dict[str, np.ndarray]:
        """The components in `names` (else all) from the store's `scores`; NaN where the query has no term in the
        field or the candidate lacks it (the whole text is never missing)."""
        assert self.lexical is not None, "only a bundle with lexical vectors has lexical components"
        held = self.lexical.present(self.fields, present, names)
        return {
            name: np.where(here & (name in terms), scores.get(name, np.zeros(len(present))), np.nan)
            for name, here in held.items()
        }

    def stats(self) -> ComponentStats:
        """The catalog's component statistics, estimated on a sample of stored items' pairs and estimated anew after
        writes of STATS_REFRESH of the catalog. The service estimates them at start-up and before a rollout's swap
        (`warm_stats`); once stale, a background thread estimates them anew (about 0.2 s at 100k items) while every
        request ranks with the previous ones. Only statistics of no pairs at all (none yet, or of an empty catalog:
        a service started before its first `/index`) are estimated in the request that needs them."""
        current = self._stats
        if current is None or not current.pairs:
            return self._estimate_now()
        if self._stats_stale() and self._stats_lock.acquire(blocking=False):
            self._stats_refresh = threading.Thread(target=self._refresh_stats, name="stats-refresh", daemon=True)
            self._stats_refresh.start()
        return current

    def warm_stats(self) -> ComponentStats | None:
        """The statistics a fused or RecoBERT rerank needs, estimated now if missing or stale (at start-up, before a
        rollout's swap) rather than after the next request; None for a rerank without them or a store that does not
        answer yet, which leaves them to a request."""
        if not self.rerank.needs_stats:
            return None
        try:
            return self._estimate_now()
        except (StoreUnavailableError, StoreMismatchError):
            return None

    def wait_for_stats(self, timeout: float = 10.0) -> None:
        """Wait for a background refresh under way to end: before the store closes (a shutdown, a retired rollout)."""
        if self._stats_refresh is not None:
            self._stats_refresh.join(timeout)

    def _stats_stale(self) -> bool:
        return self._stats is None or self._writes_since_stats > STATS_REFRESH * max(self._stats_items, 1)

    def _estimate_now(self) -> ComponentStats:
        """Estimated in this thread unless fresh (waits for a refresh under way, then checks again)."""
        with self._stats_lock:
            if self._stats_stale():
                self._renew_stats()
            return self._stats

    def _refresh_stats(self) -> None:
        """The background refresh: runs with the lock `stats()` took for it. A failure (the store closed or out of
        reach) leaves the previous statistics, and the next request past the threshold tries again."""
        try:
            self._renew_stats()
            self._on_write()  # answers cached before now were ranked with the previous statistics
        except Exception:
            log.warning("component statistics not estimated anew; ranking with the previous ones", exc_info=True)
        finally:
            self._stats_lock.release()

    def _renew_stats(self) -> None:
        """Estimate with the lock held; writes that land meanwhile count towards the next refresh."""
        writes = self._writes_since_stats
        items = self.store.count()
        self._stats = self._estimate_stats()
        self._stats_items = items
        with self._writes_lock:
            self._writes_since_stats -= writes

    def _estimate_stats(self) -> ComponentStats:
        sample = self.store.sample(STATS_SAMPLE)
        if len(sample) < 2:
            return ComponentStats.estimate({})
        stored = self._stored({name: np.stack([i.vectors[name] for i in sample]) for name in sample[0].vectors})
        points = self.store.points([item.id for item in sample])
        parts: dict[str, list[np.ndarray]] = {}
        for n, item in enumerate(sample):
            query = FieldVectors(
                stored.fields[n], stored.present[n], None if stored.factors is None else stored.factors[n]
            )
            terms = self.lexical.queries(item.title, item.description) if self.lexical else {}
            lexical = self._lexical(terms, stored.present, points)
            others = np.arange(len(sample)) != n
            for name, values in self.rerank.metric_scores(query, stored, lexical)[1].items():
                parts.setdefault(name, []).append(values[others])
        return ComponentStats.estimate({name: np.concatenate(v) for name, v in parts.items()})

    def _stored(self, vectors: dict[str, np.ndarray]) -> FieldVectors:
        """n stored items' vectors as `encode_items` made them, (n, width) each, laid out per field."""
        fields, present = scoring.unpack(vectors[ANN_VECTOR], len(self.fields))
        return FieldVectors(fields, present, self._factors(vectors[FACTORS_VECTOR]) if self.encoder.rank else None)

    def _factors(self, flat: np.ndarray) -> np.ndarray:
        """Flattened per-field factors, (..., F * rank * dim) -> (..., F, rank, dim)."""
        return flat.reshape(*flat.shape[:-1], len(self.fields), self.encoder.rank, self.encoder.dim)

    def similar_to_item(
        self, item_id: str, k: int, conditions: Sequence[Condition] = (), exclude_ids: Sequence[str] = ()
    ) -> list[Match]:
        """Item-to-item from stored vectors; the item itself is never among the results."""
        found = self.store.get([item_id], with_vectors=True).get(item_id)
        if found is None:
            raise NotFoundError(f"no item with id {item_id!r}: index it first, or query by text")
        query, terms = self.item_query(found)
        return self.similar(query, k, conditions, [*exclude_ids, item_id], terms)

    def item_query(self, found: StoredItem) -> tuple[FieldVectors, dict[str, SparseVector]]:
        """A stored item (read with its vectors) as a query: its per-field vectors and its lexical vectors."""
        stored = self._stored({name: vector[None] for name, vector in found.vectors.items()})
        query = FieldVectors(stored.fields[0], stored.present[0], None if stored.factors is None else stored.factors[0])
        if self.lexical is None:
            return query, {}
        if found.sparse:  # read back with it (the embedded store): its documents are its field queries
            return query, self.lexical.item_queries(found.title, found.description, found.sparse)
        return query, self.lexical.queries(found.title, found.description)

    def query_terms(self, text: str | None, title: str | None, description: str | None) -> dict[str, SparseVector]:
        """A text query's lexical vectors per field (none for a bundle without lexical vectors)."""
        return self.lexical.queries(title, description, free_text=text) if self.lexical else {}

    def _prefetched(self, terms: dict[str, SparseVector] | None) -> dict[str, SparseVector] | None:
        """The lexical candidates come from the whole text alone: it holds every field's terms, and one sparse
        prefetch costs a third of three."""
        if terms is None or self.lexical is None:
            return None
        whole = self.lexical.names[WHOLE_TEXT]
        return {whole: terms[whole]} if whole in terms else None

    def similar(
        self,
        query: FieldVectors,
        k: int,
        conditions: Sequence[Condition] = (),
        exclude_ids: Sequence[str] = (),
        terms: dict[str, SparseVector] | None = None,
    ) -> list[Match]:
        """The k best by the bundle's rerank among the candidates; `terms`: the query's lexical vectors per field
        (None: no lexical candidates or components, which a fused bundle cannot rank without)."""
        if k < 1:
            raise InvalidInputError("k must be at least 1")
        ann = self.ann_vector(query)
        limit = self.candidate_limit(k)
        # Beside the components the ranking reads, those shown only, for the shown rows alone where that is cheap.
        scored = self.rerank.scored if self.store.lexical_in_process else None
        queries = None if terms is None or self.lexical is None else self._lexical_queries(terms, scored)
        with span("store.query", limit=limit):
            found = self.store.search(
                ann,
                limit,
                conditions,
                exclude_ids,
                lexical=self._prefetched(terms),
                scored=queries,
                using=self.lexical.using if self.lexical else None,
            )
        if not found.listings:
            return []
        with span("rerank", candidates=len(found.listings)):
            candidates = self._stored(found.vectors)
            lexical = (
                None if queries is None else self._lexical_components(found.lexical, terms, candidates.present, scored)
            )
            stats = self.stats() if self.rerank.needs_stats else None
            ranked = self.rerank(query, candidates, lexical, stats)
        # Each listing was read with the vectors and lexical scores just ranked on: a write since the search is not
        # shown with a score of the text it replaced (a second read of the payloads would allow that). The components
        # shown only are read for the shown rows after: a write in between shows those of the new text.
        best = scoring.top_k(ranked.scores, k, found.ids)
        shown = {name: values[best] for name, values in ranked.components.items()}
        if scored is not None and terms is not None and self._shown_only:
            points = [found.points[i] for i in best]
            shown |= self._lexical(terms, candidates.present[best], points, self._shown_only)
        # The shown rows' components as one matrix, converted to floats in one call rather than value by value.
        names = [name for name in self._component_order if name in shown]
        table = np.stack([shown[name] for name in names], axis=1, dtype=np.float64)
        finite = np.isfinite(table).tolist()
        matches = []
        for i, values, kept, score in zip(best, table.tolist(), finite, ranked.scores[best].tolist(), strict=True):
            listing = found.listings[i]
            field_scores = {name: v if f else None for name, v, f in zip(names, values, kept, strict=True)}
            matches.append(Match(listing.id, score, listing.title, listing.metadata, field_scores))
        return matches

    # --- the pieces a recommendation (service/recommend.py) ranks with
    def ann_vector(self, query: FieldVectors) -> np.ndarray:
        """The packed vector the ANN search takes for a query."""
        return scoring.pack(query.fields[None, :, :] * query.present[None, :, None], self.weights)[0]

    def candidate_limit(self, k: int) -> int:
        return max(self._candidates_min, self._candidates_factor * k)

    def lexical_prefetch(self, terms: Sequence[dict[str, SparseVector]]) -> dict[str, SparseVector] | None:
        """The whole-text lexical vector that prefetches candidates for one query or several (their terms summed)."""
        whole = [t for t in (self._prefetched(t) for t in terms) if t]
        if not whole:
            return None
        if len(whole) == 1:
            return whole[0]
        name = next(iter(whole[0]))
        indices = np.concatenate([w[name].indices for w in whole])
        values = np.concatenate([w[name].values for w in whole])
        merged, inverse = np.unique(indices, return_inverse=True)
        return {name: SparseVector(merged, np.bincount(inverse, weights=values).astype(np.float32))}

    def candidate_vectors(self, found: SearchResult) -> FieldVectors:
        return self._stored(found.vectors)

    def metric_scores(
        self,
        query: FieldVectors,
        terms: dict[str, SparseVector] | None,
        candidates: FieldVectors,
        points: Sequence[str | int],
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """One query's metric score of each candidate and every component (lexical ones with `terms`), unfused;
        `points`: the candidates' points as `SearchResult.points` holds them."""
        lexical = None if terms is None else self._lexical(terms, candidates.present, points)
        return self.rerank.metric_scores(query, candidates, lexical)
