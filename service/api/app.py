"""The FastAPI application around a built runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from service.api import errors
from service.api.middleware import BodyLimitMiddleware, MetricsMiddleware
from service.api.routes import router
from service.runtime import Runtime


def create_app(runtime: Runtime) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime.batcher.start()
        try:
            yield
        finally:
            await runtime.batcher.stop()
            runtime.close()

    app = FastAPI(
        title="metricsearch",
        summary="More like this: item-to-item and text similarity search on learned text metrics",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    app.include_router(router)
    errors.install(app)
    app.add_middleware(MetricsMiddleware, metrics=runtime.metrics)
    app.add_middleware(BodyLimitMiddleware, max_bytes=runtime.settings.max_body_bytes)
    return app
