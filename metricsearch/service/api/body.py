"""JSON request bodies with errors that say what to fix: the content type a body must be sent with, and where
invalid JSON, invalid UTF-8 or too deep nesting starts. Strings with lone surrogates (valid JSON escapes, not valid
Unicode) parse, so that the schema refuses them naming their field."""

from __future__ import annotations

import email.message
import json
from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

CONTENT_TYPE_ERROR = "content_type"
"""The error type describe_validation (errors.py) answers with 415."""


def is_json(content_type: str | None) -> bool:
    """application/json or any application/*+json, parameters allowed (FastAPI's own rule)."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def parse_json(body: bytes) -> Any:
    """The body as Python values, the standard library's way (it keeps integers exact at any size, where orjson
    turns those past 64 bits into floats), or a JSONDecodeError whose position is a character offset in the body."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        valid = len(body[: exc.start].decode("utf-8"))
        raise json.JSONDecodeError(
            f"not valid UTF-8 (byte 0x{body[exc.start]:02x} at offset {exc.start})",
            body.decode("utf-8", "replace"),
            valid,
        ) from None
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deep", text, _depth_error_position(body)) from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise json.JSONDecodeError(f"a number too long to read ({str(exc).split(':')[0]})", text, 0) from None


def _depth_error_position(body: bytes) -> int:
    """Where the nesting passes orjson's depth limit (1024, about the standard library's); 0 where it does not."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if exc.msg.startswith("depth limit"):
            return exc.pos
    return 0


class JSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class JSONRoute(APIRoute):
    """A route whose body must be sent as JSON (415 otherwise, a missing Content-Type included: `curl -d` sends a
    form type), parsed by parse_json. FastAPI's documented way to customise request parsing."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def handle(request: Request) -> Response:
            request = JSONRequest(request.scope, request.receive)
            try:
                body = await request.body()
            except ClientDisconnect:
                raise HTTPException(400, "the client closed the connection before sending the whole body") from None
            content_type = request.headers.get("content-type")
            if body and not is_json(content_type):
                raise RequestValidationError(
                    [{"type": CONTENT_TYPE_ERROR, "loc": ("header", "content-type"), "msg": "", "input": content_type}]
                )
            return await handler(request)

        return handle
