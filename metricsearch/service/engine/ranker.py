"""Ranking: candidates from the store, their exact rerank in the bundle's metric (fused with the lexical scores when
the bundle says so, normalised by the catalog statistics), then the results shown. A query by id or text is a
ranking with one positive query; a recommendation has several, and negative ones.

1. Candidates: the ANN search with the positive queries' packed vector (their normalised mean for several), plus,
   with lexical vectors, the best matches of their whole texts' terms (summed for several); the query items and
   `exclude_ids` are left out.
2. Scores: one positive query is reranked as the bundle says, reading the lexical scores the search read with its
   candidates, and the components a score does not read only for the rows shown. Several are combined per
   component in the metric before any fusion: combined = mean over positives - NEGATIVE_WEIGHT x mean over
   negatives (a negative lacking the field adds 0), then fused as one query's components are.
3. Boosts (core/boost.py) are added; `scores.boost` shows their sum. min_score drops what falls below.
4. The best k + offset, ties in id order; with diversity or group_by, core/diversity.select picks them (MMR and the
   per-group cap in one greedy pass) from at least MMR_POOL x (k + offset) candidates. The first offset are skipped.
   With group_by, the candidates widen WIDEN times at a time while fewer than k + offset were picked and the store
   had more, up to MS_MAX_CANDIDATES divided by the number of queries: each is scored against every candidate, so
   the widening bounds a request's work, not only its candidates.

A plain unfiltered query by id is ranked by `ranking`, which also names the next candidates and the best score after
them; `rescored` ranks given items alike: what the answer cache's check after writes reads (recheck.py)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from metricsearch.core import diversity, scoring
from metricsearch.core.boost import boost_values
from metricsearch.core.errors import InvalidInputError
from metricsearch.core.fusion import fuse
from metricsearch.core.records import Match
from metricsearch.core.rerank import FieldVectors, Reranker
from metricsearch.core.schemas import Boost, SimilarRequest
from metricsearch.core.spans import span
from metricsearch.service.engine.layout import FieldLayout
from metricsearch.service.engine.lexical_scores import LexicalScores
from metricsearch.service.engine.queries import Query
from metricsearch.service.engine.statistics import Statistics
from metricsearch.service.store.base import Condition, Listing, SearchResult, Store

NEGATIVE_WEIGHT = 0.5
"""How much a negative item's similarity takes away, against a positive's 1: a candidate as near a negative as a
positive keeps half its score, so negatives steer without wiping out what the positives ask for."""
WIDEN = 4
MMR_POOL = 3
"""Diversity picks k among at least this many times k candidates (as many as the default candidates, 3 x k)."""


@dataclass(frozen=True)
class Options:
    """What a request asks for beyond its queries, k, filter and exclude_ids."""

    offset: int = 0
    diversity: float = 0.0
    group_keys: tuple[str, ...] = ()
    group_size: int = 1
    min_score: float | None = None
    boosts: tuple[Boost, ...] = ()

    @classmethod
    def of(cls, request: SimilarRequest) -> Options:
        return cls(
            request.offset, request.diversity, request.group_keys, request.group_size, request.min_score, request.boosts
        )


PLAIN = Options()


@dataclass(frozen=True)
class _Scored:
    """The candidates of one search, scored: `components` for every candidate, and the lexical components a score
    does not read still to be scored for the rows shown (`shown_later`)."""

    found: SearchResult
    candidates: FieldVectors
    scores: np.ndarray
    components: dict[str, np.ndarray]
    shown_later: frozenset[str]


@dataclass(frozen=True)
class Ranking:
    """A plain query's matches, the ids of the next candidates (`reserve`) and the best score after them."""

    matches: list[Match]
    reserve: tuple[str, ...]
    next_best: float


