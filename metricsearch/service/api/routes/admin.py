"""Admin: the model rollout (service/rollout.py), behind the write key. Start it, watch it, swap it in or abort it."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from metricsearch.core.schemas import RolloutRequest, RolloutStatus
from metricsearch.service.api.body import JSONRoute
from metricsearch.service.api.deps import ServiceDep
from metricsearch.service.api.routes.common import CONFLICT, ERRORS, NOT_FOUND, WriteKey

router = APIRouter(
    prefix="/admin", responses=ERRORS | CONFLICT, route_class=JSONRoute, tags=["admin"], dependencies=[WriteKey]
)


@router.post("/rollout", response_model=RolloutStatus, status_code=202, responses=NOT_FOUND)
async def start_rollout(body: RolloutRequest, service: ServiceDep) -> RolloutStatus:
    """Re-embed every stored item with the bundle at `bundle` into a new store, in the background, while the
    service answers from the live one and applies each write to both."""
    return await run_in_threadpool(service.rollout.start, body.bundle)


@router.get("/rollout", response_model=RolloutStatus)
def rollout_status(service: ServiceDep) -> RolloutStatus:
    """Progress of the rollout under way: items copied, rate and time left."""
    return service.rollout.status()


@router.post("/rollout/swap", response_model=RolloutStatus)
async def swap_rollout(service: ServiceDep) -> RolloutStatus:
    """Serve the new bundle from the next request on (409 until the copy is done)."""
    return await service.rollout.swap()


@router.post("/rollout/abort", response_model=RolloutStatus)
async def abort_rollout(service: ServiceDep) -> RolloutStatus:
    """Drop the new store; the service goes on as before the rollout."""
    return await run_in_threadpool(service.rollout.abort)
