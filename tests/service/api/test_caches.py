"""The caches seen over HTTP: a repeated query is answered from them (counted in /metrics), and no write, of any
kind, is ever followed by an answer that misses it."""

from __future__ import annotations

import re

import pytest

from metricsearch.service.process import ServiceProcess

ITEMS = [
    {"id": f"c{i}", "title": title, "description": f"{title}, item {i}", "metadata": {"brand": brand, "flag": flag}}
    for i, (title, brand, flag) in enumerate(
        [
            ("red cotton shirt", "acme", True),
            ("blue cotton shirt", "acme", 1),
            ("green cotton shirt", "globex", True),
            ("leather boots", "boota", 1),
            ("wool winter hat", "hatco", True),
            ("running shoes", "boota", 1),
        ]
    )
]
# c3's twin (no `flag`, so the filters' answers stay as they are): the one answer of `{"id": "c3", "k": 1}` whatever the
# tiny random model makes of other texts, whose order moves with the CPU's float kernels (an AVX-512 machine put a
# title-only item first).
ITEMS.append(
    {"id": "c6", "title": "leather boots", "description": "leather boots, item 3", "metadata": {"brand": "boota"}}
)


def lookups(client, cache: str) -> dict[str, float]:
    text = client.get("/metrics").text
    pattern = rf'metricsearch_cache_lookups_total{{cache="{cache}",outcome="(hit|miss|checked)"}} ([0-9.e+]+)'
    return {"hit": 0.0, "miss": 0.0, "checked": 0.0} | {outcome: float(n) for outcome, n in re.findall(pattern, text)}


def similar(client, **body) -> list[dict]:
    response = client.post("/similar", json=body)
    assert response.status_code == 200, response.text
    return response.json()["results"]


@pytest.fixture(scope="module")
def client(tiny_bundle, tmp_path_factory):
    service = ServiceProcess(tiny_bundle, tmp_path_factory.mktemp("caches") / "data", {})
    service.start()
    with service.client() as c:
        assert c.post("/index", json={"items": ITEMS}).status_code == 200
        yield c
    service.stop()


def test_repeated_item_to_item_query_is_a_cache_hit_with_the_same_answer(client):
    first = similar(client, id="c0", k=3)
    before = lookups(client, "answer")
    assert similar(client, id="c0", k=3) == first
    after = lookups(client, "answer")
    assert after["hit"] == before["hit"] + 1 and after["miss"] == before["miss"]
    assert similar(client, id="c0", k=2) == first[:2]  # another k is another answer, computed afresh
    assert lookups(client, "answer")["miss"] == after["miss"] + 1


def test_every_kind_of_write_is_seen_by_the_next_answer(client):
    similar(client, id="c0", k=5)  # cached
    # a new item that is the closest match
    assert client.post("/index", json={"items": [{"id": "n1", "title": "red cotton shirt"}]}).status_code == 200
    assert similar(client, id="c0", k=5)[0]["id"] == "n1"
    # a metadata-only change of a result (nothing re-encoded)
    changed = {**ITEMS[1], "metadata": {"brand": "renamed", "flag": 1}}
    assert client.post("/index", json={"items": [changed]}).json() == {"indexed": 1, "unchanged": 0}
    by_id = {r["id"]: r for r in similar(client, id="c0", k=5)}
    assert by_id["c1"]["metadata"]["brand"] == "renamed"
    # a deleted result
    assert client.delete("/items/n1").status_code == 204
    assert "n1" not in [r["id"] for r in similar(client, id="c0", k=5)]
    # and a write that changes nothing keeps the cache
    hits = lookups(client, "answer")["hit"]
    assert client.post("/index", json={"items": [changed]}).json() == {"indexed": 0, "unchanged": 1}
    similar(client, id="c0", k=5)
    assert lookups(client, "answer")["hit"] == hits + 1


def test_an_answer_outlives_a_write_of_another_item_once_checked(client):
    """A new item that does not enter the answer: the answer is served again, checked (counted so), its scores those
    of the catalog now (the idf moved); a filtered answer is ranked anew; the next request finds it as cached."""
    first = similar(client, id="c3", k=1)
    assert [r["id"] for r in first] == ["c6"]
    filtered = similar(client, id="c3", k=2, filter={"flag": 1})
    before = lookups(client, "answer")
    assert client.post("/index", json={"items": [{"id": "far", "title": "kettle descaler"}]}).status_code == 200
    assert [r["id"] for r in similar(client, id="c3", k=1)] == ["c6"]
    assert [r["id"] for r in similar(client, id="c3", k=2, filter={"flag": 1})] == [r["id"] for r in filtered]
    after = lookups(client, "answer")
    assert after["checked"] == before["checked"] + 1 and after["miss"] == before["miss"] + 1
    similar(client, id="c3", k=1)
    assert lookups(client, "answer")["hit"] == after["hit"] + 1
    assert client.delete("/items/far").status_code == 204


def test_filters_that_compare_equal_in_python_are_different_answers(client):
    """true == 1 in Python, not in a filter: the cache key must not conflate them."""
    by_true = {r["id"] for r in similar(client, id="c0", k=5, filter={"flag": True})}
    by_one = {r["id"] for r in similar(client, id="c0", k=5, filter={"flag": 1})}
    assert by_true == {"c2", "c4"} and by_one == {"c1", "c3", "c5"}
    assert {r["id"] for r in similar(client, id="c0", k=5, filter={"flag": True}, exclude_ids=["c2"])} == {"c4"}


def test_repeated_text_is_encoded_once(client):
    first = similar(client, text="cotton shirt", k=3)
    before = lookups(client, "embedding")
    assert similar(client, text="cotton shirt", k=3) == first
    after = lookups(client, "embedding")
    assert after["hit"] == before["hit"] + 1 and after["miss"] == before["miss"]


def test_caches_off_answer_the_same(tiny_bundle, start_service, tmp_path, client):
    """The same ranking; the scores of two services agree to float32 rounding (the other service's writes went
    through other batches: on CI's CPU a score moved in the 7th digit), those of one service from its caches exactly."""
    plain = start_service(tiny_bundle, tmp_path / "plain", MS_ANSWER_CACHE_SIZE="0", MS_EMBEDDING_CACHE_SIZE="0")
    with plain.client() as other:
        assert other.post("/index", json={"items": ITEMS}).status_code == 200
        for body in ({"id": "c3", "k": 4}, {"text": "cotton shirt", "k": 4}):
            ranked = [(r["id"], r["score"]) for r in similar(client, **body)]
            uncached = [(r["id"], r["score"]) for r in similar(other, **body)]
            assert [i for i, _ in uncached] == [i for i, _ in ranked]
            assert [s for _, s in uncached] == pytest.approx([s for _, s in ranked], rel=1e-5, abs=1e-6)
            assert [(r["id"], r["score"]) for r in similar(client, **body)] == ranked  # from the caches
        assert lookups(other, "answer") == lookups(other, "embedding") == {"hit": 0.0, "miss": 0.0, "checked": 0.0}
