"""The answer cache's check after writes (recheck.py): an answer outlives writes of other items and is always the
ranking computed anew where every item is a candidate; no item's score rises past the bound the check serves by."""

from __future__ import annotations

import random

from metricsearch.core.records import Item
from metricsearch.core.schemas import SimilarRequest
from metricsearch.service.engine import statistics
from tests.service.catalogs import WORDS
from tests.service.engine.answers import Outcomes, same_answer


def test_an_answer_outlives_writes_of_other_items_and_is_always_the_ranking_anew(exhaustive, monkeypatch):
    """After new items and new texts of other items, a cached answer is answered again from the items it shows, its
    reserve (the next best) and the items written, rescored, where the rest cannot beat them: it equals the ranking
    computed anew, with a copy of the query's texts entering it first and a deleted item's place filled; a new text
    of the query item has it ranked anew."""
    engine = exhaustive
    monkeypatch.setattr(statistics, "STATS_REFRESH", 1e9)  # no re-estimate between an answer and its ranking anew
    outcomes = Outcomes(engine, monkeypatch)
    rng = random.Random(3)
    hot = ["i1", "i2", "i3", "i4", "i5"]
    for query in hot:
        engine.answer(SimilarRequest(id=query, k=5))
    for step in range(12):
        title = " ".join(rng.choices(WORDS, k=4))
        target = f"new-{step}" if step % 3 else rng.choice([f"i{n}" for n in range(60, 120)])
        engine.indexer.index([Item(target, title, " ".join(rng.choices(WORDS, k=8)))])
        for query in hot:
            answer = engine.answer(SimilarRequest(id=query, k=5))
            assert same_answer(answer, engine.similar_to_item(query, 5)), (step, query)
    assert outcomes.checked >= (outcomes.checked + outcomes.anew) // 2, vars(outcomes)  # most outlived the writes

    twin = engine.get("i1")
    engine.indexer.index([Item("twin", twin.title, twin.description)])
    answer = engine.answer(SimilarRequest(id="i1", k=5))  # the copy enters it first
    assert answer[0].id == "twin" and same_answer(answer, engine.similar_to_item("i1", 5))
    shown = answer[1].id
    engine.indexer.delete(shown)
    answer = engine.answer(SimilarRequest(id="i1", k=5))
    assert shown not in [m.id for m in answer] and len(answer) == 5
    assert same_answer(answer, engine.similar_to_item("i1", 5))
    anew = outcomes.anew
    engine.indexer.index([Item("i1", "a wholly new title", "and a new description")])
    assert same_answer(engine.answer(SimilarRequest(id="i1", k=5)), engine.similar_to_item("i1", 5))
    assert outcomes.anew == anew + 1


def test_no_score_rises_past_the_drift_bound(exhaustive, monkeypatch):
    """Every item's fused score after writes of other items is at most its score before plus the check's bound on
    how far the idf can have moved it, over every item of the catalog (the bound the check serves by)."""
    engine = exhaustive
    monkeypatch.setattr(statistics, "STATS_REFRESH", 1e9)
    rng = random.Random(5)
    query = engine.queries.of_id("i7")
    every = [f"i{n}" for n in range(120) if n != 7]
    before = engine.ranker.rescored(query, every, len(every), 0).matches
    idf_then = engine.recheck.rank(query, 5, ["i7"])[1].idf
    for step in range(15):  # new items, sharing the query's words or not, and rare words that rise in idf
        words = [*rng.choices(WORDS, k=3), f"rare{step % 4}"]
        engine.indexer.index([Item(f"new-{step}", " ".join(words), " ".join(rng.choices(WORDS, k=6)))])
    after = engine.ranker.rescored(query, every, len(every), 0).matches
    rise = max(now.score - then.score for then in before for now in after if now.id == then.id)
    drift = engine.recheck.drift(query, idf_then, engine.recheck.idf(query))
    assert rise <= drift + 1e-9, (rise, drift)
    if engine.rerank.fusion is not None:
        assert 0 < drift < 1  # the writes moved the idf, and the bound is not vacuous


def test_a_write_that_lands_during_a_check_has_the_answer_ranked_anew(exhaustive, monkeypatch):
    """The check read the store before a write landed: what it read is neither served nor kept; the request gets
    the ranking anew, with the item the write added, and the next request finds that answer."""
    engine = exhaustive
    monkeypatch.setattr(statistics, "STATS_REFRESH", 1e9)
    outcomes = Outcomes(engine, monkeypatch)
    engine.answer(SimilarRequest(id="i4", k=5))
    engine.indexer.index([Item("first", "unrelated words", "")])
    twin = engine.get("i4")
    rescored = engine.ranker.rescored

    def rescored_then_written(*args):
        ranking = rescored(*args)
        monkeypatch.setattr(engine.ranker, "rescored", rescored)
        engine.indexer.index([Item("twin", twin.title, twin.description)])
        return ranking

    monkeypatch.setattr(engine.ranker, "rescored", rescored_then_written)
    answer = engine.answer(SimilarRequest(id="i4", k=5))
    assert answer[0].id == "twin" and same_answer(answer, engine.similar_to_item("i4", 5))
    assert (outcomes.checked, outcomes.anew) == (0, 1)
    assert engine.answer(SimilarRequest(id="i4", k=5)) is answer and outcomes.hits == 1
