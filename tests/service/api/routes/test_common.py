"""What every route shares (routes/common.py), seen in the OpenAPI document a storefront developer reads: each
operation documents the error answers with their body, and the write routes alone need the write key."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from metricsearch.service.api.app import create_app
from metricsearch.service.api.routes.common import ERRORS
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service

KEY = "write-secret"


@pytest.fixture(scope="module")
def client(tiny_bundle, tmp_path_factory):
    settings = Settings(bundle_dir=tiny_bundle, data_dir=tmp_path_factory.mktemp("common"), api_key=KEY)
    with TestClient(create_app(Service(settings))) as client:
        yield client


def test_every_operation_documents_the_error_answers_with_their_body(client):
    paths = client.get("/openapi.json").json()["paths"]
    operations = [(path, method, op) for path, methods in paths.items() for method, op in methods.items()]
    assert len(operations) > 8
    for path, method, operation in operations:
        responses = operation["responses"]
        for status in ERRORS:
            schema = responses[str(status)]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ProblemDetail"}, (path, method, status)


def test_the_write_routes_need_the_write_key_and_the_read_routes_do_not(client):
    body = {"items": [{"id": "a", "title": "red shirt"}]}
    assert client.post("/index", json=body).status_code == 401
    assert client.post("/index", json=body, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert client.delete("/items/a").status_code == 401
    assert client.post("/similar", json={"id": "a"}).status_code == 200
    assert client.get("/items/a").status_code == 200
