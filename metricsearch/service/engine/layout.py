"""How one bundle's vectors are laid out, in the store and in a query: every embedded field's unit vector side by
side (one packed vector, what the ANN search takes) and, for a second-order bundle (pooling cov or svd), the
per-field factors (F x rank x dim, flattened) that the Frobenius rerank reads back. The indexer writes this layout,
the query builder and the ranker read it, so it is written down once."""

from __future__ import annotations

import hashlib

import numpy as np

from metricsearch.core import scoring, second_order
from metricsearch.core.bundle import Bundle, Manifest
from metricsearch.core.lexical import lexical_fields
from metricsearch.core.rerank import FieldVectors
from metricsearch.encoder import Encoder
from metricsearch.service.store.base import VectorSchema

ANN_VECTOR = "ann"
FACTORS_VECTOR = "factors"


def content_hash(title: str, description: str) -> str:
    """What decides re-encoding: the texts the encoder sees, nothing else."""
    return hashlib.sha256(f"{title}\x1f{description}".encode()).hexdigest()[:32]


def vector_schema(bundle: Bundle) -> VectorSchema:
    """The store's vectors: the packed ANN vector, the factors of a second-order bundle, and every sparse vector the
    bundle's lexical fields store (words and, where the manifest names an n-gram analyzer, character n-grams)."""
    manifest = bundle.manifest
    fields = [f for f in manifest.fields if f.weight > 0]
    sizes = {ANN_VECTOR: manifest.encoder.dim * len(fields)}
    if manifest.pooling != "mean":
        rank = second_order.serving_rank(manifest.pooling, manifest.rank_k)
        sizes[FACTORS_VECTOR] = len(fields) * rank * manifest.encoder.dim
    lexical = lexical_fields(manifest)
    sparse = lexical.stored if lexical else ()
    return VectorSchema(sizes=sizes, ann=ANN_VECTOR, identity=bundle.identity, sparse=sparse)


class FieldLayout:
    """The embedded fields (weight > 0, in the manifest's order), their weights, and the encoder's widths."""

    def __init__(self, manifest: Manifest, encoder: Encoder) -> None:
        self.fields = [f.name for f in manifest.fields if f.weight > 0]
        self.weights = [f.weight for f in manifest.fields if f.weight > 0]
        self.dim = encoder.dim
        self.rank = encoder.rank

    def packed(self, query: FieldVectors) -> np.ndarray:
        """The packed vector the ANN search takes for a query."""
        return scoring.pack(query.fields[None, :, :] * query.present[None, :, None], self.weights)[0]

    def stored(self, vectors: dict[str, np.ndarray]) -> FieldVectors:
        """n stored items' vectors as the indexer wrote them, (n, width) each, laid out per field."""
        fields, present = scoring.unpack(vectors[ANN_VECTOR], len(self.fields))
        return FieldVectors(fields, present, self.factors(vectors[FACTORS_VECTOR]) if self.rank else None)

    def stored_one(self, vectors: dict[str, np.ndarray]) -> FieldVectors:
        """One stored item's vectors, laid out per field: the per-field query of a query by id."""
        stored = self.stored({name: vector[None] for name, vector in vectors.items()})
        return FieldVectors(stored.fields[0], stored.present[0], None if stored.factors is None else stored.factors[0])

    def from_texts(self, encoded: np.ndarray, *, free_text: bool) -> FieldVectors:
        """Encoded query texts per field: a free text stands for every field; otherwise title, description."""
        n_fields = len(self.fields)
        fields = np.zeros((n_fields, encoded.shape[1]), dtype=np.float32)
        present = np.zeros(n_fields, dtype=bool)
        if free_text:
            fields[:], present[:] = encoded[0], True
        else:
            fields[: len(encoded)], present[: len(encoded)] = encoded, True
        factors = self.factors(fields[:, self.dim :].reshape(-1)) if self.rank else None
        return FieldVectors(scoring.normalize_rows(fields[:, : self.dim]), present, factors)

    def factors(self, flat: np.ndarray) -> np.ndarray:
        """Flattened per-field factors, (..., F * rank * dim) -> (..., F, rank, dim)."""
        return flat.reshape(*flat.shape[:-1], len(self.fields), self.rank, self.dim)

    def vectors_of(self, per_field: np.ndarray) -> list[dict[str, np.ndarray]]:
        """Each item's stored vectors from its encoded fields, (n, F, width) with zeros for a blank field: the packed
        first-order vector, and the factors for a second-order bundle (zero factors for a blank field)."""
        packed = scoring.pack(per_field[:, :, : self.dim], self.weights)
        if not self.rank:
            return [{ANN_VECTOR: row} for row in packed]
        factors = per_field[:, :, self.dim :].reshape(len(per_field), -1)
        return [{ANN_VECTOR: packed[n], FACTORS_VECTOR: factors[n]} for n in range(len(per_field))]
