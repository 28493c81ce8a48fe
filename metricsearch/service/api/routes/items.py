"""Items: upsert (POST /index), read and delete one (GET/DELETE /items/{id}: the id percent-encoded, and a `/` in
it may stay as it is, so any id /index accepts can be read and deleted), delete many (POST /items/delete)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool

from metricsearch.core.records import Item
from metricsearch.core.schemas import DeleteRequest, DeleteResponse, IndexRequest, IndexResponse, ItemOut
from metricsearch.service.api.body import JSONRoute
from metricsearch.service.api.deps import RuntimeDep
from metricsearch.service.api.routes.common import ERRORS, NOT_FOUND, ReadKey, WriteKey

router = APIRouter(responses=ERRORS, route_class=JSONRoute, tags=["items"])


@router.post("/index", response_model=IndexResponse, dependencies=[WriteKey])
async def index_items(body: IndexRequest, runtime: RuntimeDep) -> IndexResponse:
    """Upsert items by id. Texts that did not change are not re-encoded; the last of duplicate ids wins."""
    items = [Item(i.id, i.title, i.description, i.metadata) for i in body.items]
    result = await run_in_threadpool(runtime.engine.indexer.submit, items)
    return IndexResponse(indexed=result.indexed, unchanged=result.unchanged)


@router.get("/items/{item_id:path}", response_model=ItemOut, dependencies=[ReadKey], responses=NOT_FOUND)
def get_item(item_id: str, runtime: RuntimeDep) -> ItemOut:
    item = runtime.engine.get(item_id)
    return ItemOut(id=item.id, title=item.title, description=item.description, metadata=item.metadata)


@router.delete("/items/{item_id:path}", status_code=204, dependencies=[WriteKey], responses=NOT_FOUND)
def delete_item(item_id: str, runtime: RuntimeDep) -> Response:
    runtime.engine.indexer.delete(item_id)
    return Response(status_code=204)


@router.post("/items/delete", response_model=DeleteResponse, dependencies=[WriteKey])
async def delete_items(body: DeleteRequest, runtime: RuntimeDep) -> DeleteResponse:
    """Delete by ids, or every item a filter matches; unknown ids are not an error (`deleted` counts what existed)."""
    if body.ids is not None:
        deleted = await run_in_threadpool(runtime.engine.indexer.delete_many, body.ids)
    else:
        deleted = await run_in_threadpool(runtime.engine.indexer.delete_where, body.conditions())
    return DeleteResponse(deleted=deleted)
