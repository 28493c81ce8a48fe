"""The /similar use case beyond one query and k: recommendations from several items (positive_ids, negative_ids),
diversity, group_by, min_score, offset and boosts, for a query by id, by text or by several ids.

How one ranking is made:
1. Candidates: the ANN search with the mean of the positive queries' packed vectors (the one query's own for id or
   text), plus, with lexical vectors, the best matches of their whole texts' terms summed; positive and negative ids
   are excluded like a query's own id.
2. Scores, combined per component in the bundle's own metric before any fusion: for each candidate and each
   component c (title, description, lexical ones) and the metric's score,
   combined = mean over positives - NEGATIVE_WEIGHT x mean over negatives (a negative lacking the field adds 0).
   A fused bundle then fuses the combined components as it fuses one query's. One positive and no negative is
   exactly the plain ranking.
3. Boosts (core/boost.py) are added; `scores.boost` shows their sum. min_score drops what falls below.
4. core/diversity.select picks k + offset in order (MMR and the per-group cap in one greedy pass) from the candidates,
   at least MMR_POOL x (k + offset) of them with diversity; the first offset are skipped. Equal scores are in id
   order. With group_by, the candidates widen 4x at a time (straight to the most when that is less than 2x further)
   while fewer than k + offset were picked and the store had more, up to MS_MAX_CANDIDATES divided by the number of
   query items (positive and negative ids): each is scored against every candidate, so the widening bounds the work
   of a request, not only its candidates (in process at 100k items, 32 + 32 ids widened to 5,000 candidates took
   2.2 s, one id 0.35 s; now 32 + 32 ids take 0.15 s)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from metricsearch.core import diversity, scoring
from metricsearch.core.boost import boost_values
from metricsearch.core.errors import NotFoundError
from metricsearch.core.fusion import fuse
from metricsearch.core.lexical import SparseVector
from metricsearch.core.records import Match
from metricsearch.core.rerank import FieldVectors
from metricsearch.core.schemas import SimilarRequest
from metricsearch.service.catalog import Catalog
from metricsearch.service.store.base import Condition, Listing

NEGATIVE_WEIGHT = 0.5
"""How much a negative item's similarity takes away, against a positive's 1: a candidate as near a negative as a
positive keeps half its score, so negatives steer without wiping out what the positives ask for."""
WIDEN = 4
MMR_POOL = 3
"""Diversity picks k among at least this many times k candidates (as many as the default candidates, 3 x k)."""


@dataclass(frozen=True)
class Probe:
    """One query of a ranking: per-field vectors and lexical vectors (empty without lexical)."""

    vectors: FieldVectors
    terms: dict[str, SparseVector]


class Recommender:
    def __init__(self, catalog: Catalog, max_candidates: int) -> None:
        self.catalog = catalog
        self.max_candidates = max_candidates

    def answer(self, request: SimilarRequest, text: Probe | None = None) -> list[Match]:
        """The ranking a request asks for; `text`: its text query, encoded (None for a query by id or ids)."""
        exclude = list(request.exclude_ids)
        negatives: list[Probe] = []
        if text is not None:
            positives = [text]
        elif request.id is not None:
            found = self.catalog.store.get([request.id], with_vectors=True).get(request.id)
            if found is None:
                raise NotFoundError(f"no item with id {request.id!r}: index it first, or query by text")
            positives = [Probe(*self.catalog.item_query(found))]
            exclude.append(request.id)
        else:
            positive_ids, negative_ids = request.positive_ids or [], request.negative_ids or []
            positives = self.probes_of(positive_ids, "positive id")
            negatives = self.probes_of(negative_ids, "negative id")
            exclude += [*positive_ids, *negative_ids]
        return self.rank(request, positives, negatives, request.conditions(), exclude)

    def probes_of(self, ids: Sequence[str], role: str) -> list[Probe]:
        """Stored items as probes; 404 naming the first id not stored."""
        if not ids:
            return []
        found = self.catalog.store.get(list(ids), with_vectors=True)
        missing = [i for i in ids if i not in found]
        if missing:
            raise NotFoundError(f"{role} {missing[0]!r} is not stored: index it first, or leave it out")
        return [Probe(*self.catalog.item_query(found[i])) for i in ids]

    def rank(
        self,
        request: SimilarRequest,
        positives: Sequence[Probe],
        negatives: Sequence[Probe] = (),
        conditions: Sequence[Condition] = (),
        exclude_ids: Sequence[str] = (),
    ) -> list[Match]:
        catalog = self.catalog
        want = request.k + request.offset
        packed = [catalog.ann_vector(p.vectors) for p in positives]
        ann = packed[0] if len(packed) == 1 else scoring.normalize_rows(np.mean(packed, axis=0)[None])[0]
        prefetch = catalog.lexical_prefetch([p.terms for p in positives])
        limit = catalog.candidate_limit(want)
        if request.diversity > 0:
            limit = max(limit, MMR_POOL * want)
        widest = max(limit, self.max_candidates // (len(positives) + len(negatives)))
        while True:
            found = catalog.store.search(ann, limit, conditions, exclude_ids, lexical=prefetch)
            if not found.listings:
                return []
            candidates = catalog.candidate_vectors(found)
            scores, components = self._scores(positives, negatives, candidates, found.points)
            metadata = [listing.metadata for listing in found.listings]
            if request.boosts:
                components["boost"] = sum(boost_values(b, metadata) for b in request.boosts)
                scores = scores + components["boost"]
            eligible = np.flatnonzero(scores >= request.min_score) if request.min_score is not None else None
            picked = self._select(request, scores, candidates, found.listings, want, eligible)
            seen_all = len(found.listings) < limit
            if len(picked) >= want or seen_all or not request.group_keys or limit >= widest:
                break
            limit = _wider(limit, widest)
        return [
            Match(
                found.listings[i].id,
                float(scores[i]),
                found.listings[i].title,
                found.listings[i].metadata,
                {name: _finite(values[i]) for name, values in components.items()},
            )
            for i in picked[request.offset :]
        ]

    def _scores(
        self,
        positives: Sequence[Probe],
        negatives: Sequence[Probe],
        candidates: FieldVectors,
        points: Sequence[str | int],
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The combined score and components (module docstring, step 2)."""
        catalog = self.catalog
        pos = [catalog.metric_scores(p.vectors, p.terms, candidates, points) for p in positives]
        neg = [catalog.metric_scores(p.vectors, p.terms, candidates, points) for p in negatives]
        scores = _mean([s for s, _ in pos])
        components = {name: _mean([c[name] for _, c in pos]) for name in pos[0][1]}
        if neg:
            scores = scores - NEGATIVE_WEIGHT * _mean([s for s, _ in neg])
            for name in components:
                away = _mean([c[name] for _, c in neg])
                components[name] = components[name] - NEGATIVE_WEIGHT * np.nan_to_num(away, nan=0.0)
        fusion = catalog.rerank.fusion
        if fusion is not None:
            scores = fuse(components, catalog.stats(), fusion)
        return scores, components

    def _select(
        self,
        request: SimilarRequest,
        scores: np.ndarray,
        candidates: FieldVectors,
        listings: Sequence[Listing],
        want: int,
        eligible: np.ndarray | None,
    ) -> list[int]:
        """Indices into the candidates, in the order shown (step 4); only `eligible` ones when given."""
        # Equal scores (items with equal texts) in id order, not in the ANN order, which changes with the number of
        # candidates: pages of one ranking then never overlap or skip an item.
        ids = np.array([listing.id for listing in listings], dtype=object)
        index = np.arange(len(scores)) if eligible is None else eligible
        index = index[np.argsort(ids[index], kind="stable")]
        keys = request.group_keys
        groups = _group_values([listings[i].metadata for i in index], keys) if keys else None
        similarity_to = None
        if request.diversity > 0:  # the candidates' vectors in this order, copied only for MMR (15 MB at 5,000)
            rerank = self.catalog.rerank
            subset = FieldVectors(
                candidates.fields[index],
                candidates.present[index],
                None if candidates.factors is None else candidates.factors[index],
            )
            similarity_to = functools.partial(
                diversity.similarity_to, subset, metric=rerank.metric, weights=rerank.weights
            )
        picked = diversity.select(
            scores[index],
            want,
            diversity=request.diversity,
            similarity_to=similarity_to,
            groups=groups,
            group_size=request.group_size,
        )
        return [int(index[j]) for j in picked]


