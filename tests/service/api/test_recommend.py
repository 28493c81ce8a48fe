"""/similar's ranking options over real HTTP (a subprocess service with the tiny bundle, embedded store):
positive_ids/negative_ids, diversity, group_by/group_size, min_score, offset and boost, alone and combined, and
their bad values. The service keeps few candidates (MS_CANDIDATES_MIN=4, factor 1) so group_by has to widen them."""

from __future__ import annotations

import math

import pytest

from tests.service.serving import indexed_service
from tests.service.test_second_order import _engine, svd_bundle  # noqa: F401 (a fixture)

KEY = "write-secret"
BRANDS = ("acme", "boota", "hatco", "zeta")
KINDS = ("red cotton shirt", "leather boots", "wool winter hat", "running shoes", "silk scarf", "denim jeans")
ITEMS = [
    {
        "id": f"i{n}",
        "title": f"{KINDS[n % len(KINDS)]} model {n}",
        "description": f"a {KINDS[n % len(KINDS)]} number {n}",
        "metadata": {
            "brand": BRANDS[n % len(BRANDS)],
            "popularity": n,
            "year": 2000 + n,
            "color": ["red", "blue"][n % 2],
        },
    }
    for n in range(24)
] + [
    {"id": f"copy{n}", "title": "red cotton shirt", "description": "a red cotton shirt", "metadata": {"brand": "acme"}}
    for n in range(4)
]
N = len(ITEMS)


@pytest.fixture(scope="module")
def client(tiny_bundle, tmp_path_factory):
    # year's index is declared: one learned from the first filter would go live between two requests of a test and
    # change which of the equally scored lexical candidates the store returns (docs/api.md, "Paging").
    env = {
        "MS_API_KEY": KEY,
        "MS_CANDIDATES_MIN": "4",
        "MS_CANDIDATES_FACTOR": "1",
        "MS_ANSWER_CACHE_SIZE": "0",
        "MS_INDEXED_FIELDS": "year:float",
    }
    with (
        indexed_service(tiny_bundle, tmp_path_factory.mktemp("recommend") / "data", ITEMS, env, KEY) as process,
        process.client(Authorization=f"Bearer {KEY}") as c,
    ):
        yield c


def similar(client, **body) -> list[dict]:
    response = client.post("/similar", json=body)
    assert response.status_code == 200, response.text
    return response.json()["results"]


def by_id(results: list[dict]) -> dict[str, dict]:
    return {r["id"]: r for r in results}


def ranking(results: list[dict]) -> tuple[list[float], set[str]]:
    """The scores in order, and the ids above the last score: equal scores are in the store's order on the plain
    path and in id order otherwise, so which of several equal last ones made the cut may differ."""
    return [r["score"] for r in results], {r["id"] for r in results if r["score"] != results[-1]["score"]}


def test_options_at_their_neutral_values_give_the_plain_ranking(client):
    plain = similar(client, id="i0", k=5)
    neutral = similar(client, id="i0", k=5, diversity=0, min_score=-1000, offset=0, group_size=3)
    assert ranking(neutral) == ranking(plain)
    text = similar(client, text="red cotton shirt", k=4)
    assert ranking(similar(client, text="red cotton shirt", k=4, min_score=-1000)) == ranking(text)


def test_one_positive_id_is_a_query_by_that_id(client):
    assert ranking(similar(client, positive_ids=["i3"], k=6)) == ranking(similar(client, id="i3", k=6))


def test_several_positives_and_negatives_combine_per_field_scores(client):
    everything = N
    one = by_id(similar(client, id="i0", k=everything))
    two = by_id(similar(client, id="i1", k=everything))
    three = by_id(similar(client, id="i2", k=everything))
    mixed = similar(client, positive_ids=["i0", "i1"], negative_ids=["i2"], k=everything)
    assert not {"i0", "i1", "i2"} & {r["id"] for r in mixed}
    assert len(mixed) == N - 3
    for r in mixed:
        rid = r["id"]
        expected = (one[rid]["score"] + two[rid]["score"]) / 2 - 0.5 * three[rid]["score"]
        assert math.isclose(r["score"], expected, abs_tol=1e-4)
        title = (one[rid]["scores"]["title"] + two[rid]["scores"]["title"]) / 2 - 0.5 * three[rid]["scores"]["title"]
        assert math.isclose(r["scores"]["title"], title, abs_tol=1e-4)
    scores = [r["score"] for r in mixed]
    assert scores == sorted(scores, reverse=True)


