"""A search whose candidates hold the whole catalog answers what a rerank of every item, sorted by hand, gives: the
same ids in the same order, the same scores and components, for a narrow and a wide page."""

from __future__ import annotations

import math

import pytest

from metricsearch.core.fusion import DEFAULT_FUSION
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service
from metricsearch.service.store.base import Equals
from tests.bundles import bundle_variant
from tests.service.catalogs import catalog_items

N_ITEMS = 150


@pytest.fixture(scope="module")
def engine(tiny_bundle, tmp_path_factory):
    folder = tmp_path_factory.mktemp("exact")
    bundle = bundle_variant(tiny_bundle, folder / "bundle", fusion={"weights": DEFAULT_FUSION, "chosen_by": "test"})
    # At least N_ITEMS candidates for any k: every search reranks the whole (filtered) catalog.
    runtime = Service(Settings(bundle_dir=bundle, data_dir=folder / "data", candidates_min=N_ITEMS)).live
    runtime.engine.indexer.index(catalog_items(N_ITEMS))
    yield runtime.engine
    runtime.close()


def exact(engine, query_id: str, k: int, conditions) -> list[tuple]:
    """Every other item meeting `conditions`, read as a search reads it, reranked, then sorted by hand best first
    with ties by id: (id, score, components) each."""
    query = engine.queries.of_id(query_id)
    everything = engine.store.search(engine.layout.packed(query.vectors), N_ITEMS, conditions, [query_id])
    wanted = {f"i{n}" for n in range(N_ITEMS) if all(c.value == ("a" if n % 2 else "b") for c in conditions)}
    assert set(everything.ids) == wanted - {query_id}
    candidates = engine.layout.stored(everything.vectors)
    lexical = engine.ranker.lexical.score(query.terms, candidates.present, everything.points)
    ranked = engine.rerank(query.vectors, candidates, lexical, engine.statistics.current())
    rows = [
        (
            i,
            float(ranked.scores[n]),
            {c: float(v[n]) if math.isfinite(v[n]) else None for c, v in ranked.components.items()},
        )
        for n, i in enumerate(everything.ids)
    ]
    return sorted(rows, key=lambda row: (-row[1], row[0]))[:k]


@pytest.mark.parametrize("k", [10, 100])
@pytest.mark.parametrize("shop", [None, "a"])
def test_answer_is_the_exact_rerank_of_every_item(engine, k, shop):
    conditions = [Equals("shop", shop)] if shop else []
    for query_id in ("i3", "i10", "i41", "i77"):
        served = engine.similar_to_item(query_id, k, conditions)
        assert [(m.id, m.score, m.field_scores) for m in served] == exact(engine, query_id, k, conditions)


@pytest.mark.parametrize("k", [1, 10])
def test_a_ranking_with_its_reserve_shows_what_rank_shows_and_rescored_items_rank_alike(engine, k):
    """`ranking` (a cached answer's first ranking) shows `rank`'s matches and names the next k candidates, whose
    scores lie between the last shown and the best after them; `rescored` of the shown and reserve ids, in any order,
    ranks them as the search did."""
    query = engine.queries.of_id("i3")
    shown = engine.ranker.rank([query], k, (), ["i3"])
    ranking = engine.ranker.ranking(query, k, ["i3"], reserve=k)
    assert ranking.matches == shown and len(ranking.reserve) == k
    wider = engine.ranker.rank([query], 2 * k + 1, (), ["i3"])
    assert list(ranking.reserve) == [m.id for m in wider[k : 2 * k]] and ranking.next_best == wider[2 * k].score
    ids = [*reversed(ranking.reserve), *(m.id for m in shown), "not-stored"]
    again = engine.ranker.rescored(query, ids, k, reserve=k - 1)
    assert [(m.id, m.title) for m in again.matches] == [(m.id, m.title) for m in shown]
    assert [m.score for m in again.matches] == pytest.approx([m.score for m in shown], rel=1e-9)
    assert again.reserve == ranking.reserve[: k - 1]
    assert again.next_best == pytest.approx(wider[2 * k - 1].score, rel=1e-9)  # the reserve left out is next best
