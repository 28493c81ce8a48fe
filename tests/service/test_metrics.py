"""MS_METRICS_PORT over real HTTP: /metrics answers on its own port (the same series, counting the API's requests)
and is an unknown path on the API port, out of its OpenAPI document; settings that would bind it twice are refused."""

from __future__ import annotations

import httpx
import pytest
from pydantic import ValidationError

from metricsearch.service.config import Settings
from metricsearch.service.process import ServiceProcess, free_port


def test_metrics_on_their_own_port_and_not_on_the_api_port(tiny_bundle, tmp_path):
    metrics_port = free_port()
    service = ServiceProcess(tiny_bundle, tmp_path / "data", {"MS_METRICS_PORT": str(metrics_port)})
    service.start()
    try:
        with service.client() as api:
            assert api.post("/similar", json={"text": "red shirt"}).status_code == 200
            elsewhere = api.get("/metrics")
            assert elsewhere.status_code == 404 and elsewhere.json() == {"detail": "Not Found", "code": "not_found"}
            assert "/metrics" not in api.get("/openapi.json").json()["paths"]
        scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
        assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
        assert 'http_requests_total{handler="/similar",method="POST",status="200"} 1.0' in scraped.text
        assert "metricsearch_query_batch_texts_count 1.0" in scraped.text
    finally:
        service.stop()
    with pytest.raises(httpx.ConnectError):  # closed with the service
        httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2)


def test_a_metrics_port_taken_fails_the_start(tiny_bundle, tmp_path):
    service = ServiceProcess(tiny_bundle, tmp_path / "data", {})
    service.start(until="/healthz")
    try:
        second = ServiceProcess(tiny_bundle, tmp_path / "other", {"MS_METRICS_PORT": str(service.port)})
        with pytest.raises(RuntimeError, match="exited"):
            second.start(timeout_s=60)
        assert "address already in use" in second.log().lower()
    finally:
        service.stop()


@pytest.mark.parametrize(
    ("settings", "message"),
    [({"port": 9000, "metrics_port": 9000}, "is MS_PORT"), ({"metrics_port": 9100, "workers": 2}, "MS_WORKERS=1")],
)
def test_settings_that_would_bind_the_metrics_port_twice_are_refused(settings, message):
    with pytest.raises(ValidationError, match=message):
        Settings(**settings)
