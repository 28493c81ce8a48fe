"""HTTP routes: validate limits, call the use cases, shape responses. No business logic here."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Response
from fastapi.concurrency import run_in_threadpool
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.api.deps import RuntimeDep, require_read_key, require_write_key
from service.api.schemas import (
    FieldScores,
    IndexRequest,
    IndexResponse,
    ItemOut,
    ProblemDetail,
    SimilarRequest,
    SimilarResponse,
    SimilarResult,
)
from service.catalog import Item
from service.errors import PayloadTooLargeError, StoreUnavailableError
from service.runtime import Runtime

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
    items = [Item(i.id, i.title, i.description, i.metadata) for i in body.items]
    result = await run_in_threadpool(runtime.catalog.index, items, settings.index_batch_size)
    runtime.metrics.indexed_items.labels("written").inc(result.indexed)
    runtime.metrics.indexed_items.labels("unchanged").inc(result.unchanged)
    return IndexResponse(indexed=result.indexed, unchanged=result.unchanged)


@router.post(
    "/similar",
    response_model=SimilarResponse,
    dependencies=[ReadKey],
    responses={404: {"model": ProblemDetail}},
    tags=["search"],
)
async def similar(body: SimilarRequest, runtime: RuntimeDep) -> SimilarResponse:
    """More like this: by a stored item's id, by free text, or by a title (+ description)."""
    started = time.perf_counter()
    catalog = runtime.catalog
    conditions = body.conditions()
    # Search and rerank run on the event loop: about 2 ms, mostly in the engine, which holds the GIL anyway, so a
    # thread hop would add latency without adding throughput.
    if body.id is not None:
        matches = catalog.similar_to_item(body.id, body.k, conditions, body.exclude_ids)
    else:
        _check_text_limits(runtime, body.title, body.text or body.description, "query")
        texts = catalog.query_texts(body.text, body.title, body.description)
        encoded = await runtime.batcher.encode(texts)
        query = catalog.query_vectors_from_texts(encoded, free_text=body.text is not None)
        matches = catalog.similar(query, body.k, conditions, body.exclude_ids)
    return SimilarResponse(
        results=[
            SimilarResult(
                id=m.id, score=m.score, title=m.title, metadata=m.metadata, scores=FieldScores(**m.field_scores)
            )
            for m in matches
        ],
        model=runtime.bundle.manifest.name,
        took_ms=round((time.perf_counter() - started) * 1000, 3),
    )


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
    """Readiness: the bundle is loaded and the store answers."""
    if not runtime.store.healthy():
        raise StoreUnavailableError("the vector store does not answer; see the service log")
    return {"status": "ready", "model": runtime.bundle.manifest.name, "items": runtime.store.count()}


@router.get("/model", tags=["ops"])
def model(runtime: RuntimeDep) -> dict:
    """The served bundle's manifest."""
    return runtime.bundle.manifest.model_dump(mode="json")


@router.get("/metrics", tags=["ops"], response_class=Response)
def metrics(runtime: RuntimeDep) -> Response:
    return Response(generate_latest(runtime.metrics.registry), media_type=CONTENT_TYPE_LATEST)
