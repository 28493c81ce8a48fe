"""The /similar results JSON, written by orjson from the matches, is byte for byte what the declared response model
(SimilarResult) writes, for any value a match can hold."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from metricsearch.core.records import Match
from metricsearch.core.schemas import FieldScores, SimilarResult
from metricsearch.service.api.routes.search import _results_json

MODEL = TypeAdapter(list[SimilarResult])
floats = st.floats(allow_nan=True, allow_infinity=True)
texts = st.text()
metadata_values = st.one_of(
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
    st.lists(texts),
)
component = st.sampled_from([*FieldScores.model_fields, "recobert_cosd"])  # a name the response does not show
matches = st.builds(
    Match,
    id=texts,
    score=floats,
    title=texts,
    metadata=st.dictionaries(texts, metadata_values, max_size=4),
    field_scores=st.dictionaries(component, st.none() | floats, max_size=8),
)


def by_model(found: list[Match]) -> bytes:
    return MODEL.dump_json(
        [
            SimilarResult(
                id=m.id, score=m.score, title=m.title, metadata=m.metadata, scores=FieldScores(**m.field_scores)
            )
            for m in found
        ]
    )


@settings(max_examples=300)
@given(st.lists(matches, max_size=5))
def test_results_json_is_what_the_response_model_writes(found):
    assert _results_json(found) == by_model(found)


def test_every_score_key_is_written_null_where_missing():
    [result] = orjson.loads(_results_json([Match("a", -0.25, "t", {"n": 1}, {"title": -0.25, "boost": None})]))
    assert result["scores"] == {name: -0.25 if name == "title" else None for name in FieldScores.model_fields}
