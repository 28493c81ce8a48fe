"""POST /similar/batch: up to 100 /similar bodies in one call, each checked and answered on its own, the text queries
among them encoded in one encoder call."""

from __future__ import annotations

import time

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from metricsearch.core.errors import InvalidInputError, NotFoundError, PayloadTooLargeError, TimedOutError
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
from metricsearch.service.api.routes.common import ERRORS, ReadKey, check_text_limits
from metricsearch.service.recommend import Probe
from metricsearch.service.runtime import Runtime
from metricsearch.service.search import TextQuery

router = APIRouter(responses=ERRORS, route_class=JSONRoute, tags=["search"])
QUERY_FAULTS = (InvalidInputError, NotFoundError, PayloadTooLargeError)
"""A query's own mistakes, answered in its place; anything else (overload, store down) fails the whole batch with
its status and Retry-After, since every query would meet it."""


@router.post("/similar/batch", response_model=BatchResponse, dependencies=[ReadKey])
async def similar_batch(body: BatchRequest, runtime: RuntimeDep) -> BatchResponse:
    """Several /similar queries in one call: `answers[i]` is query i's answer, or
    `{"error": {"status", "code", "detail"}}` with the status and code it would have got alone."""
    deadline = time.monotonic() + runtime.settings.request_timeout_s
    answers: list[SimilarResponse | QueryFailure | None] = [None] * len(body.queries)
    requests: dict[int, SimilarRequest] = {}
    for n, raw in enumerate(body.queries):
        try:
            request = SimilarRequest.model_validate(raw)
            if request.id is None and request.positive_ids is None:
                check_text_limits(runtime, request.title, request.text or request.description, f"queries.{n}")
        except ValidationError as exc:
            status, code, detail = describe_validation(RequestValidationError(exc.errors()))
            answers[n] = _failure(status, code, f"queries.{n}: {detail}")
            continue
        except PayloadTooLargeError as exc:
            answers[n] = _failure(*answer_of(exc), str(exc))
            continue
        requests[n] = request
    texts = {n: r for n, r in requests.items() if r.id is None and r.positive_ids is None}
    queries = [TextQuery(r.text, r.title, r.description) for r in texts.values()]
    encoded = dict(zip(texts, await runtime.search.encode(queries), strict=True)) if queries else {}
    for n, answer in (await run_in_threadpool(_answer_all, runtime, requests, encoded, deadline)).items():
        answers[n] = answer
    return BatchResponse(answers=answers)


def _answer_all(runtime: Runtime, requests: dict[int, SimilarRequest], encoded: dict, deadline: float) -> dict:
    """Each query in turn until the deadline, then a timed_out error for each one left: a batch of the costliest
    queries (32 + 32 ids, group_by, k + offset 200) took 2.4 s a query, so 100 of them held a worker for minutes."""
    answers = {}
    for n, request in requests.items():
        if time.monotonic() < deadline:
            answers[n] = _answer(runtime, request, encoded.get(n))
            continue
        late = TimedOutError(
            f"queries.{n}: not answered, the batch ran past {runtime.settings.request_timeout_s:g} s "
            "(MS_REQUEST_TIMEOUT_S): send the queries left in smaller batches"
        )
        answers[n] = _failure(*answer_of(late), str(late))
    return answers


def _answer(runtime: Runtime, request: SimilarRequest, text: tuple | None) -> SimilarResponse | QueryFailure:
    started = time.perf_counter()
    try:
        if not request.plain:
            matches = runtime.recommender.answer(request, None if text is None else Probe(*text))
        elif text is None:
            matches = runtime.search.by_id_here(request.id, request.k, request.conditions(), request.exclude_ids)
        else:
            vectors, terms = text
            matches = runtime.catalog.similar(vectors, request.k, request.conditions(), request.exclude_ids, terms)
    except QUERY_FAULTS as exc:
        return _failure(*answer_of(exc), str(exc))
    took_ms = round((time.perf_counter() - started) * 1000, 3)
    return SimilarResponse(results=_results(matches), model=runtime.bundle.manifest.name, took_ms=took_ms)


def _results(matches: list[Match]) -> list[SimilarResult]:
    return [
        SimilarResult(id=m.id, score=m.score, title=m.title, metadata=m.metadata, scores=FieldScores(**m.field_scores))
        for m in matches
    ]


def _failure(status: int, code: str, detail: str) -> QueryFailure:
    return QueryFailure(error=QueryError(status=status, code=code, detail=detail))
