"""The one request path: a plain query by id is answered from the answer cache until the next write; a query with
options is the same ranking when its options change nothing; a batch answers each query's own mistake in its place
and the queries left past its deadline with a timeout (tiny bundle, embedded store)."""

from __future__ import annotations

import asyncio

from metricsearch.core.errors import NotFoundError, TimedOutError
from metricsearch.core.records import Item
from metricsearch.core.schemas import SimilarRequest
from metricsearch.service.engine import Answered


def test_a_plain_query_by_id_is_answered_from_the_cache_until_the_next_write(engine):
    first = engine.answer(SimilarRequest(id="shirt", k=3))
    assert engine.answer(SimilarRequest(id="shirt", k=3)) is first
    assert engine.answer(SimilarRequest(id="shirt", k=2)) is not first  # another request, another answer
    engine.indexer.index([Item("scarf", "red silk scarf", "")])
    after = engine.answer(SimilarRequest(id="shirt", k=3))
    assert after is not first and "scarf" in [m.id for m in engine.answer(SimilarRequest(id="shirt", k=4))]


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
