"""Search: POST /similar, by a stored item's id, by text or by several items (the engine answers it)."""

from __future__ import annotations

import time

import orjson
from fastapi import APIRouter, Response

from metricsearch.core.records import Match
from metricsearch.core.schemas import FieldScores, SimilarRequest, SimilarResponse
from metricsearch.core.spans import span
from metricsearch.service.api.body import JSONRoute
from metricsearch.service.api.deps import RuntimeDep
from metricsearch.service.api.routes.common import ERRORS, NOT_FOUND, ReadKey

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
    matches = await runtime.engine.similar(body)
    took_ms = orjson.dumps(round((time.perf_counter() - started) * 1000, 3))
    # The SimilarResponse fields, assembled from JSON pieces: the results are serialised once, by their own adapter.
    with span("serialise"):
        body_json = b'{"results":%b,"model":%b,"took_ms":%b}' % (_results_json(matches), runtime.model_json, took_ms)
    return Response(body_json, media_type="application/json")
