"""Spans cost nothing while tracing is off (one shared null context) and are recorded, nested, once it is on."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from metricsearch.core import spans


def test_spans_are_free_while_off_and_recorded_while_on():
    assert spans.span("encode") is spans.span("rerank", candidates=3)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans.enable(provider.get_tracer("test"))
    try:
        with spans.span("similar"), spans.span("rerank", candidates=3):
            pass
    finally:
        spans.enable(None)
    rerank, similar = exporter.get_finished_spans()
    assert (rerank.name, dict(rerank.attributes), rerank.parent.span_id) == (
        "rerank",
        {"candidates": 3},
        similar.context.span_id,
    )
    assert spans.span("after") is spans.span("encode")  # off again
