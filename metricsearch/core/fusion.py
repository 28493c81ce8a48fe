"""The fused rerank's normalisation: each component (a field's learned-metric score, a lexical score) is turned into
a z-score with its mean and standard deviation over a sample of the catalog's item pairs, so a weight means the same
on every catalog, and the ranking depends neither on k nor on the filter (statistics over the candidates would).
Pure numpy, no I/O.

A missing description (either side) leaves its components NaN; they take the title's z-score, as the angular
rerank compares such an item on its title. A component still unknown (a query with no term at all) is 0, an average
pair: no evidence either way, and never a NaN that would sort anywhere."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from metricsearch.core.records import point_id

if TYPE_CHECKING:
    from metricsearch.core.bundle import AdaptiveFusionSpec

EPS = 1e-9
STATS_SAMPLE = 500
"""Items whose pairs (about 250k) estimate a catalog's component statistics."""
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
"""The packaged model's fusion weights and the rule that chose them (EVALUATION.md, "Catalog matching")."""
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
"""The fusion weights for item-to-item on a product catalog, and their rule (EVALUATION.md, "Trained on the
catalog"): what a bundle trained on a catalog starts from (`metricsearch train --bundle`) before `tune` looks for
better ones there, and what `metricsearch export --fusion catalog` writes. They weigh lexical evidence more than
DEFAULT_FUSION, which keeps sentence similarity (STS-benchmark) at the encoder's figure for every use."""
NAMED_FUSIONS = {"default": (DEFAULT_FUSION, DEFAULT_FUSION_RULE), "catalog": (CATALOG_FUSION, CATALOG_FUSION_RULE)}
"""The weightings `metricsearch export --fusion` names, with their rules."""
TITLE_OF = {"description": "title", "lexical_description": "lexical_title", "ngrams_description": "ngrams_title"}


@dataclass(frozen=True)
class ComponentStats:
    """Mean and standard deviation of each component over `pairs` sampled (item, other item) pairs; for a bundle with
    an adaptive rule, the fusion `weights` the rule chose on the same catalog and why (`chosen_by`), kept together so
    a ranking never pairs one estimate's statistics with another's weights."""

    mean: Mapping[str, float]
    std: Mapping[str, float]
    pairs: int
    weights: Mapping[str, float] | None = None
    chosen_by: str = ""

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


AGREEMENT_SAMPLE = 2000
"""Items whose nearest neighbours measure each component's agreement (the first by point id, as `stats_sample`)."""
AGREEMENT_MIN_ITEMS = 50
"""Fewer sampled items than this keep the bundle's fixed weights: a handful of items' nearest neighbours measure
nothing (six items of the docs' worked example measured near-duplicates 0.667)."""
AGREEMENT_CANDIDATES = 100
"""The nearest items by the ANN vector each sampled item's agreement is measured over (as many as a by-id query
with the default MS_CANDIDATES_MIN reranks): the service asks its store, the evaluation cuts the whole catalog the
same way (evaluation/adaptation.py), so both choose the same weights. Nearest by the ANN vector alone, not with the
lexical prefetch a query adds: the embedded store's sparse prefetch does not return exactly the best TF-IDF matches
that its own lexical scores rank, so no evaluation could reproduce it. Against the agreement over every item, this
cut moved MRR by 0.001 at most on the three shared pairs (Abt-Buy 0.9496 against 0.9507)."""


