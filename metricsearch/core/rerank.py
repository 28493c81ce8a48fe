"""The exact rerank, once: a query's per-field vectors against candidates' stored vectors, scored with the bundle's
metric (MetricBERT's per-field angular sum, RecoBERT's fusion, or the Frobenius similarity of second-order factors),
and for a bundle with `fusion`, that metric's per-field scores fused with each field's lexical score (core/fusion.py).
The service reranks its ANN candidates with it and the evaluation scores whole catalogs with it, so a benchmark
figure is the ranking a user gets. Pure numpy, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from metricsearch.core import scoring, second_order
from metricsearch.core.bundle import Manifest
from metricsearch.core.fusion import AgreementRule, ComponentStats, fuse, zscores


@dataclass(frozen=True)
class FieldVectors:
    """Per-field unit vectors of one query, (F, dim), or of n candidates, (n, F, dim); which fields are present,
    (F,) or (n, F); and for a second-order bundle the factors, (F, rank, dim) or (n, F, rank, dim)."""

    fields: np.ndarray
    present: np.ndarray
    factors: np.ndarray | None = None


@dataclass(frozen=True)
class Reranked:
    """`scores`, (n,), higher is more similar; `components`, each (n,): the learned metric per field (minus the
    angular distance, or S_F) and, with lexical vectors, TF-IDF per field (`lexical_title`, ...), NaN where either side
    lacks the field; shown to users as `scores`."""

    scores: np.ndarray
    components: dict[str, np.ndarray]


class Reranker:
    """The bundle's rerank over the fields it embeds (weight > 0), in the manifest's order."""

    def __init__(self, manifest: Manifest) -> None:
        self.metric = manifest.metric
        self.fields = [f.name for f in manifest.fields if f.weight > 0]
        self.weights = [f.weight for f in manifest.fields if f.weight > 0]
        self.lambdas = manifest.recobert_lambdas
        self.fusion = manifest.fusion.weights if manifest.fusion else None
        """The manifest's fixed fusion weights; with `rule`, those used until (or where) the rule chooses."""
        adaptive = manifest.fusion.adaptive if manifest.fusion else None
        self.rule = None if adaptive is None else AgreementRule.of(adaptive)
        """The label-free rule that chooses the weights on the catalog (the statistics carry its choice)."""
        weighable = {name for name, w in (self.fusion or {}).items() if w > 0} | set(
            adaptive.components if adaptive else ()
        )
        self.scored = frozenset(weighable)
        """The components a score may read beyond the metric's own: a fused bundle's weighted ones and every one its
        rule may weigh. The others are shown only, so a service computes them for the rows it shows, not for every
        candidate."""

    @property
    def needs_stats(self) -> bool:
        """Whether a rerank over candidates needs the catalog's statistics: a fused one, and RecoBERT's, whose four
        scores are z-normalised over the catalog (recobert.txt), not over candidates that depend on k and the filter.
        Estimated from `metric_scores`' components over a sample of stored items' pairs (service/catalog.py)."""
        return self.fusion is not None or self.metric == "recobert"

    def __call__(
        self,
        query: FieldVectors,
        candidates: FieldVectors,
        lexical: Mapping[str, np.ndarray] | None = None,
        stats: ComponentStats | None = None,
    ) -> Reranked:
        """`lexical`: each candidate's TF-IDF per field (NaN where either side lacks it), keyed `lexical_<field>`;
        `stats`: the catalog's component statistics, which a fused rerank needs. A RecoBERT rerank without them
        normalises over the candidates, which is the catalog's normalisation only when they are the whole catalog."""
        scores, components = self.metric_scores(query, candidates, lexical)
        if self.fusion is not None:
            if stats is None or lexical is None:
                raise ValueError("a fused rerank needs the candidates' lexical scores and the catalog's statistics")
            scores = fuse(components, stats, self.fusion_weights(stats))
        if self.metric == "recobert" and stats is not None:
            z = zscores({name: components[name] for name in scoring.RECOBERT_PARTS}, stats)
            scores = sum(w * z[name] for w, name in zip(self.lambdas, scoring.RECOBERT_PARTS, strict=True))
        shown = {name: v for name, v in components.items() if name not in scoring.RECOBERT_PARTS}
        return Reranked(scores, shown)

    def fusion_weights(self, stats: ComponentStats | None) -> Mapping[str, float] | None:
        """The weights a fused score uses: those the rule chose on the catalog the statistics were estimated on, else
        the manifest's."""
        if self.rule is not None and stats is not None and stats.weights is not None:
            return stats.weights
        return self.fusion

    def metric_scores(
        self, query: FieldVectors, candidates: FieldVectors, lexical: Mapping[str, np.ndarray] | None = None
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The metric's own score and every component: what a fused score is made of, and for RecoBERT its four
        scores (scoring.RECOBERT_PARTS), which the catalog's statistics normalise."""
        both = candidates.present & query.present[None, :]
        recobert: dict[str, np.ndarray] = {}
        if self.metric == "frobenius":
            values = second_order.per_field_similarity(
                query.factors, query.present, candidates.factors, candidates.present
            )
            scores = second_order.weighted_score(values, self.weights)
        else:
            distances = scoring.per_field_distances(query.fields, query.present, candidates.fields, candidates.present)
            values = -distances
            if self.metric == "recobert":
                parts = scoring.recobert_parts(query.fields, query.present, candidates.fields, candidates.present)
                scores = scoring.zscore(parts) @ np.asarray(self.lambdas, dtype=np.float64)
                recobert = dict(zip(scoring.RECOBERT_PARTS, parts.T, strict=True))
            else:
                scores = scoring.per_field_score(distances, self.weights)
        components = {name: np.where(both[:, col], values[:, col], np.nan) for col, name in enumerate(self.fields)}
        return scores, {**components, **(lexical or {}), **recobert}
