"""A service pointed at a Qdrant server that does not answer (real HTTP, a subprocess service, a port where nothing
listens): it starts, stays alive but unready, and answers requests that need the store with a 503 that says what to
check, while /metrics keeps answering."""

from __future__ import annotations

import pytest

from metricsearch.service.process import ServiceProcess, free_port


@pytest.fixture
def service_without_qdrant(tiny_bundle, tmp_path):
    qdrant = f"http://127.0.0.1:{free_port()}"
    env = {"MS_QDRANT_URL": qdrant, "MS_QDRANT_TIMEOUT_S": "1", "MS_QDRANT_SHARDS": "6", "MS_QDRANT_REPLICATION": "2"}
    service = ServiceProcess(tiny_bundle, tmp_path / "data", env)
    service.start(until="/healthz")  # it never gets ready
    yield service, qdrant
    service.stop()


def test_service_starts_unready_and_answers_503_while_qdrant_is_down(service_without_qdrant):
    service, qdrant = service_without_qdrant
    with service.client() as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/livez").json() == {"status": "ok"}  # liveness never asks the store

        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.headers["Retry-After"]
        assert f"Qdrant at {qdrant} does not answer" in ready.json()["detail"]

        for path, body in [
            ("/similar", {"id": "sku-1"}),
            ("/similar", {"text": "red shirt"}),
            ("/index", {"items": [{"id": "sku-1", "title": "Red shirt"}]}),
        ]:
            response = client.post(path, json=body)
            assert response.status_code == 503, (path, body, response.text)
            assert qdrant in response.json()["detail"] and "MS_QDRANT_URL" in response.json()["detail"]
        assert client.get("/items/sku-1").status_code == 503

        metrics = client.get("/metrics")
        assert metrics.status_code == 200
        assert "metricsearch_items NaN" in metrics.text
        assert 'http_requests_total{handler="/similar",method="POST",status="503"} 2.0' in metrics.text
    assert "does not answer" in service.log()
