"""Pure ASGI middleware (cheaper than BaseHTTPMiddleware on the hot path): request ids, and the body-size cap
enforced before any parsing."""

from __future__ import annotations

import re
import uuid

import orjson
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from metricsearch.service.logs import request_id

REQUEST_ID_HEADER = b"x-request-id"
# What a proxy's or client's id looks like (UUIDs, hex, base64, `Root=1-...`); anything else, or longer, is replaced
# so a client cannot write control characters or megabytes into every log line and answer.
_SANE_REQUEST_ID = re.compile(rb"[A-Za-z0-9._~:+=@/-]{1,128}")


class RequestIdMiddleware:
    """Each request's id, the client's `X-Request-ID` when it is sane else a generated one: in the answer's
    `X-Request-ID` and, through `logs.request_id`, in every log line written while handling it (api/app.py puts it
    outermost)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        given = next((value for name, value in scope["headers"] if name == REQUEST_ID_HEADER), None)
        own = given if given is not None and _SANE_REQUEST_ID.fullmatch(given) else uuid.uuid4().hex.encode()
        token = request_id.set(own.decode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), (REQUEST_ID_HEADER, own)]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id.reset(token)


def _over(max_bytes: int, setting: str, advice: str) -> str:
    return f"request body over {max_bytes} bytes ({setting}): {advice}"


class BodyLimitMiddleware:
    """413 for a body over its route's cap, from Content-Length when given, else while streaming. `/similar` and
    `/similar/batch` have their own, smaller caps: reads are often open, and a query parsed on the event loop must
    stay cheap however it is padded (500,000 filter keys in 7.9 MB took seconds; a 27 MB batch of large filters
    held every other request for 0.46 s under the general cap)."""

    def __init__(self, app: ASGIApp, max_bytes: int, max_query_bytes: int, max_batch_query_bytes: int) -> None:
        self.app = app
        self.limit = (max_bytes, _over(max_bytes, "MS_MAX_BODY_BYTES", "split it into smaller requests"))
        self.query_limits = {
            "/similar": (max_query_bytes, _over(max_query_bytes, "MS_MAX_QUERY_BODY_BYTES", "shorten the query")),
            "/similar/batch": (
                max_batch_query_bytes,
                _over(max_batch_query_bytes, "MS_MAX_BATCH_QUERY_BODY_BYTES", "split it into smaller batches"),
            ),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        max_bytes, detail = self.query_limits.get(scope["path"], self.limit)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            return await self._refuse(send, detail)
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > max_bytes:
                # An HTTPException, which FastAPI's body parsing re-raises (any other exception there becomes a 400
                # "There was an error parsing the body": chunked bodies over the cap got that).
                raise HTTPException(413, detail)
            return message

        await self.app(scope, limited_receive, send)

    async def _refuse(self, send: Send, detail: str) -> None:
        """Answer, then close the connection rather than read and discard the declared body: draining 8 parallel
        7.9 MB bodies kept the event loop busy enough to delay /healthz by 50-150 ms."""
        body = orjson.dumps({"detail": detail, "code": "body_too_large"})
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
