"""The admin routes (model rollout) behind the write key, on the app in process (FastAPI's TestClient) with both keys
set: every one of them, its status included, refuses a request without the write key and starts nothing. The rollout
itself over these routes (start, watch, swap, abort, 409s) is tested in tests/service/test_rollout*.py."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from metricsearch.service.api.app import create_app
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service

KEY = "write-secret"
READER = "reader"
ADMIN = [
    ("/admin/rollout", "get"),
    ("/admin/rollout", "post"),
    ("/admin/rollout/swap", "post"),
    ("/admin/rollout/abort", "post"),
]


@pytest.fixture(scope="module")
def client(tiny_bundle, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("admin")
    service = Service(Settings(bundle_dir=tiny_bundle, data_dir=data_dir, api_key=KEY, read_api_key=READER))
    with TestClient(create_app(service)) as c:
        yield c


def test_every_admin_route_takes_the_write_key_and_no_other(client, tiny_bundle):
    refusals = [
        ({}, 401, "unauthorized"),
        ({"Authorization": f"Bearer {READER}"}, 403, "forbidden"),
        ({"Authorization": "Bearer nope"}, 403, "forbidden"),
    ]
    for path, method in ADMIN:
        body = {"bundle": str(tiny_bundle)} if (path, method) == ("/admin/rollout", "post") else None
        for headers, status, code in refusals:
            answer = client.request(method, path, json=body, headers=headers)
            assert (answer.status_code, answer.json()["code"]) == (status, code), (path, method, headers)
    status = client.get("/admin/rollout", headers={"Authorization": f"Bearer {KEY}"})
    assert status.status_code == 200
    assert (status.json()["state"], status.json()["model"]) == ("none", "tiny-bert")  # nothing was started
    paths = client.get("/openapi.json").json()["paths"]
    for path, method in ADMIN:
        assert paths[path][method]["security"] == [{"bearerAuth": []}], (path, method)
