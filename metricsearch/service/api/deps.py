"""Typed dependencies of the routes: the runtime built at start-up, and the API keys, read through a declared
security scheme (bearerAuth) so /openapi.json and /docs show which routes take a key and generated clients send it."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import SecretStr

from metricsearch.core.errors import AuthForbiddenError, AuthMissingError
from metricsearch.service.runtime import Runtime


def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
# auto_error=False: a missing key is ours to refuse (401 with WWW-Authenticate, and only where a key is set).
bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearerAuth",
    description="MS_API_KEY on writes; on reads, MS_READ_API_KEY or the write key when a read key is set",
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


def _check_key(accepted: list[SecretStr], credentials: HTTPAuthorizationCredentials | None, what: str) -> None:
    """Constant-time comparison against every accepted key; the key is never echoed."""
    if credentials is None:
        raise AuthMissingError(f"{what} need an API key: send 'Authorization: Bearer <key>'")
    given = credentials.credentials.encode()
    matches = [hmac.compare_digest(given, key.get_secret_value().encode()) for key in accepted]
    if not any(matches):
        raise AuthForbiddenError(f"the API key given is not valid for {what}")


def require_write_key(runtime: RuntimeDep, credentials: Credentials) -> None:
    if runtime.settings.api_key is not None:
        _check_key([runtime.settings.api_key], credentials, "writes")


def require_read_key(runtime: RuntimeDep, credentials: Credentials) -> None:
    """With a read key set, reads take it or the write key."""
    settings = runtime.settings
    if settings.read_api_key is not None:
        _check_key([k for k in (settings.read_api_key, settings.api_key) if k is not None], credentials, "reads")
