"""The app around a service (app.py): request ids outermost, so even a 500 carries its id (over real HTTP: uvicorn on
127.0.0.1 in this process, a failing route added), and the factory each `serve --workers N` worker calls, which
takes every setting from the MS_ environment. The metrics port is tested in tests/service/test_metrics.py, CORS in
tests/service/test_reliability_limits.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from metricsearch.service.api.app import app_from_environment, create_app
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service
from metricsearch.service.logs import JsonFormatter
from tests.service.api.test_middleware import lines, log_lines  # noqa: F401 (a fixture)
from tests.service.serving import serving
from tests.service.test_logs import restored_logging  # noqa: F401 (a fixture)

KEY = "write-secret"


@pytest.fixture(scope="module")
def url(tiny_bundle, tmp_path_factory) -> Iterator[str]:
    app = create_app(Service(Settings(bundle_dir=tiny_bundle, data_dir=tmp_path_factory.mktemp("app"))))

    @app.get("/fails")
    async def fails() -> dict:
        raise RuntimeError("a bug")

    with serving(app) as base:
        yield base


def test_a_500_and_its_unhandled_error_line_carry_the_id(url, log_lines):  # noqa: F811
    response = httpx.get(f"{url}/fails", headers={"X-Request-ID": "req-500"})
    assert response.status_code == 500 and response.headers["x-request-id"] == "req-500"
    [line] = [line for line in lines(log_lines) if line["msg"] == "unhandled error"]
    assert line["request_id"] == "req-500" and "a bug" in line["exc"]


def test_a_worker_app_takes_its_settings_from_the_environment(
    tiny_bundle,
    tmp_path,
    monkeypatch,
    restored_logging,  # noqa: F811
):
    """The bundle, the data folder, the write key and the log level a worker serves with are MS_'s."""
    data_dir = tmp_path / "data"
    env = {"MS_BUNDLE_DIR": tiny_bundle, "MS_DATA_DIR": data_dir, "MS_API_KEY": KEY, "MS_LOG_LEVEL": "warning"}
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    with TestClient(app_from_environment()) as client:
        item = {"items": [{"id": "a", "title": "red cotton shirt"}]}
        assert client.post("/index", json=item).status_code == 401
        assert client.post("/index", json=item, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        assert client.get("/model").json()["name"] == "tiny-bert"
        assert client.get("/readyz").json()["items"] == 1
    assert any(data_dir.iterdir())
    root = logging.getLogger()
    assert root.level == logging.WARNING
    assert [type(handler.formatter) for handler in root.handlers] == [JsonFormatter]
