"""Fusion weights that adapt to a catalog without labels: each component's neighbour agreement measured on the
catalog's own items (core/fusion.py), mapped to weights by one `AgreementRule`.

Measured in process as the service measures it (service/engine/statistics.py): the first AGREEMENT_SAMPLE items by
point id, each against its AGREEMENT_CANDIDATES nearest items by the ANN vector (`service_candidates`), then
`candidate_agreement` with the catalog's statistics. The embedded store searches a catalog under 10,000 items
exactly, so there both choose the same weights, up to a near tie that the encoder's rounding in other batches can
flip (with 500 sampled items, one of Walmart-Amazon's moved its weights in the third decimal). Nothing here reads a
gold file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from metricsearch.core import scoring
from metricsearch.core.fusion import (
    AGREEMENT_CANDIDATES,
    AGREEMENT_SAMPLE,
    AgreementRule,
    CatalogAgreement,
    ComponentStats,
    candidate_agreement,
    stats_sample,
)
from metricsearch.core.records import Item
from metricsearch.core.rerank import FieldVectors, Reranker
from metricsearch.evaluation.datasets import EvalData


class BundleScorer(Protocol):
    """What this module reads of evaluation/scorers.py's BundleScorer (which asks this module for its weights, so it
    cannot be imported here)."""

    rerank: Reranker
    weights: Sequence[float]

    def prepare(self, data: EvalData) -> tuple[list[FieldVectors], FieldVectors, dict[str, np.ndarray] | None]: ...

    def stats(self, items: Sequence[Item], stored: FieldVectors) -> ComponentStats: ...

    def lexical_matrices(
        self, queries: Sequence[Item], candidates: Sequence[Item], present: np.ndarray
    ) -> dict[str, np.ndarray] | None: ...

    def components(
        self, queries: Sequence[FieldVectors], candidates: FieldVectors, lexical: dict[str, np.ndarray] | None
    ) -> dict[str, np.ndarray]: ...


def service_candidates(ann: np.ndarray, own: Sequence[int], limit: int = AGREEMENT_CANDIDATES) -> list[np.ndarray]:
    """Per row, the columns of the `limit` best by `ann` (the packed vectors' cosine), the row's own column left out:
    what the store's nearest-neighbour search by id returns."""
    rows = []
    for n, column in enumerate(own):
        dense = np.array(ann[n], dtype=np.float64)
        dense[column] = -np.inf
        rows.append(np.sort(np.argsort(-dense, kind="stable")[: min(limit, len(dense) - 1)]))
    return rows


def measure_agreement(
    scorer: BundleScorer, items: Sequence[Item], names: Sequence[str], sample: int = AGREEMENT_SAMPLE
) -> CatalogAgreement:
    """The agreement over `items` of the components in `names`, as the service measures it (module docstring)."""
    if len(items) < 2:
        return CatalogAgreement(dict.fromkeys(names, 0.0), 0.0, 0)
    data = EvalData("annotated", "catalog", [items[0]], list(items), [[]], [0])  # the items as stored
    _, stored, _ = scorer.prepare(data)
    return agreement_of(scorer, items, stored, scorer.stats(items, stored), names, sample)


def agreement_of(
    scorer: BundleScorer,
    items: Sequence[Item],
    stored: FieldVectors,
    stats: ComponentStats,
    names: Sequence[str],
    sample: int = AGREEMENT_SAMPLE,
) -> CatalogAgreement:
    """The agreement from the catalog's items as the service stores them (`BundleScorer.prepare`'s candidates) and
    its statistics: each sampled item by id against its nearest items."""
    if len(items) < 2:
        return CatalogAgreement(dict.fromkeys(names, 0.0), 0.0, 0)
    asked = stats_sample([item.id for item in items], sample)
    queries = [
        FieldVectors(stored.fields[i], stored.present[i], None if stored.factors is None else stored.factors[i])
        for i in asked
    ]
    lexical = scorer.lexical_matrices([items[i] for i in asked], items, stored.present)
    components = scorer.components(queries, stored, lexical)
    packed = scoring.pack(stored.fields * stored.present[..., None], scorer.weights)
    picked = service_candidates(packed[asked] @ packed.T, asked)
    rows = [
        {name: components[name][n, columns] for name in names if name in components} for n, columns in enumerate(picked)
    ]
    ids = [[items[j].id for j in columns] for columns in picked]
    return candidate_agreement(rows, ids, stats, names)


def adapted_stats(
    scorer: BundleScorer, items: Sequence[Item], stored: FieldVectors, stats: ComponentStats
) -> ComponentStats:
    """`stats` carrying the weights the bundle's adaptive rule chooses on the catalog `items` (as the service's
    statistics do), for `Reranker.fusion_weights`; unchanged for a bundle without a rule."""
    rule = scorer.rerank.rule
    if rule is None:
        return stats
    agreement = agreement_of(scorer, items, stored, stats, rule.components)
    weights, why = rule.weights(agreement, scorer.rerank.fusion)
    return dataclasses.replace(stats, weights=weights, chosen_by=why)


def adapted_weights(
    scorer: BundleScorer, items: Sequence[Item], rule: AgreementRule, fallback: Mapping[str, float]
) -> tuple[dict[str, float], str]:
    """The rule's weights for this catalog, and why (the measured agreement, or why the fallback)."""
    return rule.weights(measure_agreement(scorer, items, rule.components), fallback)
