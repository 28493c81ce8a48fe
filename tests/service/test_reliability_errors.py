"""The app in-process (real runtime, tiny bundle): an unexpected error is a generic 500 that leaks nothing, and
readiness follows a Qdrant server that goes away and comes back."""

from __future__ import annotations

import logging
import time

import pytest
from fastapi.testclient import TestClient
from qdrant_client import QdrantClient
from qdrant_client.http.exceptions import ResponseHandlingException

from metricsearch.service import runtime as runtime_module
from metricsearch.service.api.app import create_app
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service
from metricsearch.service.store import RemoteStore

SECRET = "/srv/internal/secret_module.py line 42"


def test_unexpected_error_is_a_generic_500_without_traceback(tiny_bundle, tmp_path, monkeypatch, caplog):
    service = Service(Settings(bundle_dir=tiny_bundle, data_dir=tmp_path / "data"))

    def broken(item_id: str):
        raise RuntimeError(f"bug reading {item_id} at {SECRET}")

    monkeypatch.setattr(service.live.engine, "get", broken)
    with TestClient(create_app(service), raise_server_exceptions=False) as client, caplog.at_level(logging.ERROR):
        response = client.get("/items/sku-1")
    assert response.status_code == 500
    assert response.json() == {"detail": "internal error: the service log has the details", "code": "internal"}
    for leak in (SECRET, "Traceback", "RuntimeError", "sku-1"):
        assert leak not in response.text
    assert SECRET in caplog.text  # the details are in the log, for the operator


def test_readyz_goes_from_503_to_200_when_qdrant_comes_back(tiny_bundle, tmp_path, monkeypatch):
    """MS_QDRANT_URL set, the server down at start-up, then answering: no restart needed."""
    client = QdrantClient(path=str(tmp_path / "qdrant"))  # qdrant-client's local mode stands in for the server
    down = pytest.MonkeyPatch()

    def refused(*args, **kwargs):
        raise ResponseHandlingException(ConnectionRefusedError(111, "Connection refused"))

    down.setattr(client, "collection_exists", refused)
    down.setattr(client, "count", refused)
    monkeypatch.setattr(
        runtime_module,
        "open_store",
        lambda settings, schema, wait_for_server, **_: RemoteStore(
            client, settings.collection, schema, url=settings.qdrant_url, wait_for_server=wait_for_server
        ),
    )
    settings = Settings(bundle_dir=tiny_bundle, qdrant_url="http://qdrant.test:6333")
    with TestClient(create_app(Service(settings))) as service:
        unready = service.get("/readyz")
        assert unready.status_code == 503 and unready.headers["retry-after"]
        assert "http://qdrant.test:6333 does not answer" in unready.json()["detail"]
        assert service.post("/index", json={"items": [{"id": "a", "title": "red shirt"}]}).status_code == 503

        down.undo()  # the server is back: ready once the circuit breaker lets a trial call through
        deadline = time.monotonic() + 3 * settings.qdrant_breaker_open_s
        while (ready := service.get("/readyz")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready.status_code == 200 and ready.json()["items"] == 0
        assert service.post("/index", json={"items": [{"id": "a", "title": "red shirt"}]}).status_code == 200
        assert service.get("/readyz").json()["items"] == 1
