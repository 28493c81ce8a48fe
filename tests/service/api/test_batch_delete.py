"""POST /similar/batch and POST /items/delete over real HTTP (a subprocess service with the tiny bundle)."""

from __future__ import annotations

import re

import pytest

from metricsearch.service.process import ServiceProcess

KEY = "write-secret"
ITEMS = [
    {
        "id": f"i{n}",
        "title": f"{['red shirt', 'leather boots', 'wool hat'][n % 3]} {n}",
        "description": f"item number {n}",
        "metadata": {"brand": ["acme", "boota", "zeta"][n % 3], "n": n},
    }
    for n in range(15)
]


@pytest.fixture(scope="module")
def service(tiny_bundle, tmp_path_factory):
    process = ServiceProcess(tiny_bundle, tmp_path_factory.mktemp("batch") / "data", {"MS_API_KEY": KEY})
    process.start()
    with process.client(Authorization=f"Bearer {KEY}") as c:
        assert c.post("/index", json={"items": ITEMS}).status_code == 200
    yield process
    process.stop()


@pytest.fixture(scope="module")
def client(service):
    with service.client(Authorization=f"Bearer {KEY}") as c:
        yield c


def results(answer: dict) -> list[tuple[str, float]]:
    return [(r["id"], round(r["score"], 5)) for r in answer["results"]]


def encoder_calls(client) -> tuple[float, float]:
    """(calls, texts) the query encoder has served, from /metrics."""
    text = client.get("/metrics").text
    count = re.search(r"^metricsearch_query_batch_texts_count (\S+)$", text, re.M)
    total = re.search(r"^metricsearch_query_batch_texts_sum (\S+)$", text, re.M)
    return float(count.group(1)) if count else 0.0, float(total.group(1)) if total else 0.0


def test_batch_answers_each_query_as_similar_would(client):
    queries = [
        {"id": "i0", "k": 3},
        {"text": "leather boots", "k": 4, "filter": {"brand": "boota"}},
        {"positive_ids": ["i1", "i2"], "k": 2, "group_by": "brand"},
        {"title": "wool hat", "description": "warm", "k": 2, "offset": 1},
    ]
    response = client.post("/similar/batch", json={"queries": queries})
    assert response.status_code == 200, response.text
    answers = response.json()["answers"]
    assert len(answers) == len(queries)
    for query, answer in zip(queries, answers, strict=True):
        alone = client.post("/similar", json=query).json()
        assert results(answer) == results(alone)
        assert answer["model"] == "tiny-bert"


def test_bad_queries_get_their_own_error_and_the_rest_an_answer(client):
    queries = [
        {"id": "i0", "k": 0},
        {"id": "nope"},
        {"text": "x" * 20_001},
        {"id": "i0", "k": 2},
        "not an object",
    ]
    answers = client.post("/similar/batch", json={"queries": queries}).json()["answers"]
    assert answers[0]["error"]["status"] == 422 and "queries.0" in answers[0]["error"]["detail"]
    assert "k" in answers[0]["error"]["detail"]
    assert answers[1]["error"]["status"] == 404 and "'nope'" in answers[1]["error"]["detail"]
    assert answers[2]["error"]["status"] == 413 and "MS_MAX_DESCRIPTION_CHARS" in answers[2]["error"]["detail"]
    assert len(answers[3]["results"]) == 2
    assert answers[4]["error"]["status"] == 422


def test_text_queries_of_a_batch_share_one_encoder_call(client):
    before = encoder_calls(client)
    queries = [{"text": f"fresh query number {n}"} for n in range(3)] + [{"title": "another fresh one"}]
    assert client.post("/similar/batch", json={"queries": queries}).status_code == 200
    calls, texts = encoder_calls(client)
    assert (calls - before[0], texts - before[1]) == (1, 4)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"queries": []}, "queries"),
        ({"queries": [{"id": "i0"}] * 101}, "queries"),
        ({"queries": {"id": "i0"}}, "queries"),
        ({}, "queries"),
    ],
)
def test_bad_batches_are_422(client, body, message):
    response = client.post("/similar/batch", json=body)
    assert response.status_code == 422, response.text
    assert message in response.json()["detail"]


def test_delete_by_ids_counts_what_existed(client):
    response = client.post("/items/delete", json={"ids": ["i13", "i14", "never-there"]})
    assert response.status_code == 200, response.text
    assert response.json() == {"deleted": 2}
    assert client.get("/items/i13").status_code == 404
    ids = {r["id"] for r in client.post("/similar", json={"id": "i0", "k": 20}).json()["results"]}
    assert not ids & {"i13", "i14"}


def test_delete_by_filter_removes_every_match(client):
    zeta = {i["id"] for i in ITEMS if i["metadata"]["brand"] == "zeta"} - {"i14"}
    response = client.post("/items/delete", json={"filter": {"brand": "zeta", "n": {"lte": 100}}})
    assert response.json() == {"deleted": len(zeta)}
    assert client.post("/similar", json={"id": "i0", "filter": {"brand": "zeta"}}).json()["results"] == []
    assert client.post("/items/delete", json={"filter": {"brand": "zeta"}}).json() == {"deleted": 0}
    assert client.get("/readyz").json()["items"] == len(ITEMS) - 2 - len(zeta)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"ids": ["i0"], "filter": {"brand": "acme"}}, "exactly one of ids or filter"),
        ({}, "exactly one of ids or filter"),
        ({"ids": []}, "ids"),
        ({"filter": {}}, "filter"),
        ({"ids": ["x"] * 1001}, "ids"),
    ],
)
def test_bad_deletes_are_422_and_delete_nothing(client, body, message):
    before = client.get("/readyz").json()["items"]
    response = client.post("/items/delete", json=body)
    assert response.status_code == 422, response.text
    assert message in response.json()["detail"]
    assert client.get("/readyz").json()["items"] == before


def test_delete_needs_the_write_key(service):
    with service.client() as anonymous:
        assert anonymous.post("/items/delete", json={"ids": ["i0"]}).status_code == 401
        assert anonymous.post("/similar/batch", json={"queries": [{"id": "i0"}]}).status_code == 200


def test_a_batch_stops_answering_at_the_request_timeout(tiny_bundle, tmp_path):
    """The costliest queries take seconds each: a batch answers them until MS_REQUEST_TIMEOUT_S has passed since it
    arrived, and each query left gets a timed_out error in its place, not minutes of a worker's time."""
    process = ServiceProcess(tiny_bundle, tmp_path / "data", {"MS_API_KEY": KEY, "MS_REQUEST_TIMEOUT_S": "0.001"})
    process.start()
    try:
        with process.client(Authorization=f"Bearer {KEY}") as c:
            assert c.post("/index", json={"items": ITEMS}).status_code == 200
            batch = c.post("/similar/batch", json={"queries": [{"id": f"i{n % 15}", "k": 5} for n in range(40)]})
        assert batch.status_code == 200, batch.text
        answers = batch.json()["answers"]
        late = [n for n, answer in enumerate(answers) if "error" in answer]
        assert late and late == list(range(late[0], 40)), "answered in order until the deadline, the rest refused"
        error = answers[-1]["error"]
        assert (error["status"], error["code"]) == (503, "timed_out")
        assert error["detail"].startswith("queries.39: not answered") and "MS_REQUEST_TIMEOUT_S" in error["detail"]
        assert all(len(answer["results"]) == 5 for answer in answers[: late[0]])
    finally:
        process.stop()
