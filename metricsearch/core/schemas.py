"""Request and response bodies of the HTTP API (OpenAPI at /docs). Unknown fields are refused so a typo is a
422 that names it, not a silently ignored option."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, field_validator, model_validator

from metricsearch.core.filters import AnyOf, Condition, Equals, Range

MAX_K = 100
SafeInt = Annotated[StrictInt, Field(ge=-(2**53), le=2**53)]
"""Integers exact in every JSON client (a double) and in the engine (64-bit): a larger one would fail in the engine
(a 500) and, in the schema as a double, invite values just past any 64-bit bound."""
FiniteFloat = Annotated[float, Field(allow_inf_nan=False, strict=True)]
# Order matters: bool before int (JSON true is not 1), int before float.
MetadataValue = StrictBool | SafeInt | FiniteFloat | StrictStr | list[StrictStr]
ItemId = Annotated[str, Field(min_length=1, max_length=256, description="your id of the item (any string)")]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ItemIn(_Body):
    id: ItemId
    title: str = Field(min_length=1, description="required, not blank", json_schema_extra={"pattern": r"\S"})
    description: str = Field("", description="may be empty: the item then compares on its title")
    metadata: dict[str, MetadataValue] = Field(default_factory=dict, description="filterable attributes")

    @field_validator("title")
    @classmethod
    def _title_not_blank(cls, title: str) -> str:
        if not title.strip():
            raise ValueError("title must contain text, not only whitespace")
        return title


class IndexRequest(_Body):
    items: list[ItemIn] = Field(min_length=1, description="at most 1,000 items (413 beyond); last duplicate id wins")


class IndexResponse(BaseModel):
    indexed: int = Field(description="items written (new, or text or metadata changed)")
    unchanged: int = Field(description="items identical to what is stored: nothing written, nothing encoded")


class InFilter(_Body):
    in_: list[StrictStr | SafeInt] = Field(alias="in", min_length=1)

    @field_validator("in_", mode="before")
    @classmethod
    def _whole_numbers(cls, values: object) -> object:
        """JSON has one number type: 3.0 is the integer 3, as JSON Schema reads it."""
        if not isinstance(values, list):
            return values
        return [int(v) if isinstance(v, float) and v.is_integer() else v for v in values]


class RangeFilter(_Body):
    # What _some_bound checks, in the OpenAPI schema too (so clients and fuzzers know a bound is required).
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"anyOf": [{"required": [b], "properties": {b: {"type": "number"}}} for b in ("gte", "lte")]},
    )

    gte: FiniteFloat | SafeInt | None = None
    lte: FiniteFloat | SafeInt | None = None

    @model_validator(mode="after")
    def _some_bound(self) -> RangeFilter:
        if self.gte is None and self.lte is None:
            raise ValueError("a range filter needs gte and/or lte")
        return self


FilterValue = StrictBool | SafeInt | FiniteFloat | StrictStr | InFilter | RangeFilter


def _one_query_schema(schema: dict) -> None:
    """What _exactly_one_query checks, in the OpenAPI schema too: one of id, text or title is a string, and a
    description goes with a title."""
    null = {"type": "null"}
    schema["oneOf"] = [
        {
            "required": ["id"],
            "properties": {"id": {"type": "string"}, "text": null, "title": null, "description": null},
        },
        {
            "required": ["text"],
            "properties": {"text": {"type": "string"}, "id": null, "title": null, "description": null},
        },
        {"required": ["title"], "properties": {"title": {"type": "string"}, "id": null, "text": null}},
    ]


class SimilarRequest(_Body):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_one_query_schema)

    id: ItemId | None = Field(None, description="item-to-item: a stored item's id (the item is excluded)")
    text: str | None = Field(None, min_length=1, description="a free-text query, compared with every field")
    title: str | None = Field(None, min_length=1, description="a query item's title (with optional description)")
    description: str | None = Field(None, description="the query item's description (only with title)")
    k: int = Field(10, ge=1, le=MAX_K, description=f"results wanted, 1 to {MAX_K}")
    filter: dict[str, FilterValue] | None = Field(
        None,
        description='metadata equality, {"in": [...]} or {"gte": .., "lte": ..} per key; all must hold',
        json_schema_extra={"propertyNames": {"pattern": "^[A-Za-z0-9_-]+$"}},  # the keys a filter can address
    )
    exclude_ids: list[ItemId] = Field(default_factory=list, max_length=1000)

    @model_validator(mode="after")
    def _exactly_one_query(self) -> SimilarRequest:
        if self.description is not None and self.title is None:
            raise ValueError("description is only allowed together with title")
        given = [name for name in ("id", "text", "title") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of id, text or title (+ description); got {given or 'none'}")
        return self

    def conditions(self) -> list[Condition]:
        result: list[Condition] = []
        for key, value in (self.filter or {}).items():
            if isinstance(value, InFilter):
                result.append(AnyOf(key, tuple(value.in_)))
            elif isinstance(value, RangeFilter):
                result.append(Range(key, value.gte, value.lte))
            else:
                result.append(Equals(key, value))
        return result


class FieldScores(BaseModel):
    title: float | None = Field(None, description="the learned metric on the titles: -(angular distance), or S_F")
    description: float | None = Field(None, description="the same on the descriptions; null when either has none")
    lexical_title: float | None = Field(
        None,
        description="TF-IDF cosine of the query's title and the item's title, in [0, max idf] (bundles with lexical "
        "vectors); null when either has no term",
    )
    lexical_description: float | None = Field(None, description="the same on descriptions; null when either has none")
    lexical_text: float | None = Field(
        None, description="the same over each one's whole text (title and description together)"
    )


class SimilarResult(BaseModel):
    id: str
    score: float = Field(
        description="higher is more similar. Angular bundles: -(weighted sum of per-field angular distances), in "
        "[-sum of weights, 0]; frobenius: the weighted mean of per-field S_F, in [0, 1]; recobert: the sum of its "
        "z-normalised scores; fused (bundles with `fusion`): the weighted sum of each component's z-score over the "
        "catalog's item pairs, 0 for an average pair, unbounded"
    )
    title: str
    metadata: dict[str, MetadataValue]
    scores: FieldScores = Field(description="each component of the score, as it is before normalisation")


class SimilarResponse(BaseModel):
    results: list[SimilarResult]
    model: str = Field(description="name of the bundle that scored the results")
    took_ms: float


class ItemOut(BaseModel):
    id: str
    title: str
    description: str
    metadata: dict[str, MetadataValue]


class ProblemDetail(BaseModel):
    detail: str = Field(description="what went wrong and what to do about it")