def _wider(limit: int, widest: int) -> int:
    """The next candidate count: WIDEN times as many, or the widest where that would leave less than a doubling to it.
    A last search of nearly as many candidates as the one before was about a fourth of the costliest request's work
    (BENCHMARKS.md, "Costly requests")."""
    wider = limit * WIDEN
    return widest if 2 * wider > widest else wider


def _mean(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Element-wise mean over the finite values; NaN where none is (a field every query lacks)."""
    stacked = np.stack(arrays).astype(np.float64)
    finite = np.isfinite(stacked)
    count = finite.sum(axis=0)
    total = np.where(finite, stacked, 0.0).sum(axis=0)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _group_values(metadata: Sequence[Mapping[str, object]], keys: Sequence[str]) -> list[tuple]:
    """Each candidate's group: its values of the keys, built a key at a time rather than by a generator per
    candidate (with the lazy copy for MMR and the one-go cap in core/diversity.py, the choice among the candidates of
    a group_by request widened to 5,000 took 16 ms instead of 43, in process at 100k items)."""
    return list(zip(*([_hashable(one.get(key)) for one in metadata] for key in keys), strict=True))


def _hashable(value: object) -> object:
    """A metadata value as a group key: a list groups by the whole list, a missing key is the value null, and true
    is not the number 1 (as Python would have it)."""
    if isinstance(value, list):
        return tuple(value)
    return ("bool", value) if isinstance(value, bool) else value


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None
