"""Use cases: index items (embed each field once, store once) and find similar items (ANN candidates from the
store, then an exact per-field rerank in numpy with the bundle's metric)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from service import scoring
from service.bundle import Bundle, Manifest
from service.encoder import Encoder
from service.errors import InvalidInputError, NotFoundError
from service.store.base import Condition, MetadataValue, Store, StoredItem, VectorSchema

ANN_VECTOR = "ann"


@dataclass(frozen=True)
class Item:
    id: str
    title: str
    description: str = ""
    metadata: dict[str, MetadataValue] | None = None


@dataclass(frozen=True)
class IndexResult:
    indexed: int
    unchanged: int


@dataclass(frozen=True)
class Match:
    id: str
    score: float
    title: str
    metadata: dict[str, MetadataValue]
    field_scores: dict[str, float | None]


@dataclass(frozen=True)
class QueryVectors:
    """A query's unit vector per bundle field, (F, dim), and which fields it has."""

    fields: np.ndarray
    present: np.ndarray


def content_hash(title: str, description: str) -> str:
    """What decides re-encoding: the texts the encoder sees, nothing else."""
    return hashlib.sha256(f"{title}\x1f{description}".encode()).hexdigest()[:32]


def vector_schema(bundle: Bundle) -> VectorSchema:
    manifest = bundle.manifest
    fields = [f for f in manifest.fields if f.weight > 0]
    return VectorSchema(
        sizes={ANN_VECTOR: manifest.encoder.dim * len(fields)}, ann=ANN_VECTOR, identity=bundle.identity
    )


class Catalog:
    def __init__(
        self, manifest: Manifest, encoder: Encoder, store: Store, *, candidates_min: int, candidates_factor: int
    ) -> None:
        self.manifest = manifest
        self.encoder = encoder
        self.store = store
        self.fields = [f.name for f in manifest.fields if f.weight > 0]
        self.weights = [f.weight for f in manifest.fields if f.weight > 0]
        self._candidates_min = candidates_min
        self._candidates_factor = candidates_factor

    # ---------------------------------------------------------------- writes
    def index(self, items: Sequence[Item], batch_size: int = 64) -> IndexResult:
        """Upsert by id (the last of duplicate ids wins); re-encode only items whose text changed."""
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
            elif old.metadata != (item.metadata or {}):
                metadata_only.append(item)
            else:
                unchanged += 1

        records = self._encode_items(to_encode, batch_size)
        if metadata_only:
            kept = self.store.get([i.id for i in metadata_only], with_vectors=True)
            records += [self._record(i, kept[i.id].vectors[ANN_VECTOR]) for i in metadata_only if i.id in kept]
        if records:
            self.store.upsert(records)
        return IndexResult(indexed=len(records), unchanged=unchanged)

    def _encode_items(self, items: Sequence[Item], batch_size: int) -> list[StoredItem]:
        if not items:
            return []
        texts, slots = [], []  # slots[j] = (item row, field column) of texts[j]
        for row, item in enumerate(items):
            for col, name in enumerate(self.fields):
                text = item.title if name == "title" else item.description
                if text.strip():
                    texts.append(text)
                    slots.append((row, col))
        vectors = self.encoder.encode(texts, batch_size=batch_size)
        per_field = np.zeros((len(items), len(self.fields), self.encoder.dim), dtype=np.float32)
        rows, cols = zip(*slots, strict=True)
        per_field[list(rows), list(cols)] = vectors
        packed = scoring.pack(per_field, self.weights)
        return [self._record(item, packed[row]) for row, item in enumerate(items)]

    def _record(self, item: Item, packed: np.ndarray) -> StoredItem:
        return StoredItem(
            id=item.id,
            title=item.title,
            description=item.description,
            metadata=dict(item.metadata or {}),
            content_hash=content_hash(item.title, item.description),
            vectors={ANN_VECTOR: packed},
        )

    def delete(self, item_id: str) -> None:
        if self.store.delete([item_id]) == 0:
            raise NotFoundError(f"no item with id {item_id!r}")

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

    def query_vectors_from_texts(self, encoded: np.ndarray, *, free_text: bool) -> QueryVectors:
        """Lay encoded query texts out per field: a free text stands for every field; otherwise title, description."""
        n_fields = len(self.fields)
        fields = np.zeros((n_fields, encoded.shape[1]), dtype=np.float32)
        present = np.zeros(n_fields, dtype=bool)
        if free_text:
            fields[:], present[:] = encoded[0], True
        else:
            fields[: len(encoded)], present[: len(encoded)] = encoded, True
        return QueryVectors(scoring.normalize_rows(fields), present)

    def similar_to_item(
        self, item_id: str, k: int, conditions: Sequence[Condition] = (), exclude_ids: Sequence[str] = ()
    ) -> list[Match]:
        """Item-to-item from stored vectors; the item itself is never among the results."""
        found = self.store.get([item_id], with_vectors=True).get(item_id)
        if found is None:
            raise NotFoundError(f"no item with id {item_id!r}: index it first, or query by text")
        packed = found.vectors[ANN_VECTOR][None, :]
        fields, present = scoring.unpack(packed, len(self.fields))
        return self.similar(QueryVectors(fields[0], present[0]), k, conditions, [*exclude_ids, item_id])

    def similar(
        self, query: QueryVectors, k: int, conditions: Sequence[Condition] = (), exclude_ids: Sequence[str] = ()
    ) -> list[Match]:
        if k < 1:
            raise InvalidInputError("k must be at least 1")
        ann = scoring.pack(query.fields[None, :, :] * query.present[None, :, None], self.weights)[0]
        limit = max(self._candidates_min, self._candidates_factor * k)
        found = self.store.search(ann, limit, conditions, exclude_ids)
        if not found.ids:
            return []
        candidates, candidates_present = scoring.unpack(found.vectors[ANN_VECTOR], len(self.fields))
        distances = scoring.per_field_distances(query.fields, query.present, candidates, candidates_present)
        if self.manifest.metric == "recobert":
            scores = scoring.recobert_score(
                query.fields, query.present, candidates, candidates_present, self.manifest.recobert_lambdas
            )
        else:
            scores = scoring.per_field_score(distances, self.weights)
        both = candidates_present & query.present[None, :]
        best = scoring.top_k(scores, k)
        # Payloads only for the k kept; an item deleted since the search is left out.
        stored = self.store.get([found.ids[i] for i in best])
        return [
            Match(
                id=item.id,
                score=float(scores[i]),
                title=item.title,
                metadata=item.metadata,
                field_scores={
                    name: (float(-distances[i, col]) if both[i, col] else None) for col, name in enumerate(self.fields)
                },
            )
            for i in best
            if (item := stored.get(found.ids[i])) is not None
        ]
