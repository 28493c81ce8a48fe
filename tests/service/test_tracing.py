"""Tracing: a /similar by text, over real HTTP, yields one trace (continuing the caller's `traceparent`) holding the
server span and our named spans; with OTEL_EXPORTER_OTLP_ENDPOINT set, `metricsearch serve` sends them over
OTLP/HTTP to a receiver; unset, nothing of the SDK is loaded."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from metricsearch.core import spans
from metricsearch.service.api.app import create_app
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service
from metricsearch.service.process import ServiceProcess
from metricsearch.service.tracing import trace_with
from tests.service.serving import serving

ITEMS = [
    {"id": "a", "title": "red cotton shirt", "description": "a soft red shirt"},
    {"id": "b", "title": "leather boots", "description": "brown boots for winter"},
]
OURS = {"tokenize", "encode", "store.query", "rerank", "serialise"}
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture(scope="module")
def traced(tiny_bundle, tmp_path_factory) -> Iterator[tuple[str, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = create_app(Service(Settings(bundle_dir=tiny_bundle, data_dir=tmp_path_factory.mktemp("traced"))))
    trace_with(app, provider)
    try:
        with serving(app) as url:
            assert httpx.post(f"{url}/index", json={"items": ITEMS}).status_code == 200
            yield url, exporter
    finally:
        spans.enable(None)


def test_a_similar_request_is_one_trace_through_encoder_store_rerank_and_serialisation(traced):
    url, exporter = traced
    exporter.clear()
    query = {"text": "a shirt in red", "k": 1}
    response = httpx.post(f"{url}/similar", json=query, headers={"traceparent": TRACEPARENT})
    assert response.status_code == 200 and response.json()["results"][0]["id"] == "a"
    finished = exporter.get_finished_spans()
    by_name = {s.name: s for s in finished}
    assert {"POST /similar", *OURS} <= set(by_name)
    assert {format(s.context.trace_id, "032x") for s in finished} == {TRACE_ID}  # the caller's trace, continued
    server = by_name["POST /similar"]
    parent = {s.context.span_id: s.parent.span_id for s in finished if s.parent}
    for name in OURS - {"tokenize"}:
        assert parent[by_name[name].context.span_id] == server.context.span_id, name
    # Tokenizing runs in the batcher's encoder thread, still inside the query's own encode span.
    assert parent[by_name["tokenize"].context.span_id] == by_name["encode"].context.span_id
    assert by_name["encode"].attributes["texts"] >= 1 and by_name["store.query"].attributes["limit"] >= 1


def test_a_similar_by_id_has_no_encoder_spans(traced):
    url, exporter = traced
    exporter.clear()
    assert httpx.post(f"{url}/similar", json={"id": "a"}).status_code == 200
    names = {s.name for s in exporter.get_finished_spans()}
    assert {"POST /similar", "store.query", "rerank", "serialise"} <= names and not {"tokenize", "encode"} & names


class _Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: the span names and service names of each export request."""

    received: ClassVar[list[tuple[str, str]]] = []

    def do_POST(self) -> None:
        request = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
        for resource_spans in request.resource_spans:
            service = next(a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name")
            for scope_spans in resource_spans.scope_spans:
                self.received.extend((service, s.name) for s in scope_spans.spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_serve_exports_over_otlp_when_the_endpoint_is_set(tiny_bundle, tmp_path):
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_port}", "OTEL_BSP_SCHEDULE_DELAY": "50"}
    service = ServiceProcess(tiny_bundle, tmp_path / "data", env)
    service.start()
    try:
        with service.client() as client:
            assert client.post("/index", json={"items": ITEMS}).status_code == 200
            assert client.post("/similar", json={"text": "winter boots"}).status_code == 200
        deadline = time.monotonic() + 20
        while not {("metricsearch", n) for n in OURS} <= set(_Receiver.received) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert {("metricsearch", n) for n in {"POST /similar", *OURS}} <= set(_Receiver.received)
    finally:
        service.stop()
        receiver.shutdown()


def test_without_an_endpoint_no_sdk_is_loaded(tiny_bundle, tmp_path):
    code = (
        "import sys; from metricsearch.service.api.app import create_app; "
        "from metricsearch.service.config import Settings; from metricsearch.service.lifecycle import Service; "
        f"create_app(Service(Settings(bundle_dir={str(tiny_bundle)!r}, data_dir={str(tmp_path)!r}))); "
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.instrumentation'))))"
    )
    env = {"PATH": "", "PYTHONPATH": ":".join(sys.path), "OTEL_TRACES_EXPORTER": "otlp"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
