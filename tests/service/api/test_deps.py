"""The API keys (deps.py) on the app in process, through FastAPI's TestClient: writes take MS_API_KEY; reads are open
until MS_READ_API_KEY is set, then take it or the write key; a missing key is 401, a wrong one 403, never echoed; the
OpenAPI document says which routes take which key, and marks a key optional where it is unset."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from metricsearch.service.api.app import create_app
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service

KEY = "write-secret"
READER = "reader"
WRITES = [("/index", "post"), ("/items/{item_id}", "delete"), ("/items/delete", "post")]
READS = [("/items/{item_id}", "get"), ("/similar", "post"), ("/similar/batch", "post")]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def serve(tiny_bundle, data_dir, **keys: str):
    """A client of the app with these keys set, one item (p1) indexed."""
    service = Service(Settings(bundle_dir=tiny_bundle, data_dir=data_dir, **keys))
    with TestClient(create_app(service)) as client:
        item = {"id": "p1", "title": "red cotton shirt", "description": "a soft red shirt"}
        assert client.post("/index", json={"items": [item]}, headers=bearer(KEY)).status_code == 200
        yield client


@pytest.fixture(scope="module")
def anonymous(tiny_bundle, tmp_path_factory):
    """The write key set, no read key; the client sends no key of its own."""
    yield from serve(tiny_bundle, tmp_path_factory.mktemp("write-key"), api_key=KEY)


@pytest.fixture(scope="module")
def both_keys(tiny_bundle, tmp_path_factory):
    yield from serve(tiny_bundle, tmp_path_factory.mktemp("both-keys"), api_key=KEY, read_api_key=READER)


def test_writes_need_the_key(anonymous):
    item = {"items": [{"id": "k", "title": "t"}]}
    missing = anonymous.post("/index", json=item)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    wrong = anonymous.post("/index", json=item, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 403 and "nope" not in wrong.text
    assert anonymous.delete("/items/p1").status_code == 401
    assert anonymous.get("/items/k").status_code == 404  # nothing was written
    assert anonymous.post("/similar", json={"id": "p1"}).status_code == 200  # reads are open without a read key


def test_openapi_declares_the_bearer_scheme_on_routes_that_take_a_key(anonymous):
    document = anonymous.get("/openapi.json").json()
    schemes = document["components"]["securitySchemes"]
    for name in ("bearerAuth", "readBearerAuth"):
        assert schemes[name] | {"description": ""} == {"type": "http", "scheme": "bearer", "description": ""}
    paths = document["paths"]
    for path, method in WRITES:  # MS_API_KEY is set: required
        assert paths[path][method]["security"] == [{"bearerAuth": []}], (path, method)
    for path, method in READS:  # no read key: declared, and optional
        assert paths[path][method]["security"] == [{"readBearerAuth": []}, {}], (path, method)
    for path in ("/livez", "/healthz", "/readyz", "/model", "/metrics"):
        assert "security" not in paths[path]["get"], path


def test_keys_are_read_as_bearer_credentials_whatever_the_spacing_or_case(anonymous):
    item = {"items": [{"id": "spaced", "title": "t"}]}
    assert anonymous.post("/index", json=item, headers={"Authorization": f"bearer   {KEY}"}).status_code == 200
    for header in ("Bearer", f"Basic {KEY}", KEY):
        refused = anonymous.post("/index", json=item, headers={"Authorization": header})
        assert (refused.status_code, refused.json()["code"]) == (401, "unauthorized"), header
    assert anonymous.delete("/items/spaced", headers={"Authorization": f"Bearer {KEY}"}).status_code == 204


def test_read_key_when_configured(both_keys):
    assert both_keys.post("/similar", json={"text": "x"}).status_code == 401
    ok = both_keys.post("/similar", json={"text": "x"}, headers=bearer(READER))
    assert ok.status_code == 200
    assert both_keys.get("/healthz").status_code == 200
    paths = both_keys.get("/openapi.json").json()["paths"]
    for (path, method), scheme in [(w, "bearerAuth") for w in WRITES] + [(r, "readBearerAuth") for r in READS]:
        assert paths[path][method]["security"] == [{scheme: []}], (path, method)  # both keys set: required


def test_the_write_key_reads_too_and_the_read_key_cannot_write(both_keys):
    for key in (KEY, READER):
        assert both_keys.get("/items/p1", headers=bearer(key)).json()["id"] == "p1", key
        answered = both_keys.post("/similar/batch", json={"queries": [{"id": "p1"}]}, headers=bearer(key))
        assert answered.status_code == 200 and "error" not in answered.json()["answers"][0], key
    item = {"items": [{"id": "by-reader", "title": "t"}]}
    refused = both_keys.post("/index", json=item, headers=bearer(READER))
    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    assert READER not in refused.text
    assert both_keys.delete("/items/p1", headers=bearer(READER)).status_code == 403
    assert both_keys.get("/items/by-reader", headers=bearer(KEY)).status_code == 404
    assert both_keys.get("/items/p1", headers=bearer(KEY)).status_code == 200  # not deleted
    wrong = both_keys.get("/items/p1", headers=bearer("nope"))
    assert (wrong.status_code, wrong.json()["code"]) == (403, "forbidden") and "nope" not in wrong.text
