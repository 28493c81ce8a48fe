"""JSON request bodies (body.py): a body sent as another content type is 415 saying what to send; one that does not
parse is 400 naming the problem and where it starts; integers keep every digit. Over the app in process (FastAPI's
TestClient, which raises any exception that would have been a 500)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from metricsearch.service.api.app import create_app
from metricsearch.service.api.body import is_json, parse_json
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service
from tests.service.api.test_bad_input import ITEMS, assert_refused, count, post_raw


@pytest.fixture(scope="module")
def client(tiny_bundle, tmp_path_factory):
    service = Service(Settings(bundle_dir=tiny_bundle, data_dir=tmp_path_factory.mktemp("body") / "data"))
    with TestClient(create_app(service)) as c:
        assert c.post("/index", json={"items": ITEMS}).status_code == 200
        yield c


@pytest.mark.parametrize(
    ("content_type", "given"),
    [("text/plain", "'text/plain'"), ("application/x-www-form-urlencoded", "x-www-form-urlencoded"), (None, "none")],
    ids=["text-plain", "curl-default-form", "missing"],
)
def test_json_sent_as_another_content_type_is_415_saying_what_to_send(client, content_type, given):
    before = count(client)
    body = json.dumps({"items": [{"id": "ct", "title": "t"}]})
    response = post_raw(client, "/index", body, content_type)
    assert_refused(client, response, 415, "Content-Type: application/json", given)
    assert count(client) == before
    assert post_raw(client, "/similar", '{"id": "a"}', "application/json; charset=utf-8").status_code == 200


@pytest.mark.parametrize(
    ("body", "needles"),
    [
        (b'{"id": "a",\n "k": 3,}', ("not valid JSON", "line 2, column 9 (character 20)")),
        (b'{"id": "a\xff"}', ("not valid UTF-8 (byte 0xff at offset 9)", "line 1, column 10")),
        (b'{"id": "\xc3\xa9\xff"}', ("not valid UTF-8 (byte 0xff at offset 10)", "column 10 (character 9)")),
        (b'{"id": "a", "filter": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", ("nested too deep", "column 1047")),
        (b'{"id": "a", "k": ' + b"9" * 5000 + b"}", ("a number too long to read",)),
    ],
    ids=["trailing-comma", "invalid-utf8", "invalid-utf8-after-multibyte", "10k-deep", "5000-digit-number"],
)
def test_unparsable_bodies_name_the_problem_and_its_position(client, body, needles):
    response = post_raw(client, "/similar", body)
    assert_refused(client, response, 400, *needles, "Content-Type: application/json")


@pytest.mark.parametrize(
    ("content_type", "taken"),
    [
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("Application/JSON", True),
        ("application/problem+json", True),
        ("application/vnd.api+json; charset=utf-8", True),
        (None, False),
        ("", False),
        ("text/json", False),
        ("application/jsonl", False),
        ("application/x-www-form-urlencoded", False),
        ("multipart/form-data; boundary=x", False),
    ],
)
def test_json_and_any_json_suffix_type_are_taken_as_json(content_type, taken):
    assert is_json(content_type) is taken


def test_integers_keep_every_digit_past_64_bits():
    """So a metadata integer past 2^53 is refused naming the limit, never silently rounded to a float."""
    parsed = parse_json(b'{"n": 18446744073709551617, "m": -36893488147419103233, "x": [9007199254740993]}')
    assert parsed == {"n": 2**64 + 1, "m": -(2**65) - 1, "x": [2**53 + 1]}
    assert all(type(v) is int for v in (parsed["n"], parsed["m"], parsed["x"][0]))
