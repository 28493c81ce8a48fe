"""HTTP routes, one module per resource: items (write, read, delete), search (/similar), batch (/similar/batch), ops
(health, model, metrics). Each validates limits, calls one use case and shapes the response; no business logic here."""

from fastapi import APIRouter

from metricsearch.service.api.routes import batch, items, ops, search

router = APIRouter()
for resource in (items, search, batch, ops):
    router.include_router(resource.router)

__all__ = ["router"]
