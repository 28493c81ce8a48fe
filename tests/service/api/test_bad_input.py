"""Bad input as an attacker or a careless client sends it, over real HTTP (a subprocess service, tiny bundle):
each is a clear 4xx that names what to fix, never a 500, and writes nothing."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time

import httpx
import pytest

from tests.service.serving import assert_answered_at_once, indexed_service

ITEMS = [
    {"id": "a", "title": "red cotton shirt", "description": "soft", "metadata": {"brand": "acme", "n": 1}},
    {"id": "b", "title": "blue cotton shirt", "description": "soft", "metadata": {"brand": "acme", "n": 2}},
]
QUERY_BODY_LIMIT = 64 * 1024
BATCH_BODY_LIMIT = 256 * 1024


@pytest.fixture(scope="module")
def service(tiny_bundle, tmp_path_factory):
    env = {"MS_MAX_QUERY_BODY_BYTES": str(QUERY_BODY_LIMIT), "MS_MAX_BATCH_QUERY_BODY_BYTES": str(BATCH_BODY_LIMIT)}
    with indexed_service(tiny_bundle, tmp_path_factory.mktemp("bad-input") / "data", ITEMS, env) as process:
        yield process


@pytest.fixture(scope="module")
def client(service):
    with service.client() as c:
        yield c


def count(client: httpx.Client) -> int:
    return client.get("/readyz").json()["items"]


def post_raw(client: httpx.Client, path: str, body: bytes | str, content_type: str | None = "application/json"):
    headers = {"Content-Type": content_type} if content_type else {}
    return client.post(path, content=body.encode() if isinstance(body, str) else body, headers=headers)


def assert_refused(client, response, status: int, *needles: str) -> None:
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    for needle in needles:
        assert needle in detail, detail


def assert_no_server_error(service) -> None:
    log = service.log()
    assert "Traceback" not in log and "unhandled error" not in log, log


# A lone surrogate, as the JSON escape a client sends (valid JSON, not valid Unicode), in place of each "@" below.
SURROGATE = "\\ud800"


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/index", '{"items": [{"id": "s", "title": "t", "description": "x@y"}]}', "items.0.description"),
        ("/index", '{"items": [{"id": "s", "title": "t@"}]}', "items.0.title"),
        ("/index", '{"items": [{"id": "s@", "title": "t"}]}', "items.0.id"),
        ("/index", '{"items": [{"id": "s", "title": "t", "metadata": {"k@": 1}}]}', "items.0.metadata"),
        ("/index", '{"items": [{"id": "s", "title": "t", "metadata": {"k": "@"}}]}', "items.0.metadata.k"),
        ("/index", '{"items": [{"id": "s", "title": "t", "metadata": {"k": ["x", "@"]}}]}', "element 1"),
        ("/similar", '{"id": "a", "filter": {"brand": "@"}}', "filter.brand"),
        ("/similar", '{"id": "a", "filter": {"brand": {"in": ["acme", "@"]}}}', "filter.brand.in.1"),
        ("/similar", '{"id": "a", "filter": {"k@": "x"}}', "filter"),
        ("/similar", '{"text": "red @"}', "text"),
        ("/similar", '{"id": "a", "exclude_ids": ["@"]}', "exclude_ids.0"),
    ],
    ids=[
        "description",
        "title",
        "id",
        "metadata-key",
        "metadata-value",
        "metadata-list",
        "filter-value",
        "filter-in",
        "filter-key",
        "text",
        "exclude-ids",
    ],
)
def test_lone_surrogates_are_422_naming_the_field(service, client, path, body, field):
    before = count(client)
    response = post_raw(client, path, body.replace("@", SURROGATE))
    assert_refused(client, response, 422, field, "not valid Unicode")
    assert count(client) == before
    assert_no_server_error(service)


def test_integers_beyond_2_53_in_metadata_are_refused_and_2_53_is_exact(client):
    before = count(client)
    too_big = {"items": [{"id": "big", "title": "t", "metadata": {"n": 2**53 + 1}}]}
    assert_refused(client, client.post("/index", json=too_big), 422, "items.0.metadata.n", "2^53", "string")
    negative = {"items": [{"id": "big", "title": "t", "metadata": {"n": -(2**70)}}]}
    assert_refused(client, client.post("/index", json=negative), 422, "items.0.metadata.n", "2^53")
    assert count(client) == before
    for flt in ({"n": 2**60}, {"n": {"gte": 2**60}}, {"n": {"in": [2**60]}}):
        assert_refused(client, client.post("/similar", json={"id": "a", "filter": flt}), 422, "filter.n", "2^53")

    exact = {"items": [{"id": "big", "title": "t", "metadata": {"n": 2**53, "m": -(2**53)}}]}
    assert client.post("/index", json=exact).status_code == 200
    assert client.get("/items/big").json()["metadata"] == {"n": 2**53, "m": -(2**53)}
    assert client.delete("/items/big").status_code == 204


@pytest.mark.parametrize("k", ['"5"', "true", "1e2", "5.0", "null"])
def test_k_takes_only_a_json_integer(client, k):
    response = post_raw(client, "/similar", '{"id": "a", "k": @}'.replace("@", k))
    assert_refused(client, response, 422, "k: must be a JSON integer")


@pytest.mark.parametrize(
    "body",
    [
        '{"id": "a", "filter": {"n": {"gte": "1"}}}',
        '{"id": "a", "filter": {"n": {"lte": true}}}',
        '{"id": "a", "filter": {"n": {"in": [true]}}}',
    ],
    ids=["gte-string", "lte-bool", "in-bool"],
)
def test_filter_numbers_are_strict(client, body):
    assert_refused(client, post_raw(client, "/similar", body), 422, "filter.n")


def test_filter_limits_are_refused_before_any_search(client):
    too_many_keys = {"id": "a", "filter": {f"k{n}": n for n in range(65)}}
    assert_refused(client, client.post("/similar", json=too_many_keys), 422, "filter", "at most 64")
    at_limit = {"id": "a", "filter": {f"k{n}": n for n in range(64)}}
    assert client.post("/similar", json=at_limit).status_code == 200
    too_many_values = {"id": "a", "filter": {"n": {"in": list(range(1001))}}}
    assert_refused(client, client.post("/similar", json=too_many_values), 422, "filter", "at most 1000")
    assert client.post("/similar", json={"id": "a", "filter": {"n": {"in": list(range(1000))}}}).status_code == 200
    # The cap holds over all the keys: 64 keys x 1,000 numbers held the event loop 1.3 s (building the conditions).
    spread = {"id": "a", "filter": {f"k{n}": {"in": list(range(16))} for n in range(63)}}  # 1,008 in all
    assert_refused(client, client.post("/similar", json=spread), 422, "filter", "1000 `in` values", "this one 1008")
    spread["filter"]["k0"]["in"] = list(range(8))  # 1,000
    assert client.post("/similar", json=spread).status_code == 200
    deleting = {"filter": {f"k{n}": {"in": list(range(16))} for n in range(63)}}
    assert_refused(client, client.post("/items/delete", json=deleting), 422, "filter", "1000 `in` values")
    nested = {"id": "a", "filter": {"n": {"in": [[1]]}}}
    assert_refused(client, client.post("/similar", json=nested), 422, "filter.n.in.0", "a string or an integer")


def oversize_filter_body() -> bytes:
    """500,000 filter keys, 7.9 MB: the attack that stalled every route for seconds."""
    return json.dumps({"id": "a", "filter": {f"key{n}": n for n in range(500_000)}}).encode()


def test_a_query_body_over_its_cap_is_413_declared_or_streamed(client):
    body = oversize_filter_body()
    declared = post_raw(client, "/similar", body)
    assert_refused(client, declared, 413, "MS_MAX_QUERY_BODY_BYTES")

    def chunks():
        for start in range(0, len(body), 65536):
            yield body[start : start + 65536]

    streamed = client.post("/similar", content=chunks(), headers={"Content-Type": "application/json"})
    assert "content-length" not in streamed.request.headers
    assert_refused(client, streamed, 413, "MS_MAX_QUERY_BODY_BYTES")
    # /index keeps its own, larger cap: a body over the query cap is fine there.
    items = [{"id": f"cap{n}", "title": "t", "description": "x" * 19_000} for n in range(4)]
    assert len(json.dumps({"items": items})) > QUERY_BODY_LIMIT
    assert client.post("/index", json={"items": items}).status_code == 200
    for n in range(4):
        assert client.delete(f"/items/cap{n}").status_code == 204


def test_a_batch_body_over_its_cap_is_413_and_one_under_it_is_answered(client):
    """/similar/batch has its own cap, between the query's and the general one: a batch of large filters parsed on the
    event loop held every other request up to the general 32 MB cap."""
    query = {"id": "a", "k": 1, "exclude_ids": [f"{n:0>250}" for n in range(200)]}  # about 51 KB each
    over = json.dumps({"queries": [query] * 6}).encode()
    assert BATCH_BODY_LIMIT < len(over) < 8 * BATCH_BODY_LIMIT
    assert_refused(client, post_raw(client, "/similar/batch", over), 413, "MS_MAX_BATCH_QUERY_BODY_BYTES")
    under = json.dumps({"queries": [query] * 4}).encode()
    assert QUERY_BODY_LIMIT < len(under) < BATCH_BODY_LIMIT  # over /similar's cap: the batch's own applies
    answers = post_raw(client, "/similar/batch", under)
    assert answers.status_code == 200, answers.text
    assert [len(answer["results"]) for answer in answers.json()["answers"]] == [1] * 4


def raw_post(port: int, path: str, body: bytes) -> int:
    """One POST on a raw socket, the whole body sent, and its status code: the attacker's side costs no Python work
    while it sends (sendall runs without the GIL), so the probes below measure the service, not the test's threads."""
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        with contextlib.suppress(OSError):  # the server closes once it has answered; the answer is there to read
            sock.sendall(head.encode() + b"\r\n" + body)
        answer = b""
        while b"\r\n" not in answer and (chunk := sock.recv(4096)):
            answer += chunk
    return int(answer.split(b" ", 2)[1])


