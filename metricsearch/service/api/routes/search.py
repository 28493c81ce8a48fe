"""Search: POST /similar, by a stored item's id or by text (service/search.py runs the use case)."""

from __future__ import annotations

import time

import orjson
from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool

from metricsearch.core.records import Match
from metricsearch.core.schemas import FieldScores, SimilarRequest, SimilarResponse
from metricsearch.core.spans import span
from metricsearch.service.api.body import JSONRoute
from metricsearch.service.api.deps import RuntimeDep
from metricsearch.service.api.routes.common import ERRORS, NOT_FOUND, ReadKey, check_text_limits
from metricsearch.service.recommend import Probe
from metricsearch.service.search import TextQuery

router = APIRouter(responses=ERRORS, route_class=JSONRoute, tags=["search"])
_SCORES = tuple(FieldScores.model_fields)


def _results_json(matches: list[Match]) -> bytes:
    """`list[SimilarResult]` as JSON, written by orjson from the matches: building a pydantic model per result cost
    20x the serialising (0.6 ms of a k=100 answer). Matches hold checked values already (stored metadata, float
    scores); every FieldScores key is written, null where a match has no such component, as the model would."""
    return orjson.dumps(
        [
            {
                "id": m.id,
                "score": m.score,
                "title": m.title,
                "metadata": m.metadata,
                "scores": {name: m.field_scores.get(name) for name in _SCORES},
            }
            for m in matches
        ]
    )


@router.post("/similar", response_model=SimilarResponse, dependencies=[ReadKey], responses=NOT_FOUND)
async def similar(body: SimilarRequest, runtime: RuntimeDep) -> Response:
    """More like this: by a stored item's id, by free text, by a title (+ description), or by several items
    (positive_ids, negative_ids); with diversity, group_by, min_score, offset and boost (docs/api.md)."""
    started = time.perf_counter()
    conditions = body.conditions()
    if not body.plain:
        text = None
        if body.id is None and body.positive_ids is None:
            check_text_limits(runtime, body.title, body.text or body.description, "query")
            [text] = await runtime.search.encode([TextQuery(body.text, body.title, body.description)])
        matches = await run_in_threadpool(runtime.recommender.answer, body, None if text is None else Probe(*text))
    elif body.id is not None:
        matches = await runtime.search.by_id(body.id, body.k, conditions, body.exclude_ids)
    else:
        check_text_limits(runtime, body.title, body.text or body.description, "query")
        query = TextQuery(body.text, body.title, body.description)
        matches = await runtime.search.by_text(query, body.k, conditions, body.exclude_ids)
    took_ms = orjson.dumps(round((time.perf_counter() - started) * 1000, 3))
    # The SimilarResponse fields, assembled from JSON pieces: the results are serialised once, by their own adapter.
    with span("serialise"):
        body_json = b'{"results":%b,"model":%b,"took_ms":%b}' % (_results_json(matches), runtime.model_json, took_ms)
    return Response(body_json, media_type="application/json")
