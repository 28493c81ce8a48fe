"""Pure ASGI middleware (cheaper than BaseHTTPMiddleware on the hot path): request latency metrics, and the
body-size cap enforced before any parsing."""

from __future__ import annotations

import time

import orjson
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from metricsearch.service.metrics import Metrics


class BodyLimitMiddleware:
    """413 for a body over `max_bytes`, from Content-Length when given, else while streaming."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.detail = f"request body over {max_bytes} bytes (MS_MAX_BODY_BYTES): split it into smaller requests"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._refuse(send)
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                # An HTTPException, which FastAPI's body parsing re-raises (any other exception there becomes a 400
                # "There was an error parsing the body": chunked bodies over the cap got that).
                raise HTTPException(413, self.detail)
            return message

        await self.app(scope, limited_receive, send)

    async def _refuse(self, send: Send) -> None:
        body = orjson.dumps({"detail": self.detail})
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


class MetricsMiddleware:
    """Latency histogram by route template (not raw path, so ids do not explode the label set)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = 500

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            self.metrics.request_seconds.labels(template, scope["method"], str(status)).observe(
                time.perf_counter() - started
            )
            if status >= 400:
                self.metrics.rejected.labels(str(status)).inc()
