"""The exact rerank, once: a query's per-field vectors against candidates' stored vectors, scored with the bundle's
metric (MetricBERT's per-field angular sum, RecoBERT's fusion, or the Frobenius similarity of second-order factors).
The service reranks its ANN candidates with it and the evaluation scores whole catalogs with it, so a benchmark
figure is the ranking a user gets. Pure numpy, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metricsearch.core import scoring, second_order
from metricsearch.core.bundle import Manifest


@dataclass(frozen=True)
class FieldVectors:
    """Per-field unit vectors of one query, (F, dim), or of n candidates, (n, F, dim); which fields are present,
    (F,) or (n, F); and for a second-order bundle the factors, (F, rank, dim) or (n, F, rank, dim)."""

    fields: np.ndarray
    present: np.ndarray
    factors: np.ndarray | None = None


@dataclass(frozen=True)
class Reranked:
    """`scores`, (n,), higher is more similar; `field_values`, (n, F), each field's own similarity (minus the
    angular distance, or S_F), shown to users as `scores`; `both`, (n, F), where query and candidate have the field."""

    scores: np.ndarray
    field_values: np.ndarray
    both: np.ndarray


class Reranker:
    """The bundle's rerank over the fields it embeds (weight > 0), in the manifest's order."""

    def __init__(self, manifest: Manifest) -> None:
        self.metric = manifest.metric
        self.fields = [f.name for f in manifest.fields if f.weight > 0]
        self.weights = [f.weight for f in manifest.fields if f.weight > 0]
        self.lambdas = manifest.recobert_lambdas

    def __call__(self, query: FieldVectors, candidates: FieldVectors) -> Reranked:
        both = candidates.present & query.present[None, :]
        if self.metric == "frobenius":
            field_values = second_order.per_field_similarity(
                query.factors, query.present, candidates.factors, candidates.present
            )
            return Reranked(second_order.weighted_score(field_values, self.weights), field_values, both)
        distances = scoring.per_field_distances(query.fields, query.present, candidates.fields, candidates.present)
        if self.metric == "recobert":
            scores = scoring.recobert_score(
                query.fields, query.present, candidates.fields, candidates.present, self.lambdas
            )
        else:
            scores = scoring.per_field_score(distances, self.weights)
        return Reranked(scores, -distances, both)
