"""`Client` and `AsyncClient`: one method per route, typed requests and answers, and retries.

Retries: an answer whose error code says a retry may get through (overloaded, timed_out, store_unavailable,
not_ready; a 429 or 503 without a code, from a proxy in front) is retried after its `Retry-After` (seconds or an HTTP
date; without one, a backoff of 0.5 s doubling up to 30 s), and a request that never got an answer (connection
refused or reset, a timeout) after the same backoff. Every route is safe to send twice: /index upserts by id (a
repeat finds the items unchanged), deletes of what is gone count 0, reads change nothing. Any other answer (4xx,
500) is raised at once as `ServiceError`, its `code` telling what kind: retrying would not change it. A client gives
up after `retries` retries or once its waits would pass `patience_s` seconds, and raises the last error."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from metricsearch.core.errors import MetricSearchError
from metricsearch.core.schemas import (
    BatchResponse,
    DeleteRequest,
    DeleteResponse,
    IndexRequest,
    IndexResponse,
    ItemIn,
    ItemOut,
    RolloutRequest,
    RolloutStatus,
    SimilarRequest,
    SimilarResponse,
)

RETRY_CODES = frozenset({"overloaded", "timed_out", "store_unavailable", "not_ready"})
RETRY_STATUSES = frozenset({429, 503})
"""What is retried when an answer has no error code (not the service's own: a proxy's or a load balancer's)."""
BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
Model = TypeVar("Model", bound=BaseModel)


class ServiceError(MetricSearchError):
    """The service's answer to a request it did not fulfil: its status, its `detail` (what to fix) and its `code`
    (docs/api.md, "Error codes"; None from an answer without one), or status 0 when no answer came (the service
    unreachable)."""

    def __init__(self, status: int, detail: str, retry_after_s: float | None = None, code: str | None = None) -> None:
        super().__init__(f"{status} {code}: {detail}" if code else f"{status}: {detail}" if status else detail)
        self.status = status
        self.detail = detail
        self.retry_after_s = retry_after_s
        self.code = code

    @property
    def retryable(self) -> bool:
        """A retry may get through: the service said so by its code, or it gave no answer at all."""
        if self.code is not None:
            return self.code in RETRY_CODES
        return self.status == 0 or self.status in RETRY_STATUSES


class _Base:
    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 60.0,
        retries: int = 5,
        patience_s: float = 120.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.retries = retries
        self.patience_s = patience_s
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout_s

    @staticmethod
    def _similar_body(request: SimilarRequest | Mapping[str, Any] | None, fields: Mapping[str, Any]) -> SimilarRequest:
        if request is None:
            return SimilarRequest.model_validate(fields)
        if fields:
            raise TypeError("give a request or keyword fields, not both")
        return request if isinstance(request, SimilarRequest) else SimilarRequest.model_validate(request)

    @staticmethod
    def _items(items: Iterable[ItemIn | Mapping[str, Any]]) -> IndexRequest:
        return IndexRequest(items=[i if isinstance(i, ItemIn) else ItemIn.model_validate(i) for i in items])

    @staticmethod
    def _delete_body(ids: Sequence[str] | None, filter: Mapping[str, Any] | None) -> DeleteRequest:
        return DeleteRequest.model_validate({"ids": ids, "filter": filter})

    @staticmethod
    def _json(body: BaseModel) -> dict[str, Any]:
        return body.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def _wait_after(self, attempt: int, waited_s: float, error: ServiceError) -> float | None:
        """Seconds to wait before retry number `attempt` (1, 2, ...), or None to give up and raise `error`."""
        if attempt > self.retries:
            return None
        delay = error.retry_after_s
        if delay is None:
            delay = min(BACKOFF_S * 2 ** (attempt - 1), MAX_BACKOFF_S)
        return None if waited_s + delay > self.patience_s else delay

    @staticmethod
    def _outcome(response: httpx.Response) -> ServiceError | None:
        if response.is_success:
            return None
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            body = {"detail": response.text[:500]}
        code = body.get("code")
        detail = str(body.get("detail", response.text[:500]))
        retry_after = _retry_after_s(response.headers.get("Retry-After"))
        return ServiceError(response.status_code, detail, retry_after, code if isinstance(code, str) else None)

    @staticmethod
    def _unreachable(url: str, exc: httpx.TransportError) -> ServiceError:
        return ServiceError(0, f"no answer from {url}: {type(exc).__name__}: {exc}")


class Client(_Base):
    """Blocking client; use as a context manager or call close()."""

    def __init__(self, url: str, api_key: str | None = None, *, transport: httpx.BaseTransport | None = None, **kw):
        super().__init__(url, api_key, **kw)
        self._http = httpx.Client(base_url=self.url, headers=self._headers, timeout=self._timeout, transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def index(self, items: Iterable[ItemIn | Mapping[str, Any]]) -> IndexResponse:
        """Upsert items (at most the service's MS_MAX_BATCH_ITEMS, 1,000 by default, per call)."""
        return self._call("POST", "/index", IndexResponse, self._json(self._items(items)))

    def similar(self, request: SimilarRequest | Mapping[str, Any] | None = None, **fields: Any) -> SimilarResponse:
        """POST /similar with a SimilarRequest, a dict, or its fields: `similar(id="sku-1", k=5)`."""
        return self._call("POST", "/similar", SimilarResponse, self._json(self._similar_body(request, fields)))

    def similar_batch(self, queries: Sequence[SimilarRequest | Mapping[str, Any]]) -> BatchResponse:
        body = {"queries": [self._json(self._similar_body(q, {})) for q in queries]}
        return self._call("POST", "/similar/batch", BatchResponse, body)

    def get_item(self, item_id: str) -> ItemOut:
        return self._call("GET", f"/items/{_segment(item_id)}", ItemOut)

    def delete_item(self, item_id: str) -> None:
        self._call("DELETE", f"/items/{_segment(item_id)}", None)

    def delete(self, ids: Sequence[str] | None = None, filter: Mapping[str, Any] | None = None) -> int:
        """Delete by ids or by filter; returns how many items were deleted."""
        answer = self._call("POST", "/items/delete", DeleteResponse, self._json(self._delete_body(ids, filter)))
        return answer.deleted

    def ready(self) -> dict[str, Any]:
        return self._call("GET", "/readyz", None)

    def model(self) -> dict[str, Any]:
        return self._call("GET", "/model", None)

    def rollout_start(self, bundle: str) -> RolloutStatus:
        """Start a model rollout to the bundle folder `bundle` (a path on the service's machine)."""
        body = self._json(RolloutRequest(bundle=bundle))
        return self._call("POST", "/admin/rollout", RolloutStatus, body)

    def rollout_status(self) -> RolloutStatus:
        return self._call("GET", "/admin/rollout", RolloutStatus)

    def rollout_swap(self) -> RolloutStatus:
        return self._call("POST", "/admin/rollout/swap", RolloutStatus)

    def rollout_abort(self) -> RolloutStatus:
        return self._call("POST", "/admin/rollout/abort", RolloutStatus)

    def _call(self, method: str, path: str, model: type[Model] | None, body: Any = None) -> Any:
        attempt, waited = 0, 0.0
        while True:
            try:
                response = self._http.request(method, path, json=body)
                error = self._outcome(response)
                if error is None:
                    return _parse(response, model)
                if not error.retryable:
                    raise error
            except httpx.TransportError as exc:
                error = self._unreachable(self.url, exc)
            attempt += 1
            delay = self._wait_after(attempt, waited, error)
            if delay is None:
                raise error
            time.sleep(delay)
            waited += delay


class AsyncClient(_Base):
    """The same calls as `Client`, awaitable; use as an async context manager or await aclose()."""

    def __init__(
        self, url: str, api_key: str | None = None, *, transport: httpx.AsyncBaseTransport | None = None, **kw
    ):
        super().__init__(url, api_key, **kw)
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=self._headers, timeout=self._timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def index(self, items: Iterable[ItemIn | Mapping[str, Any]]) -> IndexResponse:
        return await self._call("POST", "/index", IndexResponse, self._json(self._items(items)))

    async def similar(
        self, request: SimilarRequest | Mapping[str, Any] | None = None, **fields: Any
    ) -> SimilarResponse:
        return await self._call("POST", "/similar", SimilarResponse, self._json(self._similar_body(request, fields)))

    async def similar_batch(self, queries: Sequence[SimilarRequest | Mapping[str, Any]]) -> BatchResponse:
        body = {"queries": [self._json(self._similar_body(q, {})) for q in queries]}
        return await self._call("POST", "/similar/batch", BatchResponse, body)

    async def get_item(self, item_id: str) -> ItemOut:
        return await self._call("GET", f"/items/{_segment(item_id)}", ItemOut)

    async def delete_item(self, item_id: str) -> None:
        await self._call("DELETE", f"/items/{_segment(item_id)}", None)

    async def delete(self, ids: Sequence[str] | None = None, filter: Mapping[str, Any] | None = None) -> int:
        answer = await self._call("POST", "/items/delete", DeleteResponse, self._json(self._delete_body(ids, filter)))
        return answer.deleted

    async def ready(self) -> dict[str, Any]:
        return await self._call("GET", "/readyz", None)

    async def model(self) -> dict[str, Any]:
        return await self._call("GET", "/model", None)

    async def rollout_start(self, bundle: str) -> RolloutStatus:
        body = self._json(RolloutRequest(bundle=bundle))
        return await self._call("POST", "/admin/rollout", RolloutStatus, body)

    async def rollout_status(self) -> RolloutStatus:
        return await self._call("GET", "/admin/rollout", RolloutStatus)

    async def rollout_swap(self) -> RolloutStatus:
        return await self._call("POST", "/admin/rollout/swap", RolloutStatus)

    async def rollout_abort(self) -> RolloutStatus:
        return await self._call("POST", "/admin/rollout/abort", RolloutStatus)

    async def _call(self, method: str, path: str, model: type[Model] | None, body: Any = None) -> Any:
        attempt, waited = 0, 0.0
        while True:
            try:
                response = await self._http.request(method, path, json=body)
                error = self._outcome(response)
                if error is None:
                    return _parse(response, model)
                if not error.retryable:
                    raise error
            except httpx.TransportError as exc:
                error = self._unreachable(self.url, exc)
            attempt += 1
            delay = self._wait_after(attempt, waited, error)
            if delay is None:
                raise error
            await asyncio.sleep(delay)
            waited += delay


def _parse(response: httpx.Response, model: type[Model] | None) -> Any:
    if response.status_code == 204:
        return None
    return model.model_validate_json(response.content) if model is not None else response.json()


def _segment(item_id: str) -> str:
    """An id as one URL path segment (ids may hold '/', '?', '#')."""
    return quote(item_id, safe="")


def _retry_after_s(value: str | None) -> float | None:
    """Retry-After as seconds: a number of seconds, or an HTTP date (RFC 9110); None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - time.time())
