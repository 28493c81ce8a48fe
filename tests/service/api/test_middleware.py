"""Request ids over real HTTP: the service as built by create_app, served by uvicorn on 127.0.0.1 in this process
(so routes that log can be added to it), its log lines read through the service's own JSON formatter."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import httpx
import orjson
import pytest

from metricsearch.service.api.app import create_app
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service
from metricsearch.service.logs import JsonFormatter
from tests.service.serving import serving

log = logging.getLogger("tests.request_id")


@pytest.fixture(scope="module")
def url(tiny_bundle, tmp_path_factory) -> Iterator[str]:
    app = create_app(Service(Settings(bundle_dir=tiny_bundle, data_dir=tmp_path_factory.mktemp("ids"))))

    @app.get("/logs-on-the-loop")
    async def on_the_loop() -> dict:
        log.info("on the loop")
        return {}

    @app.get("/logs-in-a-thread")
    def in_a_thread() -> dict:
        log.info("in a thread")
        return {}

    with serving(app) as base:
        yield base


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield stream
    root.removeHandler(handler)
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines()]


def test_a_sane_request_id_is_echoed(url):
    given = "0af7651916cd43dd8448eb211c80319c"
    assert httpx.get(f"{url}/healthz", headers={"X-Request-ID": given}).headers["x-request-id"] == given
    assert (
        httpx.post(f"{url}/similar", json={"id": "none"}, headers={"X-Request-ID": "abc-1"}).headers["x-request-id"]
        == "abc-1"
    )


@pytest.mark.parametrize(
    "hostile",
    [b"x" * 129, b"x" * 60_000, b"line\tbreak", b"two words", b"", b"caf\xc3\xa9", b'"}, {"level": "error'],
    ids=["long", "huge", "tab", "space", "empty", "non-ascii", "json-injection"],
)
def test_a_missing_or_hostile_request_id_is_replaced_by_a_generated_one(url, hostile):
    sent = httpx.get(f"{url}/healthz", headers=[(b"X-Request-ID", hostile)])
    returned = sent.headers["x-request-id"]
    assert returned.encode() != hostile and len(returned) == 32 and int(returned, 16) >= 0
    unsent = [httpx.get(f"{url}/healthz").headers["x-request-id"] for _ in range(2)]
    assert unsent[0] != unsent[1]  # generated per request


@pytest.mark.parametrize("control", [b"del\x7fchar", b"\x1b[31mred"])
def test_control_characters_in_a_request_id_are_refused_before_the_app(url, log_lines, control):
    response = httpx.get(f"{url}/logs-on-the-loop", headers=[(b"X-Request-ID", control)])
    assert response.status_code == 400  # by uvicorn's HTTP parser: such an id never reaches a log line
    assert not [line for line in lines(log_lines) if line["logger"] == log.name]


@pytest.mark.parametrize("path", ["/logs-on-the-loop", "/logs-in-a-thread"])
def test_a_log_line_written_while_handling_a_request_carries_its_id(url, log_lines, path):
    httpx.get(f"{url}{path}", headers={"X-Request-ID": "req-1"})
    generated = httpx.get(f"{url}{path}").headers["x-request-id"]
    own = [line for line in lines(log_lines) if line["logger"] == log.name]
    assert [line["request_id"] for line in own] == ["req-1", generated]
