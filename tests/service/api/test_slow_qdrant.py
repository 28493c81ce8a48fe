"""A service on a Qdrant server that accepts connections and never answers (real HTTP both ways: the service as a
subprocess, the server a socket on 127.0.0.1, tests/service/qdrant_rest.py): liveness stays instant, readiness and
requests fail with 503 and a reason, nothing queues, and the service serves again once the server answers, without a
restart. Then the server loses its collection: an error state, never an empty collection served as ready."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from metricsearch.service.process import ServiceProcess
from tests.service.qdrant_rest import QdrantRest
from tests.service.serving import assert_answered_at_once

HUNG = 16
TIMEOUT_S = 3


@pytest.fixture
def qdrant():
    with QdrantRest() as server:
        yield server


@pytest.fixture
def service(tiny_bundle, tmp_path, qdrant):
    env = {"MS_QDRANT_URL": qdrant.url, "MS_QDRANT_TIMEOUT_S": str(TIMEOUT_S), "MS_QDRANT_BREAKER_OPEN_S": "1"}
    service = ServiceProcess(tiny_bundle, tmp_path / "data", env)
    service.start()
    yield service
    service.stop()


def test_a_hung_qdrant_never_stalls_liveness_and_requests_recover_without_restart(service, qdrant):
    items = [{"id": f"sku-{i}", "title": f"red shirt {i}", "description": f"cotton, size {i}"} for i in range(12)]
    with service.client() as client:
        assert client.post("/index", json={"items": items}).status_code == 200
        assert client.post("/similar", json={"id": "sku-1", "k": 3}).status_code == 200

        qdrant.hang()
        with ThreadPoolExecutor(HUNG) as pool, httpx.Client(base_url=service.url, timeout=30) as probe:
            started = time.monotonic()
            hung = [pool.submit(client.post, "/similar", json={"id": f"sku-{i % 12}", "k": 3}) for i in range(HUNG)]
            deadline = time.monotonic() + 30
            while qdrant.held < HUNG and time.monotonic() < deadline:
                time.sleep(0.01)
            assert qdrant.held == HUNG, "every /similar reached the server and waits on it"

            overflow = probe.post("/similar", json={"text": "red shirt", "k": 3})
            assert overflow.status_code == 503 and overflow.headers["Retry-After"], overflow.text
            assert "MS_QDRANT_MAX_IN_FLIGHT" in overflow.json()["detail"], "one more fails at once, never queues"

            latencies = []
            while time.monotonic() - started < TIMEOUT_S - 0.5 and len(latencies) < 400:
                sent = time.perf_counter()
                assert probe.get("/healthz").status_code == 200
                latencies.append(time.perf_counter() - sent)
                time.sleep(0.005)
            answers = [f.result() for f in hung]
        assert len(latencies) >= 20
        assert_answered_at_once(latencies)
        assert {a.status_code for a in answers} == {503}
        assert all(a.headers["Retry-After"] and qdrant.url in a.json()["detail"] for a in answers)

        # The breaker is open: requests and readiness fail at once, with the reason.
        sent = time.perf_counter()
        fast = client.post("/similar", json={"id": "sku-1", "k": 3})
        ready = client.get("/readyz")
        assert time.perf_counter() - sent < 1.0
        assert fast.status_code == 503 and "fail fast" in fast.json()["detail"], fast.text
        assert ready.status_code == 503 and "does not answer" in ready.json()["detail"], ready.text

        qdrant.answer()
        deadline = time.monotonic() + 10
        while client.get("/readyz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        again = client.post("/similar", json={"id": "sku-1", "k": 3})
        assert again.status_code == 200 and len(again.json()["results"]) == 3, again.text
        assert client.post("/similar", json={"text": "red shirt", "k": 3}).status_code == 200

        # The server lost its data: unready with what happened, never an empty collection created and served.
        qdrant.local.delete_collection("items")
        ready = client.get("/readyz")
        assert ready.status_code == 503 and "vanished" in ready.json()["detail"], ready.text
        assert client.post("/similar", json={"id": "sku-1", "k": 3}).status_code == 503
        assert not qdrant.local.collection_exists("items")
    assert "vanished" in service.log()
