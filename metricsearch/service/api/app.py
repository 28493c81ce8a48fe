"""The FastAPI application around a started service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.types import Receive, Scope, Send

from metricsearch.service.api import deps, errors
from metricsearch.service.api.middleware import BodyLimitMiddleware, RequestIdMiddleware
from metricsearch.service.api.routes import metrics_router, router
from metricsearch.service.lifecycle import Service
from metricsearch.service.tracing import install_tracing


def app_from_environment() -> FastAPI:
    """The factory each worker process calls under `metricsearch serve --workers N`: its own service (encoder,
    batcher, caches) from the MS_ settings; the workers share only the Qdrant server."""
    from metricsearch.service.config import Settings
    from metricsearch.service.logs import configure_logging

    settings = Settings()
    configure_logging(settings.log_level)
    return create_app(Service(settings))


class _App(FastAPI):
    """FastAPI with request ids outside Starlette's outermost (error) middleware, which add_middleware cannot reach,
    so a 500's answer and its "unhandled error" line carry the id too. Around the call, not in the middleware stack,
    whose shape OpenTelemetry's instrumentation rebuilds."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._with_request_id = RequestIdMiddleware(super().__call__)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._with_request_id(scope, receive, send)


def create_app(service: Service) -> FastAPI:
    settings = service.settings

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.start()
        try:
            if settings.metrics_port is None:
                yield
            else:
                with service.metrics.served_on(settings.host, settings.metrics_port):
                    yield
        finally:
            await service.aclose()

    app = _App(
        title="metricsearch",
        summary="More like this: item-to-item and text similarity search on learned text metrics",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.service = service
    app.include_router(router)
    if settings.metrics_port is None:  # else served on its own port (lifespan above), unknown here
        app.include_router(metrics_router)
    errors.install(app)
    deps.declare_open_routes(app)
    service.metrics.http().instrument(app)
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        max_query_bytes=settings.max_query_body_bytes,
        max_batch_query_bytes=settings.max_batch_query_body_bytes,
    )
    if settings.cors_origins:
        # Closed unless origins are listed: a browser page elsewhere may then call the API, never with cookies.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
            expose_headers=["X-Request-ID"],
        )
    install_tracing(app)
    return app
