"""POST /similar/batch: up to 100 /similar bodies in one call, each checked and answered on its own (the engine
encodes the text queries among them in one encoder call)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from metricsearch.core.records import Match
from metricsearch.core.schemas import (
    BatchRequest,
    BatchResponse,
    FieldScores,
    QueryError,
    QueryFailure,
    SimilarRequest,
    SimilarResponse,
    SimilarResult,
)
from metricsearch.service.api.body import JSONRoute
from metricsearch.service.api.deps import RuntimeDep
from metricsearch.service.api.errors import answer_of, describe_validation
from metricsearch.service.api.routes.common import ERRORS, ReadKey

router = APIRouter(responses=ERRORS, route_class=JSONRoute, tags=["search"])


@router.post("/similar/batch", response_model=BatchResponse, dependencies=[ReadKey])
async def similar_batch(body: BatchRequest, runtime: RuntimeDep) -> BatchResponse:
    """Several /similar queries in one call: `answers[i]` is query i's answer, or
    `{"error": {"status", "code", "detail"}}` with the status and code it would have got alone."""
    answers: list[SimilarResponse | QueryFailure | None] = [None] * len(body.queries)
    requests: dict[int, SimilarRequest] = {}
    for n, raw in enumerate(body.queries):
        try:
            requests[n] = SimilarRequest.model_validate(raw)
        except ValidationError as exc:
            status, code, detail = describe_validation(RequestValidationError(exc.errors()))
            answers[n] = _failure(status, code, f"queries.{n}: {detail}")
    model = runtime.bundle.manifest.name
    for n, answered in (await runtime.engine.similar_batch(requests)).items():
        if isinstance(answered, Exception):
            answers[n] = _failure(*answer_of(answered), str(answered))
        else:
            answers[n] = SimilarResponse(results=_results(answered.matches), model=model, took_ms=answered.took_ms)
    return BatchResponse(answers=answers)


def _results(matches: list[Match]) -> list[SimilarResult]:
    return [
        SimilarResult(id=m.id, score=m.score, title=m.title, metadata=m.metadata, scores=FieldScores(**m.field_scores))
        for m in matches
    ]


def _failure(status: int, code: str, detail: str) -> QueryFailure:
    return QueryFailure(error=QueryError(status=status, code=code, detail=detail))