def neighbour_agreement(
    z: Mapping[str, np.ndarray],
    own: Sequence[int],
    against: Mapping[str, Sequence[str]] | None = None,
    candidates: np.ndarray | None = None,
) -> dict[str, float]:
    """Per component, how often its nearest neighbour of an item is the nearest under the other components together:
    a field that names the same item as the rest of the evidence ranks on what items share (a product's model number,
    a paper's title); one that names another (a description of authors and venue, shared by many papers) is noise.
    `z`: each component's z-scores of sampled items (rows) against every item of the catalog (columns), NaN where
    either side lacks the field (`standardized`, not `zscores`, which lends a missing description the title's);
    `own`: each row's own column, left out. Measured over the rows where both the component and the others tell items
    apart; one that tells none apart (an empty or constant field, a catalog of one item) agrees 0. In the others' sum
    an unknown score is an average pair's 0, as in `fuse`. `against`: the components a component is compared with,
    where not all the others. `candidates`: a (rows, columns) mask of each row's candidates, where a row is compared
    with some items only (the service's); the others take no part, as the own column."""
    rows = np.arange(len(own))
    outside = np.zeros(np.shape(next(iter(z.values()))), dtype=bool) if z else None
    if outside is not None:
        outside[rows, own] = True
        if candidates is not None:
            outside |= ~np.asarray(candidates, dtype=bool)
    scored = {}
    for name, values in z.items():
        values = np.array(values, dtype=np.float64)
        values[outside] = np.nan
        scored[name] = values
    agreement = {}
    for name, values in scored.items():
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a row without a score: not informative
            informative = np.nanmax(values, axis=1, initial=-np.inf) > np.nanmin(values, axis=1, initial=np.inf)
        others = [o for o in (against or {}).get(name, scored) if o != name and o in scored]
        if not informative.any() or not others:
            agreement[name] = 0.0
            continue
        rest = sum(np.nan_to_num(scored[other], nan=0.0) for other in others)
        rest[outside] = np.nan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            informative &= np.nanmax(rest, axis=1, initial=-np.inf) > np.nanmin(rest, axis=1, initial=np.inf)
        if not informative.any():
            agreement[name] = 0.0
            continue
        nearest = np.where(np.isnan(values), -np.inf, values).argmax(axis=1)
        agreement[name] = float((nearest == np.where(np.isnan(rest), -np.inf, rest).argmax(axis=1))[informative].mean())
    return agreement


def standardized(components: Mapping[str, np.ndarray], stats: ComponentStats) -> dict[str, np.ndarray]:
    """Each component as (value - mean) / std with the catalog's statistics, NaN left where a field is missing."""
    return {
        name: (np.asarray(values, dtype=np.float64) - stats.mean.get(name, 0.0)) / max(stats.std.get(name, 1.0), EPS)
        for name, values in components.items()
    }


LEXICAL_COMPONENTS = ("lexical_title", "lexical_description", "lexical_text", "lexical_codes")


@dataclass(frozen=True)
class CatalogAgreement:
    """What a catalog's own items say about its components (no label read): each component's `neighbour_agreement`
    with the others, and `near_duplicates`, the learned title's agreement with the lexical components alone: high
    where the catalog lists the same things twice (two shops' listings, a paper's records), low for a set of distinct
    sentences, where the learned metric should lead (STS-benchmark). `sampled`: the items measured."""

    components: Mapping[str, float]
    near_duplicates: float
    sampled: int


def catalog_agreement(
    z: Mapping[str, np.ndarray], own: Sequence[int], candidates: np.ndarray | None = None
) -> CatalogAgreement:
    """`neighbour_agreement` of every component in `z`, and the near-duplicate agreement of its title."""
    lexical = [name for name in LEXICAL_COMPONENTS if name in z]
    near = neighbour_agreement(z, own, {"title": lexical}, candidates)["title"] if "title" in z and lexical else 0.0
    return CatalogAgreement(neighbour_agreement(z, own, candidates=candidates), near, len(own))