class Ranker:
    def __init__(
        self,
        store: Store,
        layout: FieldLayout,
        rerank: Reranker,
        lexical: LexicalScores | None,
        statistics: Statistics,
        *,
        candidates_min: int,
        candidates_factor: int,
        max_candidates: int,
    ) -> None:
        self.store = store
        self.layout = layout
        self.rerank = rerank
        self.lexical = lexical
        self.statistics = statistics
        self.candidates_min = candidates_min
        self.candidates_factor = candidates_factor
        self.max_candidates = max_candidates
        components = [*layout.fields, *(lexical.lexical.components if lexical else ())]
        self._component_order = components
        """How a match's `scores` lists its components: the metric's per field, then the lexical ones."""
        self._shown_only = frozenset(components) - set(layout.fields) - rerank.scored
        """The lexical components no score reads: computed for the rows shown, not for every candidate."""

    def candidate_limit(self, k: int) -> int:
        return max(self.candidates_min, self.candidates_factor * k)

    def rank(
        self,
        positives: Sequence[Query],
        k: int,
        conditions: Sequence[Condition] = (),
        exclude_ids: Sequence[str] = (),
        negatives: Sequence[Query] = (),
        options: Options = PLAIN,
    ) -> list[Match]:
        """The k best candidates after the first `options.offset` (module docstring)."""
        if k < 1:
            raise InvalidInputError("k must be at least 1")
        want = k + options.offset
        limit = self.candidate_limit(want)
        if options.diversity > 0:
            limit = max(limit, MMR_POOL * want)
        widest = max(limit, self.max_candidates // (len(positives) + len(negatives)))
        while True:
            scored = self._score(positives, negatives, limit, conditions, exclude_ids)
            if scored is None:
                return []
            scores, components = scored.scores, scored.components
            listings = scored.found.listings
            if options.boosts:
                components["boost"] = sum(boost_values(b, [x.metadata for x in listings]) for b in options.boosts)
                scores = scores + components["boost"]
            eligible = np.flatnonzero(scores >= options.min_score) if options.min_score is not None else None
            picked = self._select(options, scores, scored.candidates, scored.found.ids, listings, want, eligible)
            seen_all = len(listings) < limit
            if len(picked) >= want or seen_all or not options.group_keys or limit >= widest:
                break
            limit = _wider(limit, widest)
        return self._matches(positives[0], scored, scores, components, picked[options.offset :])

    def ranking(self, query: Query, k: int, exclude_ids: Sequence[str], reserve: int) -> Ranking:
        """A plain unfiltered query's k best (as `rank` gives them), and what checks them after writes: the ids of the
        next `reserve` candidates and the best score after those (-inf when the candidates were every item)."""
        if k < 1:
            raise InvalidInputError("k must be at least 1")
        limit = self.candidate_limit(k)
        scored = self._score([query], [], limit, (), exclude_ids)
        if scored is None:
            return Ranking([], (), -np.inf)
        ids = scored.found.ids
        picked = scoring.top_k(scored.scores, k + reserve + 1, ids).tolist()
        if len(scored.found.listings) < limit and len(picked) <= k + reserve:  # every item was a candidate
            held, next_best = picked[k:], -np.inf
        else:
            held, next_best = picked[k:-1], float(scored.scores[picked[-1]]) if len(picked) > k else np.inf
        matches = self._matches(query, scored, scored.scores, scored.components, picked[:k])
        return Ranking(matches, tuple(ids[i] for i in held), next_best)

    def rescored(self, query: Query, ids: Sequence[str], k: int, reserve: int) -> Ranking:
        """The stored items among `ids`, scored as a search's candidates are, ranked as `ranking` ranks candidates
        (its -inf when they are all held): a cached answer's check (engine/recheck.py)."""
        lexical = self.lexical
        queries = lexical.queries(query.terms, None) if lexical is not None else {}
        found = self.store.listed(ids, queries, lexical.using if lexical is not None else None)
        if not found.listings:
            return Ranking([], (), -np.inf)
        scored = self._scored_one(query, found, None)
        picked = scoring.top_k(scored.scores, k + reserve + 1, found.ids).tolist()
        next_best = float(scored.scores[picked[-1]]) if len(picked) > k + reserve else -np.inf
        matches = self._matches(query, scored, scored.scores, scored.components, picked[:k])
        return Ranking(matches, tuple(found.ids[i] for i in picked[k : k + reserve]), next_best)

    def _score(
        self,
        positives: Sequence[Query],
        negatives: Sequence[Query],
        limit: int,
        conditions: Sequence[Condition],
        exclude_ids: Sequence[str],
    ) -> _Scored | None:
        """Search the candidates and score them (module docstring, steps 1 and 2); None when there are none."""
        lexical = self.lexical
        one = positives[0] if len(positives) == 1 and not negatives else None
        packed = [self.layout.packed(p.vectors) if p.ann is None else p.ann for p in positives]
        ann = packed[0] if len(packed) == 1 else scoring.normalize_rows(np.mean(packed, axis=0)[None])[0]
        # One query's lexical scores come with the search: those the score reads for every candidate, the others
        # for the rows shown after, where the store scores in process and a second call costs little.
        reads = self.rerank.scored if self.store.lexical_in_process else None
        queries = lexical.queries(one.terms, reads) if one is not None and lexical is not None else None
        with span("store.query", limit=limit):
            found = self.store.search(
                ann,
                limit,
                conditions,
                exclude_ids,
                lexical=lexical.prefetch([p.terms for p in positives]) if lexical else None,
                scored=queries,
                using=lexical.using if queries is not None else None,
            )
        if not found.listings:
            return None
        with span("rerank", candidates=len(found.listings)):
            if one is not None:
                return self._scored_one(one, found, reads)
            candidates = self.layout.stored(found.vectors)
            scores, components = self._combined(positives, negatives, candidates, found.points)
            return _Scored(found, candidates, scores, components, frozenset())

    def _scored_one(self, query: Query, found: SearchResult, reads: frozenset[str] | None) -> _Scored:
        """One query's candidates reranked as the bundle says (step 2); `reads`: the lexical components the store
        scored with them (None: every one), the others left to the rows shown."""
        candidates = self.layout.stored(found.vectors)
        by_lexical = None
        if self.lexical is not None:
            by_lexical = self.lexical.components(found.lexical, query.terms, candidates.present, reads)
        stats = self.statistics.current() if self.rerank.needs_stats else None
        ranked = self.rerank(query.vectors, candidates, by_lexical, stats)
        later = self._shown_only if reads is not None else frozenset()
        return _Scored(found, candidates, ranked.scores, ranked.components, later)

    def _combined(
        self,
        positives: Sequence[Query],
        negatives: Sequence[Query],
        candidates: FieldVectors,
        points: Sequence[str | int],
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Several queries' scores and components, combined in the metric, then fused (module docstring, step 2)."""
        pos = [self._metric_scores(p, candidates, points) for p in positives]
        neg = [self._metric_scores(p, candidates, points) for p in negatives]
        scores = _mean([s for s, _ in pos])
        components = {name: _mean([c[name] for _, c in pos]) for name in pos[0][1]}
        if neg:
            scores = scores - NEGATIVE_WEIGHT * _mean([s for s, _ in neg])
            for name in components:
                away = _mean([c[name] for _, c in neg])
                components[name] = components[name] - NEGATIVE_WEIGHT * np.nan_to_num(away, nan=0.0)
        if self.rerank.fusion is not None:
            stats = self.statistics.current()
            scores = fuse(components, stats, self.rerank.fusion_weights(stats))
        return scores, components

    def _metric_scores(
        self, query: Query, candidates: FieldVectors, points: Sequence[str | int]
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """One query's metric score of each candidate and every component, unfused."""
        lexical = None if self.lexical is None else self.lexical.score(query.terms, candidates.present, points)
        return self.rerank.metric_scores(query.vectors, candidates, lexical)

    def _select(
        self,
        options: Options,
        scores: np.ndarray,
        candidates: FieldVectors,
        ids: list[str],
        listings: Sequence[Listing],
        want: int,
        eligible: np.ndarray | None,
    ) -> list[int]:
        """Indices into the candidates, in the order shown (step 4); only `eligible` ones when given. Equal scores
        (items with equal texts) in id order, not in the ANN order, which changes with the number of candidates:
        pages of one ranking then never overlap or skip an item."""
        if options.diversity == 0 and not options.group_keys:
            if eligible is None:
                return scoring.top_k(scores, want, ids).tolist()
            return eligible[scoring.top_k(scores[eligible], want, [ids[i] for i in eligible])].tolist()
        index = np.arange(len(scores)) if eligible is None else eligible
        index = index[np.argsort(np.array(ids, dtype=object)[index], kind="stable")]
        keys = options.group_keys
        groups = _group_values([listings[i].metadata for i in index], keys) if keys else None
        similarity_to = None
        if options.diversity > 0:  # the candidates' vectors in this order, copied only for MMR (15 MB at 5,000)
            subset = FieldVectors(
                candidates.fields[index],
                candidates.present[index],
                None if candidates.factors is None else candidates.factors[index],
            )
            similarity_to = functools.partial(
                diversity.similarity_to, subset, metric=self.rerank.metric, weights=self.rerank.weights
            )
        picked = diversity.select(
            scores[index],
            want,
            diversity=options.diversity,
            similarity_to=similarity_to,
            groups=groups,
            group_size=options.group_size,
        )
        return [int(index[j]) for j in picked]

    def _matches(
        self, query: Query, scored: _Scored, scores: np.ndarray, components: dict[str, np.ndarray], best: list[int]
    ) -> list[Match]:
        """The rows shown. Each listing was read with the vectors and lexical scores just ranked on: a write since the
        search is not shown with a score of the text it replaced (a second read of the payloads would allow that).
        The components shown only are read for the shown rows after: a write in between shows those of the new text."""
        shown = {name: values[best] for name, values in components.items()}
        if scored.shown_later and best and self.lexical is not None:
            points = [scored.found.points[i] for i in best]
            shown |= self.lexical.score(query.terms, scored.candidates.present[best], points, scored.shown_later)
        names = [name for name in self._component_order if name in shown]
        names += [name for name in shown if name not in names]
        # The shown rows' components as one matrix, converted to floats in one call rather than value by value.
        table = np.stack([shown[name] for name in names], axis=1, dtype=np.float64)
        finite = np.isfinite(table).tolist()
        listings = scored.found.listings
        matches = []
        for i, values, kept, score in zip(best, table.tolist(), finite, scores[best].tolist(), strict=True):
            listing = listings[i]
            field_scores = {name: v if f else None for name, v, f in zip(names, values, kept, strict=True)}
            matches.append(Match(listing.id, score, listing.title, listing.metadata, field_scores))
        return matches


def _wider(limit: int, widest: int) -> int:
    """The next candidate count: WIDEN times as many, or the widest where that would leave less than a doubling to it.
    A last search of nearly as many candidates as the one before was about a fourth of the costliest request's work
    (BENCHMARKS.md, "Choices behind the defaults")."""
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
    candidate (the choice among thousands of widened candidates is a measurable share of a group_by request)."""
    return list(zip(*([_hashable(one.get(key)) for one in metadata] for key in keys), strict=True))


def _hashable(value: object) -> object:
    """A metadata value as a group key: a list groups by the whole list, a missing key is the value null, and true
    is not the number 1 (as Python would have it)."""
    if isinstance(value, list):
        return tuple(value)
    return ("bool", value) if isinstance(value, bool) else value
