"""Every error code in docs/api.md's table, produced by a real request: a subprocess service over HTTP on 127.0.0.1
(one with tight limits, one on a Qdrant server whose collection does not fit the bundle), and the app in-process for
the faults no request can cause here (an unexpected exception; a full disk, filled for real in
tests/deploy/test_container.py, here a disk that reports no space free). Each answer is `{"detail", "code"}` and
nothing else."""

from __future__ import annotations

import re
import shutil
import socket
import threading
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from qdrant_client import models as qm

from metricsearch.service.api.app import create_app
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service
from metricsearch.service.process import ServiceProcess
from tests.service.qdrant_rest import QdrantRest

DOC = Path(__file__).parents[3] / "docs" / "api.md"
KEY = "write-secret"
QUERY_BODY_LIMIT = 4096


def documented_codes() -> dict[str, set[int]]:
    """The "Error codes" table: each code and the statuses it comes with."""
    section = DOC.read_text().split("### Error codes", 1)[1]
    rows = re.findall(r"^\| `([a-z_]+)` \| ([\d, ]+) \|", section, flags=re.MULTILINE)
    return {code: {int(s) for s in statuses.split(",")} for code, statuses in rows}


def raw_post(url: str, path: str, head: str) -> bytes:
    """A request with a declared Content-Length and no body: the size cap must answer from the header alone."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\n{head}\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def overloaded(service: ServiceProcess) -> httpx.Response:
    """Bursts of text queries at a one-slot queue until one is refused."""
    refused: list[httpx.Response] = []

    def query() -> None:
        with service.client() as c:
            response = c.post("/similar", json={"text": "a long query text " * 20})
            if response.status_code == 429:
                refused.append(response)

    for _ in range(5):
        threads = [threading.Thread(target=query) for _ in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        if refused:
            return refused[0]
    raise AssertionError("no burst filled the one-slot queue")


@pytest.fixture(scope="module")
def tight(tiny_bundle, tmp_path_factory):
    """Writes need a key; one text query may wait to be encoded, and none finishes in time."""
    env = {
        "MS_API_KEY": KEY,
        "MS_QUERY_QUEUE_SIZE": "1",
        "MS_REQUEST_TIMEOUT_S": "0.001",
        "MS_EMBEDDING_CACHE_SIZE": "0",
        "MS_MAX_QUERY_BODY_BYTES": str(QUERY_BODY_LIMIT),
        "MS_MAX_BATCH_ITEMS": "2",
    }
    process = ServiceProcess(tiny_bundle, tmp_path_factory.mktemp("codes") / "data", env)
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def mismatched(tiny_bundle, tmp_path_factory):
    """A Qdrant server whose `items` collection measures Euclidean distance, which no bundle of ours fits: silent
    while the service starts (a service that finds such a collection at start-up refuses to start), answering
    after."""
    with QdrantRest() as qdrant:
        euclid = qm.VectorParams(size=8, distance=qm.Distance.EUCLID)
        qdrant.local.create_collection("items", vectors_config={"title": euclid})
        qdrant.hang()
        env = {"MS_QDRANT_URL": qdrant.url, "MS_QDRANT_TIMEOUT_S": "1"}
        process = ServiceProcess(tiny_bundle, tmp_path_factory.mktemp("mismatch") / "data", env)
        process.start(until="/healthz")
        qdrant.answer()
        yield process, qdrant
        process.stop()


@pytest.fixture(scope="module")
def answers(tight, mismatched, tiny_bundle, tmp_path_factory) -> dict[str, tuple[httpx.Response, str]]:
    """One answer per case, each with the code it must carry."""
    got: dict[str, tuple[httpx.Response, str]] = {}
    with tight.client() as anonymous, tight.client(Authorization=f"Bearer {KEY}") as writer:
        item = {"items": [{"id": "a", "title": "red shirt", "metadata": {"brand": "acme"}}]}
        assert writer.post("/index", json=item).status_code == 200
        json_header = {"Content-Type": "application/json"}
        got["empty body"] = writer.post("/index", content=b"", headers=json_header), "invalid_body"
        got["schema"] = anonymous.post("/similar", json={"id": "a", "k": 0}), "invalid_body"
        got["filter operator"] = (
            anonymous.post("/similar", json={"id": "a", "filter": {"n": {"gt": 1}}}),
            ("invalid_filter"),
        )
        got["filter key"] = anonymous.post("/similar", json={"id": "a", "filter": {"a.b": 1}}), "invalid_filter"
        got["form body"] = anonymous.post("/similar", content=b"id=a"), "unsupported_media_type"
        got["no key"] = anonymous.post("/index", json=item), "unauthorized"
        got["wrong key"] = anonymous.post("/index", json=item, headers={"Authorization": "Bearer nope"}), "forbidden"
        got["unknown id"] = anonymous.get("/items/nope"), "unknown_id"
        got["no route"] = anonymous.get("/nowhere"), "not_found"
        got["wrong method"] = anonymous.get("/index"), "method_not_allowed"
        got["streamed over the cap"] = (
            anonymous.post(
                "/similar", content=iter([b'{"text": "', b"x" * QUERY_BODY_LIMIT, b'"}']), headers=json_header
            ),
            "body_too_large",
        )
        three = {"items": [{"id": str(n), "title": "t"} for n in range(3)]}
        got["too many items"] = writer.post("/index", json=three), "limit_exceeded"
        got["swap without a rollout"] = writer.post("/admin/rollout/swap"), "rollout_conflict"
        got["encoder wait"] = anonymous.post("/similar", json={"text": "red shirt"}), "timed_out"
    got["queue full"] = overloaded(tight), "overloaded"

    service, qdrant = mismatched
    with service.client() as client:
        got["other distance"] = client.post("/similar", json={"id": "a"}), "store_mismatch"
        got["readiness"] = client.get("/readyz"), "not_ready"
        qdrant.hang()
        got["store silent"] = client.post("/similar", json={"id": "a"}), "store_unavailable"
        qdrant.answer()

    service = Service(Settings(bundle_dir=tiny_bundle, data_dir=tmp_path_factory.mktemp("internal") / "data"))

    def broken(item_id: str):
        raise RuntimeError("a bug")

    service.live.engine.get = broken
    with TestClient(create_app(service), raise_server_exceptions=False) as client, pytest.MonkeyPatch.context() as mp:
        got["bug"] = client.get("/items/a"), "internal"
        usage = shutil.disk_usage
        mp.setattr("metricsearch.service.store.edge.writes.shutil.disk_usage", lambda p: usage(p)._replace(free=0))
        got["disk full"] = client.post("/index", json={"items": [{"id": "b", "title": "t"}]}), "insufficient_storage"
    return got


def test_each_error_answer_carries_its_documented_code_and_status(answers):
    table = documented_codes()
    for case, (response, code) in answers.items():
        body = response.json()
        assert set(body) == {"detail", "code"}, (case, body)
        assert body["code"] == code, (case, body)
        assert response.status_code in table[code], (case, response.status_code, table[code])


def test_every_documented_code_is_produced(answers):
    assert set(documented_codes()) == {code for _, code in answers.values()}


def test_the_size_cap_refuses_from_content_length_with_its_code(tight):
    answer = raw_post(tight.url, "/index", f"Content-Type: application/json\r\nContent-Length: {64 * 2**20}\r\n")
    assert answer.startswith(b"HTTP/1.1 413") and b'"code":"body_too_large"' in answer, answer


def test_openapi_error_model_declares_the_code(tight):
    with tight.client() as client:
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert {"detail", "code"} <= set(schemas["ProblemDetail"]["required"])
    assert "code" in schemas["QueryError"]["required"]
