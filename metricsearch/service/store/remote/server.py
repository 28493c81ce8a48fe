"""How the server store reaches Qdrant outside an open store (rollout aliases, snapshot transfers): a client for the
configured server, and the errors that mean the server did not answer as asked."""

from __future__ import annotations

import math

import httpx
from qdrant_client import QdrantClient
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from metricsearch.service.config import Settings

SERVER_ERRORS = (httpx.HTTPError, ResponseHandlingException, UnexpectedResponse, OSError)


def api_key(settings: Settings) -> str | None:
    return settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None


def server_url(settings: Settings) -> str:
    assert settings.qdrant_url is not None, "the server store needs MS_QDRANT_URL"
    return settings.qdrant_url


def client(settings: Settings, timeout_s: float) -> QdrantClient:
    return QdrantClient(
        url=server_url(settings), api_key=api_key(settings), timeout=math.ceil(timeout_s), check_compatibility=False
    )
