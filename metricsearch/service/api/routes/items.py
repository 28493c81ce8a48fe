"""Items: upsert (POST /index), read and delete one (GET/DELETE /items/{id}: the id percent-encoded, and a `/` in
it may stay as it is, so any id /index accepts can be read and deleted), delete many (POST /items/delete)."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool

from metricsearch.core.errors import PayloadTooLargeError
from metricsearch.core.records import Item
from metricsearch.core.schemas import DeleteRequest, DeleteResponse, IndexRequest, IndexResponse, ItemOut
from metricsearch.service.api.body import JSONRoute
from metricsearch.service.api.deps import RuntimeDep
from metricsearch.service.api.routes.common import ERRORS, NOT_FOUND, ReadKey, WriteKey, check_text_limits

router = APIRouter(responses=ERRORS, route_class=JSONRoute, tags=["items"])


@router.post("/index", response_model=IndexResponse, dependencies=[WriteKey])
async def index_items(body: IndexRequest, runtime: RuntimeDep) -> IndexResponse:
    """Upsert items by id. Texts that did not change are not re-encoded; the last of duplicate ids wins."""
    settings = runtime.settings
    if len(body.items) > settings.max_batch_items:
        raise PayloadTooLargeError(
            f"{len(body.items)} items in one request; the limit is {settings.max_batch_items}: split the batch"
        )
    for n, item in enumerate(body.items):
        check_text_limits(runtime, item.title, item.description, f"items.{n}")
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


@router.get("/items/{item_id:path}", response_model=ItemOut, dependencies=[ReadKey], responses=NOT_FOUND)
def get_item(item_id: str, runtime: RuntimeDep) -> ItemOut:
    item = runtime.catalog.get(item_id)
    return ItemOut(id=item.id, title=item.title, description=item.description, metadata=item.metadata)


@router.delete("/items/{item_id:path}", status_code=204, dependencies=[WriteKey], responses=NOT_FOUND)
def delete_item(item_id: str, runtime: RuntimeDep) -> Response:
    runtime.catalog.delete(item_id)
    return Response(status_code=204)


@router.post("/items/delete", response_model=DeleteResponse, dependencies=[WriteKey])
async def delete_items(body: DeleteRequest, runtime: RuntimeDep) -> DeleteResponse:
    """Delete by ids, or every item a filter matches; unknown ids are not an error (`deleted` counts what existed)."""
    if body.ids is not None:
        deleted = await run_in_threadpool(runtime.catalog.delete_many, body.ids)
    else:
        deleted = await run_in_threadpool(runtime.catalog.delete_where, body.conditions())
    return DeleteResponse(deleted=deleted)
