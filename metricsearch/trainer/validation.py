"""Validation metrics for early stopping, on a held-out slice of the training data (no labels needed for a
catalog): MRR of title -> description retrieval, Spearman of cosine vs score on scored pairs, and triplet
accuracy. Higher is better for all three. A second-order run (pooling cov or svd) is validated as the service will
serve it: S_F from the factors `service.second_order` computes from the token embeddings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

from metricsearch.core import second_order
from metricsearch.core.ranking import pessimistic_rank, ranking_metrics, spearman
from metricsearch.core.records import Item, ScoredPair, Triplet

ENCODE_BATCH = 64


def diagonal_mrr(scores: np.ndarray) -> float:
    """MRR of an (n, n) score matrix (higher = more similar) whose relevant column for row i is column i, with
    the benchmark's pessimistic ties (evaluation.metrics), so validation and BENCHMARKS.md count alike."""
    ranks = [pessimistic_rank(row, i) for i, row in enumerate(np.asarray(scores))]
    return ranking_metrics(ranks, len(ranks))["MRR"]


def triplet_accuracy(d_pos: np.ndarray, d_neg: np.ndarray) -> float:
    """Share of triplets whose positive is strictly nearer the anchor than the negative."""
    return float(np.mean(np.asarray(d_pos) < np.asarray(d_neg)))


def _encode(model: SentenceTransformer, texts: list[str]) -> np.ndarray:
    """Unit vectors in float32, the way the service compares them; leaves the model in training mode."""
    try:
        return model.encode(
            texts, batch_size=ENCODE_BATCH, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
        ).astype(np.float32)
    finally:
        model.train()


@dataclass(frozen=True)
class Pooling:
    """How texts are compared: cosine of mean embeddings, or S_F of factors (cov, svd) as the service scores them."""

    name: str = "mean"
    rank_k: int | None = None

    def represent(self, model: SentenceTransformer, texts: list[str]) -> np.ndarray:
        """(n, d) unit vectors, or (n, rank, d) factors for second-order pooling."""
        if self.name == "mean":
            return _encode(model, texts)
        rank = second_order.serving_rank(self.name, self.rank_k)
        return second_order.represent(token_matrices(model, texts), rank)[1]

    @staticmethod
    def pairwise(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(len a, len b) similarities."""
        return a @ b.T if a.ndim == 2 else second_order.pairwise_frobenius_similarity(a, b)

    @staticmethod
    def rowwise(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Similarity of a[i] and b[i] for every i."""
        if a.ndim == 2:
            return (a * b).sum(axis=1)
        return np.array([second_order.frobenius_similarity(x, y[None])[0] for x, y in zip(a, b, strict=True)])


def token_matrices(model: SentenceTransformer, texts: list[str]) -> list[np.ndarray]:
    """Each text's (n_i, d) float32 token embeddings without its padding, what a `tokens` bundle's encoder returns;
    leaves the model in training mode."""
    model.eval()
    matrices: list[np.ndarray] = []
    try:
        with torch.no_grad():
            for start in range(0, len(texts), ENCODE_BATCH):
                features = model.preprocess(texts[start : start + ENCODE_BATCH])
                features = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in features.items()}
                tokens = model(features)["token_embeddings"].float().cpu().numpy()
                lengths = features["attention_mask"].sum(dim=1).tolist()  # BERT tokenizers pad on the right
                matrices += [t[:n] for t, n in zip(tokens, lengths, strict=True)]
    finally:
        model.train()
    return matrices


def catalog_mrr(
    model: SentenceTransformer,
    items: Sequence[Item],
    pooling: Pooling | None = None,
    positives: list[str] | None = None,
) -> float:
    """Each held-out title ranks every held-out positive (its description, or the text given in `positives`) by
    cosine (the order angular distance gives) or S_F; its own positive is the hit."""
    pooling = pooling or Pooling()
    titles = pooling.represent(model, [i.title for i in items])
    targets = pooling.represent(model, positives or [i.description for i in items])
    return diagonal_mrr(pooling.pairwise(titles, targets))


def pairs_spearman(model: SentenceTransformer, pairs: Sequence[ScoredPair], pooling: Pooling | None = None) -> float:
    pooling = pooling or Pooling()
    a = pooling.represent(model, [p.text_a for p in pairs])
    b = pooling.represent(model, [p.text_b for p in pairs])
    return spearman(pooling.rowwise(a, b), np.array([p.score for p in pairs]))


def triplets_accuracy(
    model: SentenceTransformer, triplets: Sequence[Triplet], distance: str, pooling: Pooling | None = None
) -> float:
    """Under the distance the model was trained with (euclidean or cosine), as sentence-transformers'
    TripletEvaluator does; 1 - S_F for second-order pooling (the euclidean distance between unit second-order
    vectors orders triplets as it does)."""
    pooling = pooling or Pooling()
    a = pooling.represent(model, [t.anchor for t in triplets])
    p = pooling.represent(model, [t.positive for t in triplets])
    n = pooling.represent(model, [t.negative for t in triplets])
    if distance == "euclidean" and pooling.name == "mean":
        return triplet_accuracy(np.linalg.norm(a - p, axis=1), np.linalg.norm(a - n, axis=1))
    return triplet_accuracy(1 - pooling.rowwise(a, p), 1 - pooling.rowwise(a, n))


@dataclass(frozen=True)
class Validator:
    """A named metric of the model on the held-out examples."""

    metric: str
    size: int
    evaluate: Callable[[SentenceTransformer], float]

    def __call__(self, model: SentenceTransformer) -> float:
        return self.evaluate(model)


def build_validator(
    objective: str,
    held_out: Sequence,
    triplet_distance: str = "euclidean",
    pooling: Pooling | None = None,
    positives: list[str] | None = None,
) -> Validator:
    """The objective's metric on `held_out`; a catalog's titles rank `positives` when given (the positives the
    objective trains on, drawn once), else the held-out descriptions."""
    pooling = pooling or Pooling()
    if objective == "sbert-siamese":
        return Validator("spearman", len(held_out), lambda m: pairs_spearman(m, held_out, pooling))
    if objective == "sbert-triplet":
        return Validator(
            "triplet_accuracy", len(held_out), lambda m: triplets_accuracy(m, held_out, triplet_distance, pooling)
        )
    return Validator("mrr", len(held_out), lambda m: catalog_mrr(m, held_out, pooling, positives))
