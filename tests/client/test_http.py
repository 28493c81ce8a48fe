"""The Python client: every call against a real service on 127.0.0.1 (subprocess, tiny bundle), typed on the API's
models; its retry schedule against scripted answers (httpx's MockTransport stands in for a service that answers
429/503 on cue); `metricsearch index --url` riding out a service that is not up yet."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
from pydantic import ValidationError

from metricsearch.client import AsyncClient, Client, ServiceError
from metricsearch.client.http import _retry_after_s
from metricsearch.core.schemas import ItemIn, QueryFailure, SimilarRequest, SimilarResponse
from metricsearch.service.process import ServiceProcess

KEY = "client-key"
ITEMS = [
    ItemIn(id="a", title="red cotton shirt", description="a soft red shirt", metadata={"brand": "acme"}),
    ItemIn(id="b", title="blue cotton shirt", description="a soft blue shirt", metadata={"brand": "acme"}),
    ItemIn(id="c", title="leather boots", description="brown boots", metadata={"brand": "boota"}),
    ItemIn(id="d?1 x", title="wool hat", metadata={"brand": "hatco"}),
]


@pytest.fixture(scope="module")
def service(tiny_bundle, tmp_path_factory):
    process = ServiceProcess(tiny_bundle, tmp_path_factory.mktemp("client") / "data", {"MS_API_KEY": KEY})
    process.start()
    yield process
    process.stop()


def test_every_call_against_a_real_service(service):
    with Client(service.url, KEY) as client:
        assert client.index(ITEMS).indexed == len(ITEMS)
        assert client.index([i.model_dump() for i in ITEMS]).unchanged == len(ITEMS)  # a repeat changes nothing
        answer = client.similar(id="a", k=2)
        assert isinstance(answer, SimilarResponse) and answer.model == "tiny-bert"
        assert len(answer.results) == 2 and "a" not in {r.id for r in answer.results}
        typed = client.similar(SimilarRequest(positive_ids=["a", "b"], k=2, group_by="brand"))
        brands = [r.metadata["brand"] for r in typed.results]
        assert len(brands) == 2 and len(set(brands)) == 2
        batch = client.similar_batch([{"text": "boots", "k": 1}, {"id": "nope"}])
        assert batch.answers[0].results[0].id == "c"
        assert isinstance(batch.answers[1], QueryFailure)
        assert (batch.answers[1].error.status, batch.answers[1].error.code) == (404, "unknown_id")
        assert client.get_item("d?1 x").title == "wool hat"  # quoted as one path segment
        assert client.model()["name"] == "tiny-bert" and client.ready()["items"] == len(ITEMS)
        assert client.delete(ids=["b", "zzz"]) == 1
        assert client.delete(filter={"brand": "boota"}) == 1
        client.delete_item("d?1 x")
        with pytest.raises(ServiceError) as missing:
            client.get_item("d?1 x")
        assert (missing.value.status, missing.value.code) == (404, "unknown_id") and "'d?1 x'" in missing.value.detail
        with pytest.raises(ValidationError):  # checked by the same model before anything is sent
            client.similar(id="a", k=0)


def test_a_wrong_key_is_raised_at_once(service):
    with Client(service.url, "wrong") as client, pytest.raises(ServiceError) as refused:
        client.index(ITEMS[:1])
    assert (refused.value.status, refused.value.code) == (403, "forbidden")


def test_async_client_against_a_real_service(service):
    async def run():
        async with AsyncClient(service.url, KEY) as client:
            await client.index(ITEMS[:3])
            answers = await asyncio.gather(*(client.similar(id=i, k=1) for i in ("a", "c")))
            assert all(len(a.results) == 1 for a in answers)
            assert (await client.similar_batch([{"id": "a", "k": 1}])).answers[0].results
            assert await client.delete(ids=["a"]) == 1
            with pytest.raises(ServiceError) as missing:
                await client.get_item("a")
            return missing.value.status, missing.value.code

    assert asyncio.run(run()) == (404, "unknown_id")


def scripted(*answers, code: str | None = None):
    """A transport answering each request with the next of `answers` (a status and headers, or an exception; error
    bodies carry `code` when one is given), and
    the list of the requests it got."""
    seen: list[httpx.Request] = []
    queue = list(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        status, headers = answer
        body = {"indexed": 1, "unchanged": 0} if status == 200 else {"detail": f"status {status}"}
        if status != 200 and code is not None:
            body["code"] = code
        return httpx.Response(status, json=body, headers=headers)

    return httpx.MockTransport(handle), seen


def test_retries_429_and_503_after_their_retry_after_and_nothing_else():
    transport, seen = scripted((429, {"Retry-After": "0.3"}), (503, {"Retry-After": "0"}), (200, {}))
    started = time.monotonic()
    with Client("http://svc", transport=transport) as client:
        assert client.index(ITEMS[:1]).indexed == 1
    assert len(seen) == 3
    assert time.monotonic() - started >= 0.3
    for status in (400, 404, 413, 422, 500):
        transport, seen = scripted((status, {"Retry-After": "0"}))
        with Client("http://svc", transport=transport) as client, pytest.raises(ServiceError) as failed:
            client.index(ITEMS[:1])
        assert (len(seen), failed.value.status, failed.value.detail) == (1, status, f"status {status}")


@pytest.mark.parametrize(
    ("status", "code", "retried"),
    [
        (503, "not_ready", True),
        (503, "store_unavailable", True),
        (503, "timed_out", True),
        (429, "overloaded", True),
        (409, "store_mismatch", False),  # another bundle's store: no retry will fix it
        (503, "internal", False),  # a code the client does not retry, whatever the status
    ],
)
def test_retries_follow_the_error_code(status, code, retried):
    transport, seen = scripted((status, {"Retry-After": "0"}), (200, {}), code=code)
    with Client("http://svc", transport=transport) as client:
        if retried:
            assert client.index(ITEMS[:1]).indexed == 1
        else:
            with pytest.raises(ServiceError) as failed:
                client.index(ITEMS[:1])
            assert (failed.value.status, failed.value.code) == (status, code)
            assert str(failed.value) == f"{status} {code}: status {status}"
    assert len(seen) == (2 if retried else 1)


def test_gives_up_after_its_retries_or_its_patience():
    transport, seen = scripted(*[(503, {"Retry-After": "0"})] * 3)
    with Client("http://svc", transport=transport, retries=2) as client, pytest.raises(ServiceError) as failed:
        client.index(ITEMS[:1])
    assert len(seen) == 3 and failed.value.status == 503
    transport, seen = scripted((429, {"Retry-After": "100"}))
    with Client("http://svc", transport=transport, patience_s=10) as client, pytest.raises(ServiceError) as failed:
        client.index(ITEMS[:1])
    assert len(seen) == 1 and failed.value.retry_after_s == 100


def test_a_request_without_an_answer_is_sent_again():
    transport, seen = scripted(httpx.ConnectError("refused"), (200, {}))
    with Client("http://svc", transport=transport) as client:
        assert client.index(ITEMS[:1]).indexed == 1
    assert len(seen) == 2
    assert seen[0].content == seen[1].content  # the same upsert, which lands once


def test_retry_after_as_seconds_or_an_http_date():
    assert _retry_after_s("2") == 2.0
    assert _retry_after_s(None) is None and _retry_after_s("soon") is None
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 < _retry_after_s(later) <= 30


def run_index(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "metricsearch.cli", "index", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_index_through_a_service_rides_out_its_start_and_resumes(tiny_bundle, tmp_path):
    catalog = tmp_path / "c.csv"
    catalog.write_text("id,title\na,red shirt\nb,blue shirt\nc,boots\n")
    service = ServiceProcess(tiny_bundle, tmp_path / "data", {"MS_API_KEY": KEY})
    loading = run_index("--catalog", str(catalog), "--url", service.url, "--api-key", KEY, "--batch", "1")
    time.sleep(1.0)  # the load meets a refused connection first
    service.start()
    try:
        out, err = loading.communicate(timeout=120)
        assert loading.returncode == 0, err
        assert "indexed 3, unchanged 0 of 3 items" in out
        resumed = run_index("--catalog", str(catalog), "--url", service.url, "--api-key", KEY, "--start", "2")
        out, err = resumed.communicate(timeout=120)
        assert resumed.returncode == 0 and "unchanged 1 of 1 items" in out, err
    finally:
        service.stop()
    gone = run_index("--catalog", str(catalog), "--url", service.url, "--patience", "1", "--batch", "2")
    _, err = gone.communicate(timeout=60)
    assert gone.returncode == 1
    assert "no answer from" in err and "The first 0 items are loaded" in err and "--start 0" in err
