"""POST /similar/batch over real HTTP (a subprocess service with the tiny bundle): each query answered as /similar
would answer it alone, or refused on its own with the status and code it would get alone; the text queries of a
batch encoded in one encoder call; a batch cut short at the request timeout."""

from __future__ import annotations

import re

import pytest

from metricsearch.service.process import ServiceProcess
from tests.service.api.routes.test_items import ITEMS, KEY


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


def test_a_batch_answer_holds_what_similar_answers_field_for_field(client):
    """The batch writes its results through the response model, /similar through orjson: a client reading either
    gets the same titles, metadata (integers as integers) and per-field scores. Queries by stored items, so no
    encoder batching moves a score's last bits."""
    queries = [
        {"id": "i0", "k": 5, "filter": {"brand": {"in": ["acme", "boota"]}}},
        {"positive_ids": ["i1", "i2"], "negative_ids": ["i3"], "k": 4, "group_by": "brand"},
        {"id": "i4", "k": 3, "boost": {"field": "n", "weight": 0.01}},
    ]
    answers = client.post("/similar/batch", json={"queries": queries}).json()["answers"]
    for query, answer in zip(queries, answers, strict=True):
        alone = client.post("/similar", json=query).json()
        assert answer["results"], query
        assert answer.keys() == alone.keys() == {"results", "model", "took_ms"}
        assert (answer["results"], answer["model"]) == (alone["results"], alone["model"]), query
    boosted = answers[2]["results"]
    assert all(type(r["metadata"]["n"]) is int and r["scores"]["boost"] is not None for r in boosted)


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


def test_a_batch_query_carries_the_code_it_would_get_alone(client):
    """With the default timeout: under MS_REQUEST_TIMEOUT_S=0.001 the first query could meet the deadline before
    its answer (503 timed_out), as it did once under the test suite's load."""
    batch = client.post("/similar/batch", json={"queries": [{"id": "nope"}, {"id": "i0", "filter": {"a.b": 1}}]})
    assert batch.status_code == 200, batch.text
    errors = [answer["error"] for answer in batch.json()["answers"]]
    assert [(e["status"], e["code"]) for e in errors] == [(404, "unknown_id"), (422, "invalid_filter")]
    assert errors[1]["detail"].startswith("queries.1: filter.a.b")


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
