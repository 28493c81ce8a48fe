"""OpenTelemetry tracing: FastAPI's instrumentation for each request's span, and our own spans inside it
(core/spans.py: tokenize, encode, store.query, rerank, serialise), so a slow /similar can be followed from the
ingress through encoder, store and rerank. Off unless OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) is set:
then neither the SDK nor the instrumentation is imported, and our spans are a shared null context."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI

from metricsearch.core import spans
from metricsearch.service.config import TracingSettings

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider


def install_tracing(app: FastAPI) -> None:
    """When OpenTelemetry's variables ask for export: an SDK provider sending batches over OTLP/HTTP, traced with."""
    if not TracingSettings().enabled:
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "metricsearch"}))
    provider = TracerProvider(resource=resource)  # OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # OTEL_BSP_*, OTEL_EXPORTER_OTLP_*
    trace_with(app, provider)


def trace_with(app: FastAPI, provider: TracerProvider) -> None:
    """A server span per request on `app` (named by its route template; OTEL_PYTHON_FASTAPI_EXCLUDED_URLS leaves
    out probes), and our spans inside it. The ASGI send/receive spans are left out: they would outnumber ours."""
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider, exclude_spans=["receive", "send"])
    spans.enable(provider.get_tracer("metricsearch"))
