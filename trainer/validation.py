"""Validation metrics for early stopping, on a held-out slice of the training data (no labels needed for a
catalog): MRR of title -> description retrieval, Spearman of cosine vs score on scored pairs, and triplet
accuracy. Higher is better for all three."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import spearmanr
from sentence_transformers import SentenceTransformer

from service.catalog import Item
from trainer.data import ScoredPair, Triplet
from trainer.metrics import pessimistic_rank, ranking_metrics

ENCODE_BATCH = 64


def diagonal_mrr(scores: np.ndarray) -> float:
    """MRR of an (n, n) score matrix (higher = more similar) whose relevant column for row i is column i, with
    the benchmark's pessimistic ties (trainer.metrics), so validation and BENCHMARKS.md count alike."""
    ranks = [pessimistic_rank(row, i) for i, row in enumerate(np.asarray(scores))]
    return ranking_metrics(ranks, len(ranks))["MRR"]


def triplet_accuracy(d_pos: np.ndarray, d_neg: np.ndarray) -> float:
    """Share of triplets whose positive is strictly nearer the anchor than the negative."""
    return float(np.mean(np.asarray(d_pos) < np.asarray(d_neg)))


def spearman(predicted: np.ndarray, gold: np.ndarray) -> float:
    """Spearman rank correlation; 0 when either side is constant (undefined, and no evidence of skill)."""
    if np.ptp(predicted) == 0 or np.ptp(gold) == 0:
        return 0.0
    return float(spearmanr(predicted, gold).statistic)


def _encode(model: SentenceTransformer, texts: list[str]) -> np.ndarray:
    """Unit vectors in float32, the way the service compares them; leaves the model in training mode."""
    try:
        return model.encode(
            texts, batch_size=ENCODE_BATCH, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
        ).astype(np.float32)
    finally:
        model.train()


def catalog_mrr(model: SentenceTransformer, items: Sequence[Item]) -> float:
    """Each held-out title ranks every held-out description by cosine (the order angular distance gives); its
    own description is the hit."""
    titles = _encode(model, [i.title for i in items])
    descriptions = _encode(model, [i.description for i in items])
    return diagonal_mrr(titles @ descriptions.T)


def pairs_spearman(model: SentenceTransformer, pairs: Sequence[ScoredPair]) -> float:
    a, b = _encode(model, [p.text_a for p in pairs]), _encode(model, [p.text_b for p in pairs])
    return spearman((a * b).sum(axis=1), np.array([p.score for p in pairs]))


def triplets_accuracy(model: SentenceTransformer, triplets: Sequence[Triplet], distance: str) -> float:
    """Under the distance the model was trained with (euclidean or cosine), as sentence-transformers'
    TripletEvaluator does."""
    a = _encode(model, [t.anchor for t in triplets])
    p = _encode(model, [t.positive for t in triplets])
    n = _encode(model, [t.negative for t in triplets])
    if distance == "euclidean":
        return triplet_accuracy(np.linalg.norm(a - p, axis=1), np.linalg.norm(a - n, axis=1))
    return triplet_accuracy(1 - (a * p).sum(axis=1), 1 - (a * n).sum(axis=1))


@dataclass(frozen=True)
class Validator:
    """A named metric of the model on the held-out examples."""

    metric: str
    size: int
    evaluate: Callable[[SentenceTransformer], float]

    def __call__(self, model: SentenceTransformer) -> float:
        return self.evaluate(model)


def build_validator(objective: str, held_out: Sequence, triplet_distance: str = "euclidean") -> Validator:
    if objective == "sbert-siamese":
        return Validator("spearman", len(held_out), lambda m: pairs_spearman(m, held_out))
    if objective == "sbert-triplet":
        return Validator("triplet_accuracy", len(held_out), lambda m: triplets_accuracy(m, held_out, triplet_distance))
    return Validator("mrr", len(held_out), lambda m: catalog_mrr(m, held_out))
