"""Typed dependencies of the routes: the service started with the app and the runtime it serves now, and the API
keys, read through a declared security scheme (bearerAuth) so /openapi.json and /docs show which routes take a key
and generated clients send it. Each is `async def`: FastAPI runs a plain `def` dependency in a worker thread, a
thread hop per dependency and request for an attribute read or a key comparison."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import SecretStr

from metricsearch.core.errors import AuthForbiddenError, AuthMissingError
from metricsearch.service.lifecycle import Service
from metricsearch.service.runtime import Runtime


async def get_service(request: Request) -> Service:
    return request.app.state.service


async def get_runtime(request: Request) -> Runtime:
    """The live runtime, read once per request: a model rollout's swap serves the next request from another."""
    return request.app.state.service.live


ServiceDep = Annotated[Service, Depends(get_service)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
# auto_error=False: a missing key is ours to refuse (401 with WWW-Authenticate, and only where a key is set). Two
# schemes, as there are two keys: /docs asks for each, and the document can say which one a route takes.
write_bearer = HTTPBearer(auto_error=False, scheme_name="bearerAuth", description="MS_API_KEY: writes (it reads too)")
read_bearer = HTTPBearer(
    auto_error=False, scheme_name="readBearerAuth", description="MS_READ_API_KEY, or the write key: reads"
)
WriteCredentials = Annotated[HTTPAuthorizationCredentials | None, Depends(write_bearer)]
ReadCredentials = Annotated[HTTPAuthorizationCredentials | None, Depends(read_bearer)]


def _check_key(accepted: list[SecretStr], credentials: HTTPAuthorizationCredentials | None, what: str) -> None:
    """Constant-time comparison against every accepted key; the key is never echoed."""
    if credentials is None:
        raise AuthMissingError(f"{what} need an API key: send 'Authorization: Bearer <key>'")
    given = credentials.credentials.encode()
    matches = [hmac.compare_digest(given, key.get_secret_value().encode()) for key in accepted]
    if not any(matches):
        raise AuthForbiddenError(f"the API key given is not valid for {what}")


async def require_write_key(service: ServiceDep, credentials: WriteCredentials) -> None:
    if service.settings.api_key is not None:
        _check_key([service.settings.api_key], credentials, "writes")


async def require_read_key(service: ServiceDep, credentials: ReadCredentials) -> None:
    """With a read key set, reads take it or the write key."""
    settings = service.settings
    if settings.read_api_key is not None:
        _check_key([k for k in (settings.read_api_key, settings.api_key) if k is not None], credentials, "reads")


def declare_open_routes(app: FastAPI) -> None:
    """The OpenAPI document states a scheme as optional (`{}` beside it) where its key is unset: those routes are
    open then, and a generated client or a fuzzer need send no key; where a key is set it stays required."""
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            settings = app.state.service.settings
            keys = {"bearerAuth": settings.api_key, "readBearerAuth": settings.read_api_key}
            unset = {scheme for scheme, key in keys.items() if key is None}
            for operations in build()["paths"].values():
                for operation in operations.values():
                    security = operation.get("security", [])
                    if any(unset & set(requirement) for requirement in security):
                        security.append({})
        return app.openapi_schema

    app.openapi = openapi
