"""Runs models on a task: score matrix -> pessimistic ranks of the relevant candidates -> metrics (or, for
scored pairs, correlations). Every model goes through the same path, so rows of one table are comparable."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from metricsearch.core.ranking import example_ranks, pearson, relevant_positions, retrieval_metrics, spearman
from metricsearch.evaluation.datasets import EvalData
from metricsearch.evaluation.scorers import Scorer

KS = (1, 5, 10, 100)


@dataclass
class ModelResult:
    """One row: the model, how it was produced, its metrics, and what the plots and --compare need (each
    example's rank and candidate count, or each pair's predicted score)."""

    model: str
    how: str
    metrics: dict[str, float]
    seconds: float
    ranks: list[int] = field(default_factory=list)
    n_candidates: list[int] = field(default_factory=list)
    predicted: list[float] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def evaluate(data: EvalData, scorer: Scorer, ks: Sequence[int] = KS) -> ModelResult:
    started = time.perf_counter()
    scores = np.asarray(scorer.scores(data), dtype=np.float64)
    expected = (len(data.queries), len(data.candidates))
    if scores.shape != expected:
        raise ValueError(f"{scorer.label} returned scores of shape {scores.shape}, expected {expected}")
    seconds = time.perf_counter() - started
    if data.is_pairs:
        predicted = np.diagonal(scores).copy()
        metrics = {"Pearson": pearson(predicted, data.gold), "Spearman": spearman(predicted, data.gold)}
        return ModelResult(scorer.label, scorer.how, metrics, seconds, predicted=predicted.tolist())
    positions, counts = rankings(data, scores)
    metrics = retrieval_metrics(positions, counts, ks, per=data.per)
    ranks, per_example = example_ranks(positions, counts, data.per)
    return ModelResult(scorer.label, scorer.how, metrics, seconds, ranks=ranks, n_candidates=per_example)


def rankings(data: EvalData, scores: np.ndarray) -> tuple[list[np.ndarray], list[int]]:
    """Each query's relevant positions among its candidates (itself left out) and its candidate count."""
    positions, counts = [], []
    for row, relevant, own in zip(scores, data.relevant, data.own_index, strict=True):
        if own is not None:
            row = np.delete(row, own)
            relevant = [j - (j > own) for j in relevant]
        positions.append(relevant_positions(row, relevant))
        counts.append(row.size)
    return positions, counts