def test_diversity_spreads_out_near_copies(client):
    def copies(results):
        return sum(r["id"].startswith("copy") for r in results)

    plain = similar(client, text="red cotton shirt", k=4)
    diverse = similar(client, text="red cotton shirt", k=4, diversity=1.0)
    assert copies(plain) == 4
    assert copies(diverse) == 1  # the tiny model finds every text alike: only full diversity is sure to act
    assert len(diverse) == 4


@pytest.mark.parametrize("size", [1, 2])
def test_group_by_caps_each_value_and_still_fills_k(client, size):
    k = len(BRANDS) * size
    results = similar(client, id="i0", k=k, group_by="brand", group_size=size)
    assert len(results) == k  # the service had to widen its 4 candidates to find them
    brands = [r["metadata"]["brand"] for r in results]
    assert all(brands.count(b) == size for b in BRANDS)


def test_text_queries_take_the_options_too(client):
    results = similar(
        client, text="red cotton shirt", k=3, group_by="brand", boost={"field": "popularity", "weight": 0}
    )
    assert len({r["metadata"]["brand"] for r in results}) == 3
    assert all(r["scores"]["boost"] == 0 for r in results)


def test_group_by_several_keys_groups_by_their_combination(client):
    results = similar(client, id="i0", k=8, group_by=["brand", "color"])
    pairs = [(r["metadata"].get("brand"), tuple(r["metadata"].get("color", ()))) for r in results]
    assert len(set(pairs)) == len(pairs)
    assert len(results) == 5  # acme with and without color (the copies), boota, hatco, zeta: one color each


def test_group_by_filter_exclude_and_offset_together_page_one_ranking(client):
    body = {"id": "i0", "group_by": "brand", "group_size": 2, "filter": {"year": {"gte": 2004}}, "exclude_ids": ["i5"]}
    whole = similar(client, k=8, **body)
    assert len(whole) == 8
    assert all(r["metadata"]["year"] >= 2004 and r["id"] != "i5" for r in whole)
    # The same k + offset reranks the same candidates: offset skips exactly the first results of that ranking.
    assert similar(client, k=3, offset=5, **body) == whole[5:]
    assert similar(client, k=6, offset=2, **body) == whole[2:]


def test_min_score_leaves_out_lower_scores(client):
    scores = [r["score"] for r in similar(client, id="i0", k=10)]
    cut = scores[4]
    kept = similar(client, id="i0", k=10, min_score=cut)
    assert [r["score"] for r in kept] == [s for s in scores if s >= cut]
    assert similar(client, id="i0", k=10, min_score=1.0) == []


def test_value_boost_is_added_and_shown(client):
    plain = by_id(similar(client, id="i0", k=N))
    boosted = similar(client, id="i0", k=N, boost={"field": "popularity", "weight": 0.1})
    for r in boosted:
        popularity = ITEMS[int(r["id"][1:])]["metadata"]["popularity"] if r["id"].startswith("i") else 0
        assert math.isclose(r["scores"]["boost"], 0.1 * popularity, abs_tol=1e-6)
        assert math.isclose(r["score"], plain[r["id"]]["score"] + 0.1 * popularity, abs_tol=1e-4)
    assert boosted[0]["id"] == "i23"  # the most popular wins by a wide margin
    assert all(r["scores"]["boost"] is None for r in plain.values())


def test_decay_boost_on_a_number_field(client):
    body = {"field": "year", "weight": 1.0, "decay": {"origin": 2010, "scale": 5, "midpoint": 0.5}}
    results = similar(client, id="i0", k=N, boost=[body])
    for r in results:
        year = r["metadata"].get("year")
        expected = 0.0 if year is None else 0.5 ** (abs(year - 2010) / 5)
        assert math.isclose(r["scores"]["boost"], expected, abs_tol=1e-6)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"id": "i0", "positive_ids": ["i1"]}, "exactly one of id, text, title"),
        ({"id": "i0", "negative_ids": ["i1"]}, "negative_ids is only allowed together with positive_ids"),
        ({"positive_ids": []}, "positive_ids"),
        ({"positive_ids": [f"i{n}" for n in range(33)]}, "positive_ids"),
        ({"id": "i0", "diversity": 1.5}, "diversity"),
        ({"id": "i0", "diversity": -0.1}, "diversity"),
        ({"id": "i0", "group_by": "brand.name"}, "group_by"),
        ({"id": "i0", "group_by": []}, "group_by"),
        ({"id": "i0", "group_by": "brand", "group_size": 0}, "group_size"),
        ({"id": "i0", "offset": 101}, "offset"),
        ({"id": "i0", "offset": -1}, "offset"),
        ({"id": "i0", "min_score": "high"}, "min_score"),
        ({"id": "i0", "boost": {"field": "popularity"}}, "weight"),
        ({"id": "i0", "boost": {"field": "popularity", "weight": 1, "decay": {"scale": 0}}}, "scale"),
        ({"id": "i0", "boost": {"field": "year", "weight": 1, "decay": {"scale": 1, "origin": "soon"}}}, "origin"),
        ({"id": "i0", "boost": {"field": "p", "weight": 1, "transform": "log1p", "decay": {"scale": 1}}}, "boost"),
    ],
)
def test_bad_values_are_422_naming_the_field(client, body, message):
    response = client.post("/similar", json=body)
    assert response.status_code == 422, response.text
    assert message in response.json()["detail"]


