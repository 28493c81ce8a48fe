"""The fused rerank's normalisation: each component (a field's learned-metric score, a lexical score) is turned into
a z-score with its mean and standard deviation over a sample of the catalog's item pairs, so a weight means the same
on every catalog, and the ranking depends neither on k nor on the filter (statistics over the candidates would).
Pure numpy, no I/O.

A missing description (either side) leaves its components NaN; they take the title's z-score, as the angular
rerank compares such an item on its title. A component still unknown (a query with no term at all) is 0, an average
pair: no evidence either way, and never a NaN that would sort anywhere."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from metricsearch.core.records import point_id

EPS = 1e-9
STATS_SAMPLE = 200
"""Items whose pairs (about 40k) estimate a catalog's component statistics."""
DEFAULT_FUSION = {
    "title": 2.0,
    "description": 1.0,
    "lexical_title": 0.0,
    "lexical_description": 0.0,
    "lexical_text": 0.5,
    "lexical_codes": 0.5,
}
DEFAULT_FUSION_RULE = (
    "metricsearch tune with Abt-Buy's labelled matches (--pairs), among the weightings whose STS-benchmark test "
    "Spearman is no lower than the encoder's cosine; confirmed on Walmart-Amazon, which it never saw"
)
"""The packaged model's fusion weights and the rule that chose them (EVALUATION.md, "Hybrid")."""
CATALOG_FUSION = {
    "title": 0.5,
    "description": 0.0,
    "lexical_title": 0.0,
    "lexical_description": 0.0,
    "lexical_text": 2.0,
    "lexical_codes": 0.5,
}
CATALOG_FUSION_RULE = (
    "metricsearch tune with Abt-Buy's labelled matches (--pairs) on the packaged model, with no STS-benchmark check: "
    "a bundle trained on a catalog ranks that catalog's items; confirmed on Walmart-Amazon, which it never saw"
)
"""The fusion weights for item-to-item on a product catalog, and their rule (EVALUATION.md, "Hybrid: trained"): what a
bundle trained on a catalog starts from (`metricsearch train --bundle`) before `tune` looks for better ones there, and
what `metricsearch export --fusion catalog` writes. They weigh lexical evidence more than DEFAULT_FUSION, which keeps
sentence similarity (STS-benchmark) at the encoder's figure for every use."""
NAMED_FUSIONS = {"default": (DEFAULT_FUSION, DEFAULT_FUSION_RULE), "catalog": (CATALOG_FUSION, CATALOG_FUSION_RULE)}
"""The weightings `metricsearch export --fusion` names, with their rules."""
TITLE_OF = {"description": "title", "lexical_description": "lexical_title"}


@dataclass(frozen=True)
class ComponentStats:
    """Mean and standard deviation of each component over `pairs` sampled (item, other item) pairs."""

    mean: Mapping[str, float]
    std: Mapping[str, float]
    pairs: int

    @classmethod
    def estimate(cls, components: Mapping[str, np.ndarray]) -> ComponentStats:
        """From each component's values on the same sampled pairs (NaN where a field is missing)."""
        mean, std = {}, {}
        for name, values in components.items():
            finite = np.asarray(values, dtype=np.float64)
            finite = finite[np.isfinite(finite)]
            mean[name] = float(finite.mean()) if len(finite) else 0.0
            std[name] = float(finite.std()) if len(finite) > 1 else 1.0
        pairs = max((len(v) for v in components.values()), default=0)
        return cls(mean, std, pairs)


def stats_sample(ids: Sequence[str], n: int = STATS_SAMPLE) -> list[int]:
    """Positions of the items whose pairs estimate the statistics: the first n by point id, as a store's scroll
    returns them, so the service and an in-process evaluation sample the same items of the same catalog."""
    return sorted(range(len(ids)), key=lambda i: point_id(ids[i]))[:n]


def zscores(components: Mapping[str, np.ndarray], stats: ComponentStats) -> dict[str, np.ndarray]:
    """Each component's z-score; a missing description's take the title's."""
    names, z = _zscore_rows(components, stats)
    return dict(zip(names, z, strict=True))


def fuse(components: Mapping[str, np.ndarray], stats: ComponentStats, weights: Mapping[str, float]) -> np.ndarray:
    """sum_c w_c z_c over the weighted components: 0 is the catalog's average pair, each unit one standard
    deviation of a component; higher is more similar."""
    names, z = _zscore_rows(
        {name: components[name] for name, w in weights.items() if w > 0 and name in components}, stats
    )
    if not names:
        return np.zeros(np.shape(next(iter(components.values()))) if components else 0)
    # One elementwise multiply-add per component, not a BLAS product: BLAS may round a row's sum differently with
    # its place in the array, and an item's score must not depend on which other candidates came with it.
    score = weights[names[0]] * z[0]
    for name, row in zip(names[1:], z[1:], strict=True):
        score += weights[name] * row
    return score


def _zscore_rows(components: Mapping[str, np.ndarray], stats: ComponentStats) -> tuple[list[str], np.ndarray]:
    """The components' names and their z-scores stacked, (components, *shape), in one numpy call per step rather
    than one per component (0.08 ms of a 4.6 ms fused by-id request at 100k items)."""
    names = list(components)
    if not names:
        return names, np.zeros(0)
    z = np.array([components[name] for name in names], dtype=np.float64)
    column = (len(names),) + (1,) * (z.ndim - 1)
    mean = np.array([stats.mean.get(name, 0.0) for name in names]).reshape(column)
    std = np.array([max(stats.std.get(name, 1.0), EPS) for name in names]).reshape(column)
    z = (z - mean) / std
    for name, title in TITLE_OF.items():
        if name in components and title in components:
            row, title_row = names.index(name), names.index(title)
            z[row] = np.where(np.isnan(z[row]), z[title_row], z[row])
    # Still unknown (a query without a single term): no evidence either way, an average pair's 0. (np.nan_to_num
    # took 10 us warm against 2 us for this, and in a line profile as long as the rest of this function: it also
    # looks for infinities, which no score is.)
    np.copyto(z, 0.0, where=np.isnan(z))
    return names, z
