"""The HTTP API end to end over real HTTP on 127.0.0.1 (a subprocess service with the tiny BERT bundle and the
embedded Qdrant engine): /similar's answers and filters, bad input across routes, the ops endpoints, a query during a
bulk load. Each resource's own routes are tested in routes/, the API keys in test_deps.py."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

KEY = "write-secret"

ITEMS = [
    {
        "id": "p1",
        "title": "red cotton shirt",
        "description": "a soft red shirt made of cotton",
        "metadata": {"brand": "acme", "price": 20, "tags": ["summer", "shirt"], "stock": True},
    },
    {
        "id": "p2",
        "title": "blue cotton shirt",
        "description": "a soft blue shirt made of cotton",
        "metadata": {"brand": "acme", "price": 25.5, "tags": ["shirt"]},
    },
    {
        "id": "p3",
        "title": "leather boots",
        "description": "brown leather boots for winter",
        "metadata": {"brand": "boota", "price": 120, "tags": ["winter"]},
    },
    {"id": "p4", "title": "wool winter hat", "description": "", "metadata": {"brand": "hatco", "price": 15}},
    {
        "id": "p5",
        "title": "running shoes",
        "description": "light shoes for running on roads",
        "metadata": {"brand": "boota", "price": 80},
    },
    {
        "id": "p6",
        "title": "green silk scarf",
        "description": "a silk scarf in green",
        "metadata": {"brand": "acme", "price": 40},
    },
]


@pytest.fixture(scope="module")
def anonymous(service):
    with service.client() as c:
        yield c


def test_similar_by_id_excludes_the_item_and_ranks_by_score(client):
    body = client.post("/similar", json={"id": "p1", "k": 5}).json()
    ids = [r["id"] for r in body["results"]]
    assert "p1" not in ids and len(ids) == 5
    scores = [r["score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)
    assert body["model"] == "tiny-bert"
    first = body["results"][0]
    assert math.isclose(first["score"], first["scores"]["title"] + first["scores"]["description"], abs_tol=1e-5)


def test_item_without_description_reports_no_description_score(client):
    results = client.post("/similar", json={"id": "p4", "k": 5}).json()["results"]
    assert all(r["scores"]["description"] is None for r in results)
    assert all(math.isclose(r["score"], 2 * r["scores"]["title"], abs_tol=1e-5) for r in results)


def test_similar_by_text_and_by_title_description(client):
    by_text = client.post("/similar", json={"text": "red cotton shirt", "k": 3}).json()["results"]
    assert by_text[0]["id"] == "p1"
    by_fields = client.post(
        "/similar", json={"title": "red cotton shirt", "description": "a soft red shirt made of cotton", "k": 2}
    ).json()["results"]
    assert by_fields[0]["id"] == "p1"
    assert math.isclose(by_fields[0]["score"], 0.0, abs_tol=1e-3)


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        ({"brand": "acme"}, {"p2", "p6"}),
        ({"brand": {"in": ["boota", "hatco"]}}, {"p3", "p4", "p5"}),
        ({"price": {"gte": 20, "lte": 80}}, {"p2", "p5", "p6"}),
        ({"price": 25.5}, {"p2"}),
        ({"tags": "shirt"}, {"p2"}),
        ({"brand": "acme", "price": {"lte": 30}}, {"p2"}),
        ({"brand": "nobody"}, set()),
    ],
)
def test_filters(client, flt, expected):
    results = client.post("/similar", json={"id": "p1", "k": 10, "filter": flt}).json()["results"]
    assert {r["id"] for r in results} == expected


def test_exclude_ids(client):
    results = client.post("/similar", json={"id": "p1", "k": 10, "exclude_ids": ["p2", "p3"]}).json()["results"]
    assert {r["id"] for r in results} == {"p4", "p5", "p6"}


def test_unknown_id_is_404(client):
    response = client.post("/similar", json={"id": "nope"})
    assert response.status_code == 404 and "nope" in response.json()["detail"]


def _count(client) -> int:
    return client.get("/readyz").json()["items"]


BAD_REQUESTS = [
    ("empty body", "/similar", b"", 400, "empty"),
    ("malformed json", "/similar", b"{not json", 400, "not valid JSON"),
    ("unknown field", "/similar", {"id": "p1", "kk": 3}, 422, "unknown field"),
    ("id and text", "/similar", {"id": "p1", "text": "x"}, 422, "exactly one"),
    ("no query", "/similar", {"k": 3}, 422, "exactly one"),
    ("k zero", "/similar", {"id": "p1", "k": 0}, 422, "k"),
    ("k 101", "/similar", {"id": "p1", "k": 101}, 422, "k"),
    ("description alone", "/similar", {"description": "x"}, 422, "only allowed together with title"),
    ("bad filter", "/similar", {"id": "p1", "filter": {"price": {"gt": 3}}}, 422, "filter"),
    ("huge text query", "/similar", {"text": "x" * 100_000}, 413, "MS_MAX_DESCRIPTION_CHARS"),
    ("1001 items", "/index", {"items": [{"id": str(i), "title": "t"} for i in range(1001)]}, 413, "limit is 1000"),
    ("empty items", "/index", {"items": []}, 422, "items"),
    ("empty title", "/index", {"items": [{"id": "e", "title": ""}]}, 422, "title"),
    ("blank title", "/index", {"items": [{"id": "e", "title": "   "}]}, 422, "whitespace"),
    (
        "100 KB description",
        "/index",
        {"items": [{"id": "e", "title": "t", "description": "x" * 100_000}]},
        413,
        "MS_MAX_DESCRIPTION_CHARS",
    ),
    ("NaN metadata", "/index", b'{"items": [{"id": "e", "title": "t", "metadata": {"price": NaN}}]}', 422, "metadata"),
    ("nested metadata", "/index", {"items": [{"id": "e", "title": "t", "metadata": {"a": {"b": 1}}}]}, 422, "metadata"),
    ("unknown item field", "/index", {"items": [{"id": "e", "title": "t", "colour": "red"}]}, 422, "unknown field"),
]


@pytest.mark.parametrize(("name", "path", "body", "status", "message"), BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_input_is_a_clear_4xx_and_stores_nothing(client, name, path, body, status, message):
    before = _count(client)
    if isinstance(body, bytes):
        response = client.post(path, content=body, headers={"Content-Type": "application/json"})
    else:
        response = client.post(path, json=body)
    assert response.status_code == status, response.text
    assert message in response.json()["detail"]
    assert _count(client) == before
    assert client.get("/items/p1").status_code == 200


def test_body_over_the_cap_is_413_before_parsing(service):
    with service.client(Authorization=f"Bearer {KEY}") as c:
        response = c.post("/index", content=b"x" * (33 * 1024 * 1024), headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and "MS_MAX_BODY_BYTES" in response.json()["detail"]


def test_ops_endpoints(anonymous):
    assert anonymous.get("/healthz").json() == anonymous.get("/livez").json() == {"status": "ok"}
    ready = anonymous.get("/readyz").json()
    assert ready["status"] == "ready" and ready["items"] >= len(ITEMS)
    manifest = anonymous.get("/model").json()
    assert manifest["name"] == "tiny-bert" and manifest["schema_version"] == 1
    assert "/similar" in anonymous.get("/openapi.json").json()["paths"]
    anonymous.post("/similar", json={"id": "p1"})
    anonymous.get("/no/such/path-unrouted")
    counted = [
        'http_requests_total{handler="none",method="GET",status="404"}',
        'http_request_duration_seconds_count{handler="/similar",method="POST",status="200"}',
        'http_requests_total{handler="/similar",method="POST",status="200"}',
        'http_request_duration_seconds_bucket{handler="/similar",le="0.001",method="POST",status="200"}',
    ]
    # The HTTP middleware counts a request once its answer is sent, so a scrape right after it may come first.
    deadline = time.monotonic() + 10
    while not all(line in (metrics := anonymous.get("/metrics").text) for line in counted):
        if time.monotonic() > deadline:
            raise AssertionError([line for line in counted if line not in metrics])
        time.sleep(0.05)
    assert "unrouted" not in metrics  # no label per unknown path: they would grow without bound
    assert 'handler="/metrics"' not in metrics  # scrapes are not counted
    assert "metricsearch_items " in metrics
    assert "metricsearch_query_batch_texts_count" in metrics
    assert "metricsearch_query_queue_depth 0.0" in metrics


def test_text_query_during_a_bulk_load_is_answered_within_its_timeout(tiny_bundle, start_service):
    """Indexing encodes on every core; a text query (a new text, so encoded) arriving meanwhile still gets one."""
    service = start_service(tiny_bundle, MS_REQUEST_TIMEOUT_S="5", MS_EMBEDDING_CACHE_SIZE="0")
    words = [f"{c}{n}" for n in range(40) for c in "abcdefgh"]
    rng = np.random.default_rng(0)
    loads = [
        [
            {
                "id": f"b{batch}-{n}",
                "title": " ".join(rng.choice(words, 12)),
                "description": " ".join(rng.choice(words, 60)),
            }
            for n in range(1000)
        ]
        for batch in range(3)
    ]
    spans: list[tuple[float, float]] = []

    def load() -> None:
        with service.client() as c:
            for items in loads:
                started = time.monotonic()
                assert c.post("/index", json={"items": items}).status_code == 200
                spans.append((started, time.monotonic()))

    loader = threading.Thread(target=load)
    loader.start()
    answered: list[tuple[float, float]] = []
    with service.client() as c:
        while loader.is_alive():
            started = time.monotonic()
            response = c.post("/similar", json={"text": f"query {len(answered)} {words[len(answered) % 320]}", "k": 5})
            assert response.status_code == 200, response.text
            answered.append((started, time.monotonic()))
    loader.join()
    assert len(spans) == len(loads)
    during = [(s, e) for s, e in answered if any(a <= s and e <= b for a, b in spans)]
    assert len(during) >= 5, (spans, answered)
    assert max(e - s for s, e in during) < 5
