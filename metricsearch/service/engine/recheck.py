"""Answers that survive writes: a cached answer to a plain, unfiltered query by id is checked when next asked after
writes of texts, rather than dropped by every write (service/cache.py logs them).

Its check rescores, with the store as it is now, the items it shows, its reserve (the next RESERVE candidates when it
was ranked) and the items written since (new, replaced or deleted), and serves their k best if the k-th scores above
every other candidate's bound: the best score they had (`Margin.next_best`) plus how far a write can have moved it.
Their vectors and terms are as they were, so only the idf moves their scores (a fused bundle's lexical components):
a candidate's lexical score is sum_t idf_t q_t d_t with ||d|| = 1 and q, d >= 0, so by Cauchy-Schwarz it rose by at
most ||max(idf now - idf then, 0) q||, and its fused score by that over each component's standard deviation times
its weight (where a missing description takes the title's z-score, the larger of the two). The statistics are the
same between re-estimates, which drop every answer. An answer whose query item was written, or that the bound does
not hold, is ranked anew; one that holds is kept again with its margin now, so the next request finds it as cached.

What the check cannot see is what the candidate search would find now: the ANN graph and the lexical prefetch (the
strongest terms by live document frequency) change with writes, so an item that was no candidate may become one,
as a ranking anew finds it (BENCHMARKS.md, "Answer cache under writes", measures how often)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from metricsearch.core.fusion import EPS, TITLE_OF
from metricsearch.core.lexical import SparseVector
from metricsearch.core.records import Match
from metricsearch.core.rerank import Reranker
from metricsearch.service.cache import AnswerCache, Cached, Margin
from metricsearch.service.engine.lexical_scores import LexicalScores
from metricsearch.service.engine.queries import Query
from metricsearch.service.engine.ranker import Ranker
from metricsearch.service.engine.statistics import Statistics
from metricsearch.service.store.base import Store

RESERVE = 1.0
"""The reserve's size, times k: the candidates that fill a deleted or fallen item's place without a ranking anew."""


def reserve_of(k: int) -> int:
    return max(1, round(RESERVE * k))


class Recheck:
    """Ranks a plain query by id with its margin, and checks a cached answer of one after writes."""

    def __init__(
        self,
        store: Store,
        ranker: Ranker,
        rerank: Reranker,
        lexical: LexicalScores | None,
        statistics: Statistics,
        answers: AnswerCache,
    ) -> None:
        self.store = store
        self.ranker = ranker
        self.rerank = rerank
        self.lexical = lexical
        self.statistics = statistics
        self.answers = answers

    def rank(self, query: Query, k: int, exclude_ids: Sequence[str]) -> tuple[list[Match], Margin | None]:
        """The query's k best, and their margin (None where the store gives no idf: its answers are not checked)."""
        ranking = self.ranker.ranking(query, k, exclude_ids, reserve_of(k))
        idf = self.idf(query)
        if idf is None:
            return ranking.matches, None
        return ranking.matches, Margin(ranking.reserve, ranking.next_best, idf)

    def checked(
        self, item_id: str, query: Query, k: int, exclude_ids: Sequence[str], cached: Cached
    ) -> tuple[list[Match], Margin] | None:
        """The cached answer's items after writes (module docstring) and their margin now, or None where it must be
        ranked anew. The new margin holds the next of the items rescored as its reserve, and bounds every other item
        by the larger of the old bound and the best rescored score after the reserve."""
        margin, written = cached.margin, cached.written
        if margin is None or written is None or item_id in written:
            return None
        now = self.idf(query)
        if now is None:
            return None
        excluded = {item_id, *exclude_ids}
        ids = [m.id for m in cached.matches] + list(margin.reserve) + sorted(written)
        ids = [i for i in dict.fromkeys(ids) if i not in excluded]
        ranking = self.ranker.rescored(query, ids, k, reserve_of(k))
        bound = margin.next_best + self.drift(query, margin.idf, now)  # -inf: every item was held, and is rescored
        if bound != -np.inf and (len(ranking.matches) < k or not ranking.matches[-1].score > bound):
            return None
        return ranking.matches, Margin(ranking.reserve, max(bound, ranking.next_best), now)

    def drift(self, query: Query, then: Mapping[str, np.ndarray], now: Mapping[str, np.ndarray]) -> float:
        """The most any candidate's fused score can have risen while its query terms' idf went from `then` to `now`
        (module docstring)."""
        if self.rerank.fusion is None or self.lexical is None:
            return 0.0
        stats = self.statistics.current()
        queries = self._queries(query)
        rise = {
            name: float(np.linalg.norm(np.maximum(now[name] - then[name], 0.0) * queries[name].values))
            / max(stats.std.get(name, 1.0), EPS)
            for name in queries
        }
        total = 0.0
        for name, weight in (self.rerank.fusion_weights(stats) or {}).items():
            if weight > 0:
                total += weight * max(rise.get(name, 0.0), rise.get(TITLE_OF.get(name, ""), 0.0))
        return total

    def idf(self, query: Query) -> dict[str, np.ndarray] | None:
        """Each of the query's lexical vectors' idf of its terms now (None where the store gives none)."""
        queries = self._queries(query)
        if not queries:
            return {}
        return self.store.term_idf(queries, self.lexical.using if self.lexical else None)

    def _queries(self, query: Query) -> dict[str, SparseVector]:
        """The query's lexical vectors whose idf moves a score: those of the components a fused score may weigh, and
        of the title components their missing descriptions take (none without fusion)."""
        if self.lexical is None or self.rerank.fusion is None:
            return {}
        scored = self.rerank.scored
        return self.lexical.queries(query.terms, scored | {TITLE_OF[name] for name in scored if name in TITLE_OF})
