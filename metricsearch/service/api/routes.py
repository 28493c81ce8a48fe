"""HTTP routes: validate limits, call the use cases, shape responses. No business logic here."""

from __future__ import annotations

import asyncio
import time

import orjson
from fastapi import APIRouter, Depends, Response
from fastapi.concurrency import run_in_threadpool
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import TypeAdapter

from metricsearch.core.errors import PayloadTooLargeError, StoreUnavailableError, TimedOutError
from metricsearch.core.records import Item, Match
from metricsearch.service.api.deps import RuntimeDep, require_read_key, require_write_key
from metricsearch.service.api.schemas import (
    FieldScores,
    IndexRequest,
    IndexResponse,
    ItemOut,
    ProblemDetail,
    SimilarRequest,
    SimilarResponse,
    SimilarResult,
)
from metricsearch.service.runtime import Runtime

ERRORS = {code: {"model": ProblemDetail} for code in (400, 401, 403, 413, 422, 429, 503)}
router = APIRouter(responses=ERRORS)
ReadKey = Depends(require_read_key)
WriteKey = Depends(require_write_key)


def _check_text_limits(runtime: Runtime, title: str | None, description: str | None, where: str) -> None:
    settings = runtime.settings
    if title is not None and len(title) > settings.max_title_chars:
        raise PayloadTooLargeError(
            f"{where}: title has {len(title)} characters; the limit is {settings.max_title_chars} (MS_MAX_TITLE_CHARS)"
        )
    if description is not None and len(description) > settings.max_description_chars:
        raise PayloadTooLargeError(
            f"{where}: text has {len(description)} characters; the limit is {settings.max_description_chars} "
            "(MS_MAX_DESCRIPTION_CHARS); the model reads only its first "
            f"{runtime.encoder.max_length} tokens anyway"
        )


@router.post("/index", response_model=IndexResponse, dependencies=[WriteKey], tags=["items"])
async def index_items(body: IndexRequest, runtime: RuntimeDep) -> IndexResponse:
    """Upsert items by id. Texts that did not change are not re-encoded; the last of duplicate ids wins."""
    settings = runtime.settings
    if len(body.items) > settings.max_batch_items:
        raise PayloadTooLargeError(
            f"{len(body.items)} items in one request; the limit is {settings.max_batch_items}: split the batch"
        )
    for n, item in enumerate(body.items):
        _check_text_limits(runtime, item.title, item.description, f"items.{n}")
        if len(item.metadata) > settings.max_metadata_keys:
            raise PayloadTooLargeError(
                f"items.{n}: metadata has {len(item.metadata)} keys; the limit is {settings.max_metadata_keys}"
            )
        size = len(orjson.dumps(item.metadata))
        if size > settings.max_metadata_bytes:
            raise PayloadTooLargeError(
                f"items.{n}: metadata is {size} bytes as JSON; the limit is {settings.max_metadata_bytes} "
                "(MS_MAX_METADATA_BYTES): keep filterable attributes there, not documents"
            )
    items = [Item(i.id, i.title, i.description, i.metadata) for i in body.items]
    result = await run_in_threadpool(runtime.catalog.index, items, settings.index_batch_size)
    runtime.metrics.indexed_items.labels("written").inc(result.indexed)
    runtime.metrics.indexed_items.labels("unchanged").inc(result.unchanged)
    return IndexResponse(indexed=result.indexed, unchanged=result.unchanged)


JSON = "application/json"
_RESULTS = TypeAdapter(list[SimilarResult])


def _results_json(matches: list[Match]) -> bytes:
    return _RESULTS.dump_json(
        [
            SimilarResult(
                id=m.id, score=m.score, title=m.title, metadata=m.metadata, scores=FieldScores(**m.field_scores)
            )
            for m in matches
        ]
    )


@router.post(
    "/similar",
    response_model=SimilarResponse,
    dependencies=[ReadKey],
    responses={404: {"model": ProblemDetail}},
    tags=["search"],
)
async def similar(body: SimilarRequest, runtime: RuntimeDep) -> Response:
    """More like this: by a stored item's id, by free text, or by a title (+ description)."""
    started = time.perf_counter()
    catalog = runtime.catalog
    conditions = body.conditions()
    # Search and rerank run on the event loop: about 2 ms, mostly in the engine, which holds the GIL anyway, so a
    # thread hop would add latency without adding throughput.
    if body.id is not None:
        # A repeated item-to-item request is answered from the answer cache until the next write (service/cache.py).
        key = body.model_dump_json(include={"id", "k", "filter", "exclude_ids"})
        generation = runtime.answers.generation
        results = runtime.answers.get(generation, key)
        if results is None:
            results = _results_json(catalog.similar_to_item(body.id, body.k, conditions, body.exclude_ids))
            runtime.answers.put(generation, key, results)
    else:
        _check_text_limits(runtime, body.title, body.text or body.description, "query")
        texts = catalog.query_texts(body.text, body.title, body.description)
        try:
            encoded = await asyncio.wait_for(runtime.batcher.encode(texts), runtime.settings.request_timeout_s)
        except TimeoutError:
            raise TimedOutError(
                f"the query waited over {runtime.settings.request_timeout_s:g} s (MS_REQUEST_TIMEOUT_S) for the "
                "encoder, which is overloaded: retry shortly"
            ) from None
        query = catalog.query_vectors_from_texts(encoded, free_text=body.text is not None)
        results = _results_json(catalog.similar(query, body.k, conditions, body.exclude_ids))
    took_ms = orjson.dumps(round((time.perf_counter() - started) * 1000, 3))
    # The SimilarResponse fields, assembled from JSON pieces so a cached answer is served without re-serialising it.
    return Response(b'{"results":%b,"model":%b,"took_ms":%b}' % (results, runtime.model_json, took_ms), media_type=JSON)


@router.get(
    "/items/{item_id}",
    response_model=ItemOut,
    dependencies=[ReadKey],
    responses={404: {"model": ProblemDetail}},
    tags=["items"],
)
def get_item(item_id: str, runtime: RuntimeDep) -> ItemOut:
    item = runtime.catalog.get(item_id)
    return ItemOut(id=item.id, title=item.title, description=item.description, metadata=item.metadata)


@router.delete(
    "/items/{item_id}",
    status_code=204,
    dependencies=[WriteKey],
    responses={404: {"model": ProblemDetail}},
    tags=["items"],
)
def delete_item(item_id: str, runtime: RuntimeDep) -> Response:
    runtime.catalog.delete(item_id)
    return Response(status_code=204)


@router.get("/healthz", tags=["ops"])
def healthz() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@router.get("/readyz", tags=["ops"])
def readyz(runtime: RuntimeDep) -> dict[str, str | int]:
    """Readiness: the bundle is loaded and the store answers (each probe retries a store that was down)."""
    if not runtime.store.healthy():
        where = f"Qdrant at {runtime.settings.qdrant_url}" if runtime.settings.qdrant_url else "the embedded store"
        raise StoreUnavailableError(f"{where} does not answer yet; the service log says why, and each probe retries")
    return {"status": "ready", "model": runtime.bundle.manifest.name, "items": runtime.store.count()}


@router.get("/model", tags=["ops"])
def model(runtime: RuntimeDep) -> dict:
    """The served bundle's manifest."""
    return runtime.bundle.manifest.model_dump(mode="json")


@router.get("/metrics", tags=["ops"], response_class=Response)
def metrics(runtime: RuntimeDep) -> Response:
    return Response(generate_latest(runtime.metrics.registry), media_type=CONTENT_TYPE_LATEST)