def test_unknown_positive_or_negative_id_is_404_naming_it(client):
    response = client.post("/similar", json={"positive_ids": ["i0", "nope"]})
    assert response.status_code == 404 and "'nope'" in response.json()["detail"]
    response = client.post("/similar", json={"positive_ids": ["i0"], "negative_ids": ["gone"]})
    assert response.status_code == 404 and "'gone'" in response.json()["detail"]


def test_second_order_bundles_rank_and_diversify_with_their_own_metric(svd_bundle, tmp_path):  # noqa: F811
    """In process: the Frobenius metric's options path (its similarity between results is S_F of the factors)."""
    from metricsearch.core.records import Item
    from metricsearch.core.schemas import SimilarRequest
    from tests.service.api.test_api import ITEMS as SHOP

    engine, store = _engine(svd_bundle, tmp_path / "store", max_candidates=100)
    try:
        engine.indexer.index([Item(i["id"], i["title"], i["description"], i["metadata"]) for i in SHOP])
        plain = engine.similar_to_item("p1", 4)
        neutral = engine.answer(SimilarRequest(id="p1", k=4, min_score=-1.0))
        assert [(m.id, m.score) for m in neutral] == [(m.id, m.score) for m in plain]
        diverse = engine.answer(SimilarRequest(positive_ids=["p1", "p2"], k=3, diversity=0.7, group_by="brand"))
        assert len({m.metadata["brand"] for m in diverse}) == len(diverse) == 3
        assert all(0.0 <= m.score <= 1.0 for m in diverse)
    finally:
        store.close()


def test_group_by_widens_less_the_more_query_items_it_scores(tiny_bundle, tmp_path):
    """In process: each positive and negative id is scored against every candidate, so the widening stops at
    MS_MAX_CANDIDATES over the number of query items; one id widens to it all, 4x at a time, and straight to it when
    that is less than 2x further."""
    from metricsearch.core.records import Item
    from metricsearch.core.schemas import SimilarRequest
    from metricsearch.service.engine import Engine

    engine, store = _engine(tiny_bundle, tmp_path / "store", candidates_min=2, candidates_factor=1, max_candidates=16)
    try:
        engine.indexer.index([Item(i["id"], i["title"], i["description"], i["metadata"]) for i in ITEMS])
        limits: list[int] = []
        search = store.search
        store.search = lambda vector, limit, *args, **kwargs: (
            limits.append(limit) or search(vector, limit, *args, **kwargs)
        )
        one = engine.answer(SimilarRequest(id="i0", k=8, group_by="brand"))  # 4 brands: never 8 results
        assert limits == [8, 16] and len({m.metadata["brand"] for m in one}) == len(one) <= 4
        limits.clear()
        four = engine.answer(
            SimilarRequest(positive_ids=["i0", "i1"], negative_ids=["i2", "i3"], k=8, group_by="brand")
        )
        assert limits == [8], "16 candidates over 4 query items: no wider than the first search"
        assert len({m.metadata["brand"] for m in four}) == len(four) <= 4
        limits.clear()
        # A key no item holds: one group, never 2 results. 2 -> 8 would leave a step of 1.5x to 12: straight to 12.
        narrower = Engine(
            engine.manifest, engine.encoder, store, candidates_min=2, candidates_factor=1, max_candidates=12
        )
        narrower.answer(SimilarRequest(id="i0", k=2, group_by="no-such-key"))
        assert limits == [2, 12]
    finally:
        store.close()
