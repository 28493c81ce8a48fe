"""Read deadlines of the HTTP server over raw sockets (a subprocess service, tiny bundle, 1 s deadlines): a client
that sends half its headers, or part of a declared body, is dropped once its deadline passes; a slow client
within its deadlines is served; nothing half-sent is written."""

from __future__ import annotations

import json
import socket
import time

import pytest

from metricsearch.service.process import ServiceProcess

DEADLINE_S = 1.0


@pytest.fixture(scope="module")
def service(tiny_bundle, tmp_path_factory):
    env = {"MS_HEADER_TIMEOUT_S": str(DEADLINE_S), "MS_BODY_TIMEOUT_S": str(DEADLINE_S)}
    process = ServiceProcess(tiny_bundle, tmp_path_factory.mktemp("deadlines") / "data", env)
    process.start()
    yield process
    process.stop()


def connect(service) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", service.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def seconds_until_closed(sock: socket.socket, started: float) -> float:
    """How long after `started` the server closed the connection (reading whatever it answered first)."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def request(path: str, body: bytes = b"", method: str = "POST") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def items(service) -> int:
    with service.client() as client:
        return client.get("/readyz").json()["items"]


def assert_dropped_on_time(elapsed: float) -> None:
    assert DEADLINE_S * 0.9 <= elapsed < DEADLINE_S + 4, elapsed


def test_a_connection_that_sends_nothing_is_dropped(service):
    with connect(service) as sock:
        assert_dropped_on_time(seconds_until_closed(sock, time.monotonic()))


def test_half_sent_headers_are_dropped(service):
    with connect(service) as sock:
        started = time.monotonic()
        sock.sendall(b"POST /index HTTP/1.1\r\nHost: x\r\nContent-Ty")
        assert_dropped_on_time(seconds_until_closed(sock, started))
    with service.client() as client:
        assert client.get("/healthz").status_code == 200


def test_2_of_1000_declared_body_bytes_are_dropped_and_nothing_is_written(service):
    before = items(service)
    body = json.dumps({"items": [{"id": "slow", "title": "t", "description": "x" * 900}]}).encode()
    with connect(service) as sock:
        sock.sendall(request("/index", body)[: -len(body) + 2])
        started = time.monotonic()
        assert_dropped_on_time(seconds_until_closed(sock, started))
    assert items(service) == before
    assert "Traceback" not in service.log()


def test_the_next_request_on_a_kept_alive_connection_has_its_own_deadline(service):
    with connect(service) as sock:
        sock.sendall(request("/healthz", method="GET"))
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        time.sleep(DEADLINE_S * 1.5)  # idle between requests: the keep-alive timeout's business, not a deadline's
        started = time.monotonic()
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")
        assert_dropped_on_time(seconds_until_closed(sock, started))


def test_a_slow_client_within_its_deadlines_is_served(service):
    body = json.dumps({"items": [{"id": "steady", "title": "steady client"}]}).encode()
    whole = request("/index", body)
    split = whole.index(b"\r\n\r\n") + 4
    with connect(service) as sock:
        for piece in (whole[:20], whole[20:split], body[:10], body[10:]):
            sock.sendall(piece)
            time.sleep(DEADLINE_S * 0.4)  # each deadline spans pieces: headers in 0.8 s, body in 0.8 s
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    with service.client() as client:
        assert client.get("/items/steady").status_code == 200
