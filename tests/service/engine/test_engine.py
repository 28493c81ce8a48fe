"""The one request path: a plain query by id is answered from the answer cache until a write can change it, checked
after writes of texts, and the answer served is always the ranking computed anew (every item a candidate); a query
with options is the same ranking when its options change nothing; a batch answers each query's own mistake in its
place and the queries left past its deadline with a timeout (tiny bundle, embedded store)."""

from __future__ import annotations

import asyncio
import random

import pytest

from metricsearch.core.errors import NotFoundError, TimedOutError
from metricsearch.core.records import Item
from metricsearch.core.schemas import SimilarRequest
from metricsearch.service.engine import Answered
from tests.service.catalogs import WORDS, catalog_items
from tests.service.engine.answers import Outcomes, same_answer


def test_a_plain_query_by_id_is_answered_from_the_cache_until_a_write_can_change_it(engine):
    first = engine.answer(SimilarRequest(id="shirt", k=2))
    assert engine.answer(SimilarRequest(id="shirt", k=2)) is first
    assert engine.answer(SimilarRequest(id="shirt", k=1)) is not first  # another request, another answer
    shown = [m.id for m in first]
    hidden = next(i for i in ("shirt-2", "boots", "hat") if i not in shown)
    engine.indexer.index([Item(hidden, *texts(engine, hidden), {"brand": "new"})])  # new metadata, not shown
    assert engine.answer(SimilarRequest(id="shirt", k=2)) is first
    engine.indexer.index([Item(shown[0], *texts(engine, shown[0]), {"brand": "new"})])  # new metadata, shown
    after = engine.answer(SimilarRequest(id="shirt", k=2))
    assert after is not first and after[0].metadata == {"brand": "new"}
    engine.indexer.index([Item("scarf", "red silk scarf", "")])  # a new item: the answer is checked, rescored
    assert same_answer(engine.answer(SimilarRequest(id="shirt", k=2)), engine.similar_to_item("shirt", 2))
    assert "scarf" in [m.id for m in engine.answer(SimilarRequest(id="shirt", k=4))]


def texts(engine, item_id: str) -> tuple[str, str]:
    stored = engine.get(item_id)
    return stored.title, stored.description


def test_an_answer_ranked_across_a_write_is_not_kept(engine, monkeypatch):
    """The write lands after the ranking read the store and before the answer is cached: the answer served once
    shows what it read, and the next request ranks anew."""
    rank = engine.recheck.rank

    def rank_then_write(*args):
        matches, margin = rank(*args)
        monkeypatch.setattr(engine.recheck, "rank", rank)
        engine.indexer.index([Item(matches[0].id, *texts(engine, matches[0].id), {"brand": "new"})])
        return matches, margin

    monkeypatch.setattr(engine.recheck, "rank", rank_then_write)
    first = engine.answer(SimilarRequest(id="shirt", k=2))
    after = engine.answer(SimilarRequest(id="shirt", k=2))
    assert after is not first and after[0].metadata == {"brand": "new"} != first[0].metadata
    assert engine.answer(SimilarRequest(id="shirt", k=2)) is after


@pytest.mark.parametrize("seed", [7, 8])
def test_a_cached_answer_is_never_stale(exhaustive, monkeypatch, seed):
    """Random writes (new items, new texts, new metadata, deletes), each followed by plain queries by id, with and
    without a filter and exclusions, k varied: every answer, cached, checked or not, equals the ranking computed anew
    on the store as it is then, scores and metadata included."""
    rng = random.Random(seed)
    engine = exhaustive
    outcomes = Outcomes(engine, monkeypatch)
    # The filter's key indexed from the start: an automatic index landing mid-test would move filtered searches from
    # the store's in-process path to the engine's, whose candidates may differ (store/auto_index.py).
    engine.store.create_index("shop", "keyword")
    items = {item.id: item for item in catalog_items(120)}
    hot = rng.sample(sorted(items), 4)  # queried again and again, as a storefront's popular items are
    served = 0
    for step in range(40):
        kind = rng.choice(["add", "text", "delete", "metadata", "metadata", "metadata"])
        target = rng.choice(sorted(items))
        if kind == "delete" and len(items) > 100:
            engine.indexer.delete(target)
            del items[target]
        elif kind in ("add", "text", "delete"):
            title = " ".join(rng.choices(WORDS, k=4))
            new_id = f"new-{step}" if kind == "add" else target
            items[new_id] = Item(new_id, title, " ".join(rng.choices(WORDS, k=8)), {"shop": rng.choice("ab")})
            engine.indexer.index([items[new_id]])
        else:
            old = items[target]
            metadata = {"shop": rng.choice("ab"), **({"stock": rng.randint(0, 3)} if rng.random() < 0.5 else {})}
            items[target] = Item(old.id, old.title, old.description, metadata)
            engine.indexer.index([items[target]])
        engine.statistics.current()
        engine.statistics.wait()  # a re-estimate the writes made due lands now, not between the two answers below
        for _ in range(20):
            query = rng.choice([i for i in hot if i in items] or sorted(items))
            exclude = rng.choice([[], [i for i in hot[:2] if i != query]])
            request = SimilarRequest(
                id=query, k=rng.choice([3, 10]), filter=rng.choice([None, {"shop": "a"}]), exclude_ids=exclude
            )
            answer = engine.answer(request)
            anew = engine.similar_to_item(query, request.k, request.conditions(), exclude)
            assert same_answer(answer, anew), (step, request)
            served += 1
    assert outcomes.hits + outcomes.checked > served // 3, vars(outcomes)  # most writes left answers in place
    assert outcomes.checked > 0, vars(outcomes)


def test_options_that_change_nothing_give_the_plain_ranking(engine):
    plain = engine.similar_to_item("shirt", 3)
    neutral = engine.answer(SimilarRequest(id="shirt", k=3, min_score=-1e9, offset=0, diversity=0))
    assert [(m.id, m.score, m.field_scores) for m in neutral] == [(m.id, m.score, m.field_scores) for m in plain]
    paged = engine.answer(SimilarRequest(id="shirt", k=2, offset=1))
    assert [m.id for m in paged] == [m.id for m in plain[1:3]]


def test_the_query_item_and_the_excluded_ones_are_never_answered(engine):
    answered = engine.answer(SimilarRequest(positive_ids=["shirt"], negative_ids=["hat"], k=10, exclude_ids=["boots"]))
    assert [m.id for m in answered] == ["shirt-2"]


def test_a_batch_answers_a_query_s_own_mistake_in_its_place(engine):
    requests = {0: SimilarRequest(id="shirt", k=2), 1: SimilarRequest(id="nope", k=2)}
    answered = asyncio.run(engine.similar_batch(requests))
    assert isinstance(answered[0], Answered)
    assert [m.id for m in answered[0].matches] == [m.id for m in engine.similar_to_item("shirt", 2)]
    assert isinstance(answered[1], NotFoundError) and "'nope'" in str(answered[1])


def test_a_batch_past_its_deadline_times_out_the_queries_left(engine):
    engine.timeout_s = 0.0
    answered = asyncio.run(engine.similar_batch({3: SimilarRequest(id="shirt", k=2)}))
    assert isinstance(answered[3], TimedOutError) and "queries.3" in str(answered[3])
    assert "MS_REQUEST_TIMEOUT_S" in str(answered[3])