def test_healthz_answers_at_once_while_8_oversize_queries_are_refused(service):
    """Ten rounds of 8 parallel queries with 500,000 filter keys each (which took seconds apiece on the event loop
    when they were parsed), /healthz probed while each round is under way."""
    body = oversize_filter_body()
    statuses: list[int] = []
    probes: list[float] = []

    def attack() -> None:
        statuses.append(raw_post(service.port, "/similar", body))

    with httpx.Client(base_url=service.url, timeout=10) as prober:
        prober.get("/healthz")  # connect before measuring
        for _ in range(10):
            threads = [threading.Thread(target=attack) for _ in range(8)]
            for thread in threads:
                thread.start()
            while any(t.is_alive() for t in threads) or len(probes) % 5:
                started = time.perf_counter()
                assert prober.get("/healthz").status_code == 200
                probes.append(time.perf_counter() - started)
            for thread in threads:
                thread.join(timeout=60)
    assert statuses == [413] * 80
    assert_answered_at_once(probes)


def test_a_metadata_update_that_only_changes_a_type_is_stored(client):
    item = {"id": "typed", "title": "t", "metadata": {"flag": 1, "n": 2.0}}
    assert client.post("/index", json={"items": [item]}).json() == {"indexed": 1, "unchanged": 0}
    assert client.post("/index", json={"items": [item]}).json() == {"indexed": 0, "unchanged": 1}
    retyped = {**item, "metadata": {"flag": True, "n": 2}}
    assert client.post("/index", json={"items": [retyped]}).json() == {"indexed": 1, "unchanged": 0}
    stored = client.get("/items/typed").json()["metadata"]
    assert stored == {"flag": True, "n": 2}
    assert type(stored["flag"]) is bool and type(stored["n"]) is int
    reordered = {**item, "metadata": {"n": 2, "flag": True}}
    assert client.post("/index", json={"items": [reordered]}).json() == {"indexed": 0, "unchanged": 1}
    assert client.delete("/items/typed").status_code == 204


