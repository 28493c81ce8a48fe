"""The query-path caches: bounded LRUs that count hits and misses, an embedding cache keyed by bundle identity, and
an answer cache whose answers a write drops when it can change them, and never keeps one ranked across a write."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from metricsearch.core.records import Match
from metricsearch.service import cache as caches
from metricsearch.service.batcher import QueryBatcher
from metricsearch.service.cache import AnswerCache, EmbeddingCache, Margin, answer_bytes


def matches(tag: str) -> list[Match]:
    return [Match(tag, 1.0, f"title {tag}", {}, {})]


def cached(answers: AnswerCache, key: str) -> list[Match] | None:
    found = answers.lookup(key)
    return None if found is None else found.matches


MARGIN = Margin(("r1", "r2"), 0.5, {"lexical_text": np.array([1.0, 2.0])})


class Counts:
    def __init__(self) -> None:
        self.hits = self.misses = 0

    def hit(self) -> None:
        self.hits += 1

    def miss(self) -> None:
        self.misses += 1


def test_embedding_cache_is_keyed_by_bundle_and_text():
    counts = Counts()
    cache = EmbeddingCache(10, "bundle-a", counts.hit, counts.miss)
    cache.put("red shirt", np.array([1.0, 0.0]))
    assert cache.get("red shirt").tolist() == [1.0, 0.0]
    assert cache.get("Red shirt") is None
    assert EmbeddingCache(10, "bundle-b").get("red shirt") is None  # another bundle's vectors never match
    assert (counts.hits, counts.misses) == (1, 1)


def test_cached_vectors_cannot_be_changed_by_a_caller():
    cache = EmbeddingCache(10, "b")
    source = np.array([1.0, 2.0], dtype=np.float32)
    cache.put("t", source)
    source[0] = 9.0
    got = cache.get("t")
    assert got.tolist() == [1.0, 2.0]
    with pytest.raises(ValueError):
        got[0] = 5.0


def test_lru_evicts_the_least_recently_used_and_size_zero_is_off():
    cache = EmbeddingCache(2, "b")
    for text in ("a", "b"):
        cache.put(text, np.zeros(1))
    cache.get("a")  # "b" is now the least recently used
    cache.put("c", np.zeros(1))
    assert cache.get("b") is None and cache.get("a") is not None and len(cache) == 2

    off = EmbeddingCache(0, "b")
    off.put("a", np.zeros(1))
    assert off.get("a") is None and not off.enabled


def test_clear_drops_every_answer():
    counts = Counts()
    answers = AnswerCache(100, counts.hit, counts.miss)
    before = answers.generation
    answers.put(before, "q1", matches("1"))
    answers.put(before, "q2", matches("2"))
    assert cached(answers, "q1") == matches("1")
    answers.clear()
    assert answers.generation != before
    assert cached(answers, "q1") is None and cached(answers, "q2") is None
    assert (counts.hits, counts.misses) == (1, 2)


def test_a_metadata_change_drops_only_the_answers_it_can_change():
    """An answer that shows the item (it shows its metadata) and one whose filter reads a changed key go; the rest
    stay, since the item's vectors and terms, hence every score, are as they were."""
    answers = AnswerCache(100)
    taken = answers.generation
    answers.put(taken, "shows x", [*matches("x"), *matches("y")])
    answers.put(taken, "filtered on stock", matches("y"), ["stock"])
    answers.put(taken, "filtered on brand", matches("y"), ["brand"])
    answers.put(taken, "other", matches("z"))
    answers.changed({"x": {"stock"}})
    assert cached(answers, "shows x") is None and cached(answers, "filtered on stock") is None
    assert cached(answers, "filtered on brand") == matches("y") and cached(answers, "other") == matches("z")
    answers.changed({"w": set()})  # an item no answer shows, no key changed: nothing goes
    assert len(answers) == 2


def test_an_answer_computed_across_a_write_is_never_kept():
    """A reader takes the generation, a write lands and drops what it can change, the reader stores what it read
    (which may predate the write): nobody finds it. A clear, or a change of any item, alike."""
    for write in (lambda a: a.clear(), lambda a: a.changed({"elsewhere": {"stock"}})):
        answers = AnswerCache(100)
        taken = answers.generation
        write(answers)  # the write that landed while the reader computed
        answers.put(taken, "q", matches("stale"))
        assert cached(answers, "q") is None
        answers.put(answers.generation, "q", matches("fresh"))
        assert cached(answers, "q") == matches("fresh")


def test_a_write_of_texts_is_logged_for_the_answers_with_a_margin_and_drops_the_others():
    """An answer with a margin is looked up with the ids written since it was ranked, over every write after it; one
    without (a filtered answer) is gone once a write of texts starts. Nothing ranked while a write is under way is
    kept: it may have read part of it."""
    answers = AnswerCache(100)
    answers.put(answers.generation, "checked", matches("x"), margin=MARGIN)
    answers.put(answers.generation, "filtered", matches("y"), ["shop"])
    with answers.writing(["a", "b"]):
        assert cached(answers, "filtered") is None
        during = answers.generation
        answers.put(during, "ranked meanwhile", matches("z"), margin=MARGIN)
        assert not answers.quiet_since(during)
    assert answers.lookup("ranked meanwhile") is None
    later = answers.generation
    answers.put(later, "ranked after", matches("z"), margin=MARGIN)
    with answers.writing(["c"]):
        pass
    found = answers.lookup("checked")
    assert found.matches == matches("x") and found.margin == MARGIN and found.written == {"a", "b", "c"}
    assert answers.lookup("ranked after").written == {"c"}
    answers.put(answers.generation, "fresh", matches("w"), margin=MARGIN)
    assert answers.lookup("fresh").written == frozenset() and answers.quiet_since(answers.generation)


