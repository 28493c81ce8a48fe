"""The request models' own rules, as any client meets them: one query per request, k a JSON integer, ids a URL can
address, metadata values JSON keeps exactly, and a filter turned into the store's conditions with numbers compared by
value."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from metricsearch.core.filters import AnyOf, Equals, Range
from metricsearch.core.schemas import DeleteRequest, ItemIn, SimilarRequest


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "give exactly one of id, text, title"),
        ({"id": "a", "text": "red shirt"}, "got ['id', 'text']"),
        ({"description": "soft"}, "description is only allowed together with title"),
        ({"id": "a", "negative_ids": ["b"]}, "negative_ids is only allowed together with positive_ids"),
        ({"id": "a", "k": 10.0}, "k"),
        ({"id": "a/../b"}, "cannot be addressed in a URL"),
    ],
)
def test_a_similar_request_asks_one_well_formed_question(body, message):
    with pytest.raises(ValidationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        SimilarRequest.model_validate(body)


def test_a_filter_becomes_the_store_s_conditions_with_numbers_by_value():
    request = SimilarRequest.model_validate(
        {
            "id": "a",
            "filter": {
                "brand": "acme",
                "in_stock": True,
                "size": 2,
                "colour": {"in": ["red", "blue"]},
                "price": {"lte": 9.5},
            },
        }
    )
    assert request.conditions() == [
        Equals("brand", "acme"),
        Equals("in_stock", True),
        Range("size", 2, 2),
        AnyOf("colour", ("red", "blue")),
        Range("price", None, 9.5),
    ]
    with pytest.raises(ValidationError, match="gte and/or lte"):
        SimilarRequest.model_validate({"id": "a", "filter": {"price": {}}})


def test_only_a_bare_query_takes_the_plain_path():
    assert SimilarRequest(id="a", k=5, exclude_ids=["b"]).plain
    assert not SimilarRequest(id="a", diversity=0.5).plain
    assert not SimilarRequest(positive_ids=["a", "b"]).plain
    assert SimilarRequest(id="a", group_by="brand").group_keys == ("brand",)


def test_items_keep_metadata_json_can_hold_exactly_and_need_a_title():
    item = ItemIn.model_validate({"id": "a", "title": "shirt", "metadata": {"sale": True, "count": 3, "tags": ["x"]}})
    assert item.metadata == {"sale": True, "count": 3, "tags": ["x"]} and item.metadata["sale"] is True
    with pytest.raises(ValidationError, match="not exact in JSON"):
        ItemIn.model_validate({"id": "a", "title": "shirt", "metadata": {"count": 2**60}})
    with pytest.raises(ValidationError, match="title must contain text"):
        ItemIn.model_validate({"id": "a", "title": " \t"})


def test_a_delete_names_ids_or_a_filter():
    assert DeleteRequest.model_validate({"filter": {"brand": "acme"}}).conditions() == [Equals("brand", "acme")]
    with pytest.raises(ValidationError, match="exactly one of ids or filter"):
        DeleteRequest.model_validate({"ids": ["a"], "filter": {"brand": "acme"}})