def test_filters_compare_numbers_by_value_and_booleans_apart(client):
    items = [
        {"id": "int2", "title": "t", "metadata": {"v": 2}},
        {"id": "float2", "title": "t", "metadata": {"v": 2.0}},
        {"id": "true", "title": "t", "metadata": {"v": True}},
        {"id": "int1", "title": "t", "metadata": {"v": 1}},
    ]
    assert client.post("/index", json={"items": items}).status_code == 200

    def found(flt: dict) -> set[str]:
        response = client.post("/similar", json={"id": "a", "k": 100, "filter": {"v": flt}})
        assert response.status_code == 200, response.text
        return {r["id"] for r in response.json()["results"]}

    assert found(2) == found(2.0) == found({"gte": 2, "lte": 2}) == {"int2", "float2"}
    assert found(True) == {"true"}
    assert found(1) == {"int1"}
    for item in items:
        assert client.delete(f"/items/{item['id']}").status_code == 204


@pytest.mark.parametrize("item_id", [".", "..", "a/./b", "a/..", "../a"])
def test_ids_that_no_url_can_address_are_refused(client, item_id):
    before = count(client)
    response = client.post("/index", json={"items": [{"id": item_id, "title": "t"}]})
    assert_refused(client, response, 422, "items.0.id", "cannot be addressed")
    assert count(client) == before


@pytest.mark.parametrize("item_id", [".", "..", "a/./b", "a/..", "../a", ".x", "..x", "a.b", "x/...", "shoes/red"])
def test_an_id_is_refused_exactly_when_the_openapi_pattern_says_so(client, item_id):
    """Fuzzers generate ids from the declared pattern: what it admits must be taken, what it excludes refused."""
    declared = client.get("/openapi.json").json()["components"]["schemas"]["ItemIn"]["properties"]["id"]["pattern"]
    response = client.post("/index", json={"items": [{"id": item_id, "title": "t"}]})
    assert response.status_code == (200 if re.match(declared, item_id) else 422), response.text


def test_a_title_is_blank_exactly_when_the_openapi_pattern_says_so(client):
    """The schema's pattern is read with ECMAScript's \\s by clients and fuzzers and the catalog blanks fields with
    Python's str.isspace: a title is refused when either calls it blank (\\x1d, \\ufeff) and taken otherwise."""
    before = count(client)
    for blank in ("\x1d", "\u3000\ufeff ", "\x85\x1c"):
        assert_refused(client, client.post("/index", json={"items": [{"id": "ws", "title": blank}]}), 422, "title")
    assert count(client) == before
    accepted = client.post("/index", json={"items": [{"id": "gs", "title": "a\x1d"}]})
    assert accepted.status_code == 200, accepted.text
