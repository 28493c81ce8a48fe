"""The one place where domain errors become HTTP status codes and error codes: every error body is
`{"detail": "...", "code": "..."}`, a message a user can act on (never a stack trace) and a code a program can branch
on (docs/api.md, "Error codes", lists them)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from metricsearch.core import errors
from metricsearch.service.api.body import CONTENT_TYPE_ERROR

log = logging.getLogger(__name__)

# First match wins: a subclass comes before its base.
ANSWERS: dict[type[errors.MetricSearchError], tuple[int, str]] = {
    errors.InvalidInputError: (400, "invalid_body"),
    errors.AuthMissingError: (401, "unauthorized"),
    errors.AuthForbiddenError: (403, "forbidden"),
    errors.NotFoundError: (404, "unknown_id"),
    errors.StoreMismatchError: (409, "store_mismatch"),
    errors.RolloutError: (409, "rollout_conflict"),
    errors.PayloadTooLargeError: (413, "limit_exceeded"),
    errors.OverloadedError: (429, "overloaded"),
    errors.StorageFullError: (507, "insufficient_storage"),
    errors.NotReadyError: (503, "not_ready"),
    errors.StoreUnavailableError: (503, "store_unavailable"),
    errors.TimedOutError: (503, "timed_out"),
    errors.BundleError: (503, "not_ready"),
}
INTERNAL = (500, "internal")
HTTP_CODES = {400: "invalid_body", 404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}
"""Errors Starlette and FastAPI raise themselves: an unknown route or method, a body past the size cap while it
streams in (middleware.py), a body they cannot read."""


def answer_of(exc: errors.MetricSearchError) -> tuple[int, str]:
    """The HTTP status and error code of a domain error."""
    return next((answer for kind, answer in ANSWERS.items() if isinstance(exc, kind)), INTERNAL)


def problem(status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    # A detail may quote what the client sent (a metadata key in an error's location): never let a lone surrogate
    # in it turn the answer into an encoding error.
    detail = detail.encode("utf-8", "backslashreplace").decode("utf-8")
    return JSONResponse({"detail": detail, "code": code}, status_code=status, headers=headers)


def _location(loc: tuple) -> str:
    return ".".join(str(part) for part in loc if part != "body") or "body"


SEND_JSON = "send a JSON object with Content-Type: application/json"


def _parse_error(problem: dict, body: object) -> str:
    """Invalid JSON: what the parser found and where (line, column and character offset)."""
    reason = (problem.get("ctx") or {}).get("error", "invalid JSON")
    position = next((part for part in problem.get("loc", ())[1:] if isinstance(part, int)), None)
    where = ""
    if position is not None:
        where = f" at character {position}"
        if isinstance(body, str):
            line = body.count("\n", 0, position) + 1
            column = position - body.rfind("\n", 0, position)
            where = f" at line {line}, column {column} (character {position})"
    what = reason if reason.startswith("not valid") else f"not valid JSON: {reason}"
    return f"request body is {what}{where}: {SEND_JSON}"


def describe_validation(exc: RequestValidationError) -> tuple[int, str, str]:
    """Status, error code and detail of a body that failed validation; the code is invalid_filter when the first
    problem named is in the filter."""
    problems = exc.errors()
    content_type = next((p for p in problems if p.get("type") == CONTENT_TYPE_ERROR), None)
    if content_type is not None:
        given = f"got {content_type['input']!r}" if content_type.get("input") else "none was given"
        return 415, "unsupported_media_type", f"the body must be JSON: send Content-Type: application/json ({given})"
    invalid = next((p for p in problems if p.get("type") == "json_invalid"), None)
    if invalid is not None:
        return 400, "invalid_body", _parse_error(invalid, exc.body)
    if any(p.get("type") == "missing" and tuple(p.get("loc", ())) == ("body",) for p in problems):
        return 400, "invalid_body", f"request body is empty: {SEND_JSON}"
    parts = []
    for p in problems[:10]:
        message = p.get("msg", "invalid").removeprefix("Value error, ")
        if p.get("type") == "extra_forbidden":
            message = "unknown field: remove it (see /docs for the fields this endpoint takes)"
        parts.append(f"{_location(tuple(p.get('loc', ())))}: {message}")
    more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
    first = [part for part in problems[0].get("loc", ()) if part != "body"] if problems else []
    code = "invalid_filter" if first[:1] == ["filter"] else "invalid_body"
    return 422, code, "; ".join(parts) + more


def install(app: FastAPI) -> None:
    @app.exception_handler(errors.MetricSearchError)
    async def _domain(request: Request, exc: errors.MetricSearchError) -> JSONResponse:
        status, code = answer_of(exc)
        # Overloaded, or Qdrant down or restarting: a retry soon may get through (the service reconnects by itself).
        retry = isinstance(exc, errors.OverloadedError | errors.TimedOutError | errors.StoreUnavailableError)
        headers = {"Retry-After": str(exc.retry_after_s)} if retry else None
        if status == 401:
            headers = {"WWW-Authenticate": "Bearer"}
        return problem(status, code, str(exc), headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return problem(*describe_validation(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:
            # The router lists only the first route matching the path; Allow must list every route's methods.
            paths = app.openapi()["paths"]
            allowed = next((ops for path, ops in paths.items() if compile_path(path)[0].match(request.url.path)), {})
            headers = {"Allow": ", ".join(sorted(m.upper() for m in allowed))}
        code = HTTP_CODES.get(exc.status_code, "internal" if exc.status_code >= 500 else "invalid_body")
        return problem(exc.status_code, code, str(exc.detail), headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", extra={"path": request.url.path})
        return problem(*INTERNAL, "internal error: the service log has the details")
