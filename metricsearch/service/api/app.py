"""The FastAPI application around a built runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from metricsearch.service.api import errors
from metricsearch.service.api.middleware import BodyLimitMiddleware, MetricsMiddleware
from metricsearch.service.api.routes import router
from metricsearch.service.runtime import Runtime


def app_from_environment() -> FastAPI:
    """The factory each worker process calls under `metricsearch serve --workers N`: its own runtime (encoder,
    batcher, caches) from the MS_ settings; the workers share only the Qdrant server."""
    from metricsearch.service.config import Settings
    from metricsearch.service.logs import configure_logging
    from metricsearch.service.runtime import build_runtime

    settings = Settings()
    configure_logging(settings.log_level)
    return create_app(build_runtime(settings))


def create_app(runtime: Runtime) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime.batcher.start()
        try:
            yield
        finally:
            live = app.state.runtime  # a model rollout may have swapped another in
            await live.rollout.aclose()
            await live.batcher.stop()
            live.close()

    app = FastAPI(
        title="metricsearch",
        summary="More like this: item-to-item and text similarity search on learned text metrics",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    runtime.rollout.on_swap(lambda swapped: setattr(app.state, "runtime", swapped))
    app.include_router(router)
    errors.install(app)
    app.add_middleware(MetricsMiddleware, metrics=runtime.metrics)
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=runtime.settings.max_body_bytes,
        max_query_bytes=runtime.settings.max_query_body_bytes,
    )
    if runtime.settings.cors_origins:
        # Closed unless origins are listed: a browser page elsewhere may then call the API, never with cookies.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=runtime.settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
    return app
