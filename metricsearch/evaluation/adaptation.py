"""Fusion weights that adapt to a catalog without labels: each component's neighbour agreement measured on the
catalog's own items (core/fusion.py), mapped to weights by one `AgreementRule`.

In process, as the service would measure it at index time: the first AGREEMENT_SAMPLE items by point id, asked by
id, each against every item of the catalog, standardised with the catalog's statistics. Nothing here reads a gold
file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from metricsearch.core.fusion import (
    AGREEMENT_SAMPLE,
    AgreementRule,
    CatalogAgreement,
    catalog_agreement,
    standardized,
    stats_sample,
)
from metricsearch.core.records import Item
from metricsearch.evaluation.datasets import EvalData
from metricsearch.evaluation.scorers import BundleScorer


def measure_agreement(
    scorer: BundleScorer, items: Sequence[Item], names: Sequence[str], sample: int = AGREEMENT_SAMPLE
) -> CatalogAgreement:
    """The agreement over `items` of the components in `names` (a catalog of fewer than two items agrees on
    nothing)."""
    if len(items) < 2:
        return CatalogAgreement(dict.fromkeys(names, 0.0), 0.0)
    asked = stats_sample([item.id for item in items], sample)
    data = EvalData("annotated", "catalog", [items[i] for i in asked], list(items), [[]] * len(asked), asked)
    queries, candidates, lexical = scorer.prepare(data)
    components = scorer.components(queries, candidates, lexical)
    measured = {name: components[name] for name in names if name in components}
    return catalog_agreement(standardized(measured, scorer.stats(items, candidates)), asked)


def adapted_weights(
    scorer: BundleScorer, items: Sequence[Item], rule: AgreementRule, fallback: Mapping[str, float]
) -> tuple[dict[str, float], str]:
    """The rule's weights for this catalog, and why (the measured agreement, or why the fallback)."""
    return rule.weights(measure_agreement(scorer, items, rule.components), fallback)
