"""Typed dependencies of the routes: the runtime built at start-up, and the API keys."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Header, Request
from pydantic import SecretStr

from metricsearch.core.errors import AuthForbiddenError, AuthMissingError
from metricsearch.service.runtime import Runtime


def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def _check_key(accepted: list[SecretStr], authorization: str | None, what: str) -> None:
    """Constant-time comparison against every accepted key; the key is never echoed."""
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise AuthMissingError(f"{what} need an API key: send 'Authorization: Bearer <key>'")
    matches = [hmac.compare_digest(given.strip().encode(), key.get_secret_value().encode()) for key in accepted]
    if not any(matches):
        raise AuthForbiddenError(f"the API key given is not valid for {what}")


def require_write_key(runtime: RuntimeDep, authorization: Annotated[str | None, Header()] = None) -> None:
    if runtime.settings.api_key is not None:
        _check_key([runtime.settings.api_key], authorization, "writes")


def require_read_key(runtime: RuntimeDep, authorization: Annotated[str | None, Header()] = None) -> None:
    """With a read key set, reads take it or the write key."""
    settings = runtime.settings
    if settings.read_api_key is not None:
        _check_key([k for k in (settings.read_api_key, settings.api_key) if k is not None], authorization, "reads")