def candidate_agreement(
    rows: Sequence[Mapping[str, np.ndarray]],
    ids: Sequence[Sequence[str]],
    stats: ComponentStats,
    names: Sequence[str],
) -> CatalogAgreement:
    """The agreement of the components in `names` from each sampled item's components over its own candidates (the
    item itself not among them; `ids`: theirs), standardised with the catalog's statistics: the one measure the
    service and the evaluation share. Each row's candidates are put in id order first, so equal scores (items with
    equal texts) name the same nearest whichever order the candidates came in. No row, or no candidate at all,
    agrees on nothing."""
    width = max((len(row_ids) for row_ids in ids), default=0)
    if not width:
        return CatalogAgreement(dict.fromkeys(names, 0.0), 0.0, 0)
    # One column more than the widest row's candidates: each row's own column, which takes no part.
    mask = np.zeros((len(rows), width + 1), dtype=bool)
    padded = {name: np.full(mask.shape, np.nan) for name in names if any(name in row for row in rows)}
    for n, (row, row_ids) in enumerate(zip(rows, ids, strict=True)):
        order = sorted(range(len(row_ids)), key=row_ids.__getitem__)
        mask[n, : len(order)] = True
        for name, values in row.items():
            if name in padded:
                padded[name][n, : len(order)] = np.asarray(values)[order]
    return catalog_agreement(standardized(padded, stats), [width] * len(rows), mask)


@dataclass(frozen=True)
class AgreementRule:
    """Fusion weights from a catalog's agreement: on a catalog of near-duplicates (`near_duplicates` >= `gate`),
    w_c = max(a_c - floor, 0) ** power over `components`, scaled so that the largest is 1 (weights mean the same on
    every catalog: z-scores); elsewhere the bundle's fixed weights."""

    components: tuple[str, ...]
    floor: float
    power: float
    gate: float
    rule: str
    """How the parameters were chosen, for the manifest's `chosen_by`."""

    @classmethod
    def of(cls, spec: AdaptiveFusionSpec) -> AgreementRule:
        """From a manifest's `fusion.adaptive`."""
        return cls(tuple(spec.components), spec.floor, spec.power, spec.gate, spec.chosen_by)

    def weights(self, agreement: CatalogAgreement, fallback: Mapping[str, float]) -> tuple[dict[str, float], str]:
        """The weights for a catalog of this agreement, and why. `fallback` (the bundle's fixed weights) where the
        catalog holds no near-duplicates, or where no component agrees above the floor (a catalog of one item, or
        whose fields tell none apart), so the choice is always a valid weighting."""
        if agreement.sampled < AGREEMENT_MIN_ITEMS:
            return dict(fallback), (
                f"the bundle's weights: {agreement.sampled} items measured, fewer than the {AGREEMENT_MIN_ITEMS} the "
                "rule needs to tell which fields agree"
            )
        if agreement.near_duplicates < self.gate:
            return dict(fallback), (
                f"the bundle's weights: the learned title and the lexical scores name the same nearest item for "
                f"{agreement.near_duplicates:.3f} of the sampled items, below {self.gate:g} (no near-duplicates to "
                "match, or too few items to tell)"
            )
        measured = agreement.components
        raw = {name: max(measured.get(name, 0.0) - self.floor, 0.0) ** self.power for name in self.components}
        top = max(raw.values(), default=0.0)
        if top <= 0:
            return dict(fallback), f"the bundle's weights: no component agrees above {self.floor:g} on this catalog"
        listed = ", ".join(f"{name} {measured.get(name, 0.0):.3f}" for name in self.components)
        why = f"{self.rule}; near-duplicates {agreement.near_duplicates:.3f}, agreement {listed}"
        return {name: round(value / top, 4) for name, value in raw.items()}, why


AGREEMENT_FUSION = AgreementRule(
    components=("title", "description", *LEXICAL_COMPONENTS),
    floor=0.2,
    power=0.5,
    gate=0.34,
    rule=(
        "weights from each component's neighbour agreement on the catalog (no labels): floor and power with the best "
        "mean MRR on Abt-Buy, Walmart-Amazon and DBLP-Scholar's gold matches, the gate halfway between "
        "STS-benchmark's near-duplicate agreement and the lowest pair's (bench.quality; leave-one-pair-out reported)"
    ),
)
"""The label-free adaptive fusion rule that `metricsearch export` writes into the packaged bundle (docs/bundle.md)."""
