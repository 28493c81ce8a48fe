"""Operations: liveness, readiness, the served model and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from metricsearch.core.errors import NotReadyError
from metricsearch.service.api.deps import RuntimeDep, ServiceDep
from metricsearch.service.api.routes.common import ERRORS

router = APIRouter(responses=ERRORS, tags=["ops"])
metrics_router = APIRouter(responses=ERRORS, tags=["ops"])
"""/metrics alone: left out of the API port (and its schema) when MS_METRICS_PORT serves it elsewhere."""


@router.get("/livez")
@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the process answers, whatever the store does (never touched here). On the event loop, so it needs
    no worker thread (all may wait on Qdrant). /livez is Kubernetes' name beside /readyz; /healthz stays for the
    image's HEALTHCHECK and existing probes."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(runtime: RuntimeDep) -> dict[str, str | int]:
    """Readiness: the bundle is loaded and the store answers (each probe retries a store that was down)."""
    problem = runtime.store.readiness()
    if problem is not None:
        raise NotReadyError(f"not ready: {problem}; each probe retries")
    return {"status": "ready", "model": runtime.bundle.manifest.name, "items": runtime.store.count()}


@router.get("/model")
def model(runtime: RuntimeDep) -> dict:
    """The served bundle's manifest, and `fusion_in_use`: the fusion weights requests rank with now and why (an
    adaptive rule's choice on this catalog, or the manifest's fixed weights); null without fusion."""
    weights, why = runtime.engine.statistics.fusion_in_use()
    in_use = None if weights is None else {"weights": dict(weights), "chosen_by": why}
    return runtime.bundle.manifest.model_dump(mode="json") | {"fusion_in_use": in_use}


@metrics_router.get("/metrics", response_class=Response)
def metrics(service: ServiceDep) -> Response:
    return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)
