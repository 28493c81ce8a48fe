"""HTTP routes, one module per resource: items (write, read, delete), search (/similar), batch (/similar/batch), ops
(health, model, metrics), admin (model rollout). Each validates limits, calls one use case and shapes the response;
no business logic here."""

from fastapi import APIRouter

from metricsearch.service.api.routes import admin, batch, items, ops, search

router = APIRouter()
for resource in (items, search, batch, ops, admin):
    router.include_router(resource.router)
metrics_router = ops.metrics_router

__all__ = ["metrics_router", "router"]