def test_a_large_write_a_failed_one_or_one_of_unknown_items_drops_every_answer():
    for write in (
        lambda a: a.writing([f"i{n}" for n in range(caches.WRITE_LOG_ITEMS + 1)]),
        lambda a: a.writing(None),
    ):
        answers = AnswerCache(100)
        answers.put(answers.generation, "q", matches("x"), margin=MARGIN)
        with write(answers):
            pass
        assert answers.lookup("q") is None
    answers = AnswerCache(100)
    answers.put(answers.generation, "q", matches("x"), margin=MARGIN)
    with pytest.raises(RuntimeError), answers.writing(["a"]):
        raise RuntimeError("the store failed")
    assert answers.lookup("q") is None


def test_an_answer_older_than_the_log_or_with_too_many_writes_since_is_not_checked(monkeypatch):
    monkeypatch.setattr(caches, "WRITE_LOG", 3)
    answers = AnswerCache(100)
    answers.put(answers.generation, "old", matches("x"), margin=MARGIN)
    for n in range(3):
        with answers.writing([f"i{n}"]):
            pass
    assert answers.lookup("old").written == {"i0", "i1", "i2"}
    with answers.writing(["i3"]):  # the first write leaves the log
        pass
    assert answers.lookup("old").written is None
    monkeypatch.setattr(caches, "RECHECK_MAX", 1)
    answers.put(answers.generation, "new", matches("x"), margin=MARGIN)
    with answers.writing(["a", "b"]):
        pass
    assert answers.lookup("new").written is None


def test_outcomes_are_counted_hit_checked_or_miss():
    counts = Counts()
    checked = []
    answers = AnswerCache(100, counts.hit, counts.miss, lambda: checked.append(True))
    answers.put(answers.generation, "q", matches("x"), margin=MARGIN)
    answers.lookup("q")
    answers.lookup("nothing")
    with answers.writing(["a"]):
        pass
    answers.lookup("q")  # written since: the caller counts what its check gave
    answers.rechecked(True)
    answers.rechecked(False)
    assert (counts.hits, counts.misses, len(checked)) == (1, 2, 1)


def test_the_indexes_hold_only_the_answers_kept():
    """Evicted, replaced and dropped answers leave the id and key indexes, so they stay as small as the cache."""
    answers = AnswerCache(3)
    for n in range(20):
        answers.put(answers.generation, f"q{n}", matches(f"item {n}"), [f"key {n}"])
    answers.put(answers.generation, "q19", matches("item 99"), ["key 99"])  # replaced
    answers.changed({"item 18": ()})
    assert len(answers) == 2
    assert set(answers._showing) == {"item 17", "item 99"} and set(answers._filtered) == {"key 17", "key 99"}
    answers.changed({"item 19": {"key 19"}})  # the replaced answer's id and key drop nothing
    assert len(answers) == 2
    answers.put(answers.generation, "unchecked", matches("u"))
    answers.clear()
    assert not answers._showing and not answers._filtered and not answers._unchecked


def test_batcher_encodes_only_texts_it_has_not_seen():
    calls: list[list[str]] = []

    def encode(texts):
        calls.append(list(texts))
        return np.array([[float(len(t)), 1.0] for t in texts], dtype=np.float32)

    async def run():
        batcher = QueryBatcher(
            encode,
            window_s=0.0,
            max_tokens=1000,
            queue_size=10,
            max_length=64,
            cache=EmbeddingCache(100, "b"),
        )
        batcher.start()
        first = await batcher.encode(["aa", "bbbb"])
        second = await batcher.encode(["bbbb", "c", "aa"])
        third = await batcher.encode(["c"])
        await batcher.stop()
        return first, second, third

    first, second, third = asyncio.run(run())
    assert calls == [["aa", "bbbb"], ["c"]]
    assert first[:, 0].tolist() == [2.0, 4.0]
    assert second[:, 0].tolist() == [4.0, 1.0, 2.0]  # cached and fresh vectors in the order asked
    assert third[:, 0].tolist() == [1.0]


def test_caches_are_bounded_by_bytes_too():
    embeddings = EmbeddingCache(1000, "b", max_bytes=10 * (4 * 384 + 400))
    for n in range(50):
        embeddings.put(f"text {n}", np.zeros(384, dtype=np.float32))
    assert len(embeddings) <= 10 and embeddings.nbytes <= 10 * (4 * 384 + 400)
    assert embeddings.get("text 49") is not None and embeddings.get("text 0") is None

    def answer(n: int, metadata_keys: int) -> list[Match]:
        metadata = {f"key {k}": f"value {n} {k}" for k in range(metadata_keys)}
        return [Match(f"id-{n}-{i}", 1.0, "title", dict(metadata), {"title": 0.5}) for i in range(100)]

    small, large = answer(0, 1), answer(1, 200)
    assert answer_bytes(large) > 20 * answer_bytes(small)
    answers = AnswerCache(10_000, max_bytes=4 * answer_bytes(large))
    for n in range(20):  # by count these would all fit
        answers.put(0, n, answer(n, 200))
    assert len(answers) == 3 and answers.nbytes <= 4 * answer_bytes(large)
    assert cached(answers, 19) is not None and cached(answers, 0) is None
    answers.put(0, "huge", answer(99, 5000))  # larger than the whole cache: not kept, nothing else evicted
    assert cached(answers, "huge") is None and len(answers) == 3
