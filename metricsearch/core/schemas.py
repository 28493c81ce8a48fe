"""Request and response bodies of the HTTP API (OpenAPI at /docs). Unknown fields are refused so a typo is a
422 that names it, not a silently ignored option."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)

from metricsearch.core.filters import AnyOf, Condition, Equals, Range
from metricsearch.core.values import (
    MAX_BATCH_QUERIES,
    MAX_BOOSTS,
    MAX_DELETE_IDS,
    MAX_FILTER_KEYS,
    MAX_GROUP_KEYS,
    MAX_IN_VALUES,
    MAX_K,
    MAX_OFFSET,
    MAX_RECOMMEND_IDS,
    NOT_BLANK,
    TEXT_PATTERN,
    FiniteFloat,
    ItemId,
    MetadataKey,
    MetadataValue,
    SafeInt,
    StoredValue,
    Text,
    json_integer,
    one_of,
    plain_json,
)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ItemIn(_Body):
    id: ItemId
    title: Text = Field(min_length=1, description="required, not blank", json_schema_extra={"pattern": TEXT_PATTERN})
    description: Text = Field("", description="may be empty: the item then compares on its title")
    metadata: dict[Text, MetadataValue] = Field(default_factory=dict, description="filterable attributes")

    @field_validator("title")
    @classmethod
    def _title_not_blank(cls, title: str) -> str:
        if not NOT_BLANK.search(title):
            raise ValueError("title must contain text, not only whitespace")
        return title


class IndexRequest(_Body):
    items: list[ItemIn] = Field(min_length=1, description="at most 1,000 items (413 beyond); last duplicate id wins")


class IndexResponse(BaseModel):
    indexed: int = Field(description="items written (new, or text or metadata changed)")
    unchanged: int = Field(description="items identical to what is stored: nothing written, nothing encoded")


class InFilter(_Body):
    in_: list[Annotated[StrictStr | SafeInt, one_of("a string or an integer")]] = Field(
        alias="in", min_length=1, max_length=MAX_IN_VALUES
    )

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

    gte: Annotated[SafeInt | FiniteFloat | None, one_of("a finite number")] = None
    lte: Annotated[SafeInt | FiniteFloat | None, one_of("a finite number")] = None

    @model_validator(mode="after")
    def _some_bound(self) -> RangeFilter:
        if self.gte is None and self.lte is None:
            raise ValueError("a range filter needs gte and/or lte")
        return self


def _filter_value(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """An object is an `in` or a range filter, validated as that one (its errors name its own fields); anything else
    is a value to compare with."""
    if isinstance(value, dict):
        return (InFilter if "in" in value else RangeFilter).model_validate(value)
    plain_json(value)
    try:
        return handler(value)
    except ValidationError:
        raise ValueError(
            'must be a string, a finite number, a boolean, {"in": [...]} or {"gte": .., "lte": ..}'
        ) from None


def _filterable(key: str) -> str:
    """The keys a filter can address (its schema's propertyNames): any other would be read as a payload path."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", key):
        raise ValueError(f"metadata key {key!r} cannot be filtered on: use letters, digits, '_' and '-' only")
    return key


def _few_in_values(filter_: Any) -> Any:
    """MAX_IN_VALUES over the whole filter, counted before its values are checked one by one (64 keys x 1,000 values
    took pydantic 75 ms)."""
    if isinstance(filter_, dict) and len(filter_) <= MAX_FILTER_KEYS:  # more keys: refused by the key count
        held = sum(len(v["in"]) for v in filter_.values() if isinstance(v, dict) and isinstance(v.get("in"), list))
        if held > MAX_IN_VALUES:
            raise ValueError(
                f"a filter holds at most {MAX_IN_VALUES} `in` values over all its keys, this one {held}: "
                "narrow the lists or split the request"
            )
    return filter_


FilterKey = Annotated[Text, AfterValidator(_filterable)]
FilterValue = Annotated[
    StrictBool | SafeInt | FiniteFloat | StrictStr | InFilter | RangeFilter, WrapValidator(_filter_value)
]
FILTER_DESCRIPTION = (
    'metadata equality, {"in": [...]} or {"gte": .., "lte": ..} per key; all must hold. Numbers compare by value '
    f"(2 equals 2.0; true is not 1). At most {MAX_FILTER_KEYS} keys and {MAX_IN_VALUES} `in` values in all"
)


def _one_query_schema(schema: dict) -> None:
    """What _exactly_one_query checks, in the OpenAPI schema too: one of id, text, title or positive_ids is given, a
    description goes with a title and negative_ids with positive_ids."""
    null = {"type": "null"}
    others = {"id": null, "text": null, "title": null, "description": null, "positive_ids": null, "negative_ids": null}
    schema["oneOf"] = [
        {"required": ["id"], "properties": {**others, "id": {"type": "string"}}},
        {"required": ["text"], "properties": {**others, "text": {"type": "string"}}},
        {
            "required": ["title"],
            "properties": {**others, "title": {"type": "string"}, "description": {"type": ["string", "null"]}},
        },
        {
            "required": ["positive_ids"],
            "properties": {
                **others,
                "positive_ids": {"type": "array"},
                "negative_ids": {"type": ["array", "null"]},
            },
        },
    ]


class ValueBoost(_Body):
    """Adds weight x the item's numeric metadata value (core/boost.py); no boost where the item has none."""

    field: MetadataKey
    weight: FiniteFloat = Field(description="score units per unit of the value; negative to demote")
    transform: Literal["linear", "log1p"] = Field(
        "linear", description="linear: the value as it is; log1p: ln(1 + value), for counts such as views"
    )


class Decay(_Body):
    scale: FiniteFloat = Field(
        gt=0,
        description="distance from origin at which the boost falls to `midpoint` of weight: days for a date "
        "decay, the field's units for a number decay",
    )
    origin: FiniteFloat | datetime | None = Field(
        None, description="a number (number decay) or an ISO-8601 date-time (date decay); left out: now (date decay)"
    )
    midpoint: FiniteFloat = Field(0.5, gt=0, lt=1, description="the boost's share left at `scale` from the origin")
    function: Literal["exp", "gauss", "linear"] = "exp"


class DecayBoost(_Body):
    """Adds weight x a decay of the distance between the item's date (or number) and an origin (core/boost.py)."""

    field: MetadataKey
    weight: FiniteFloat = Field(description="score units the boost adds at the origin itself")
    decay: Decay


Boost = ValueBoost | DecayBoost


class SimilarRequest(_Body):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_one_query_schema)

    id: ItemId | None = Field(None, description="item-to-item: a stored item's id (the item is excluded)")
    text: Text | None = Field(None, min_length=1, description="a free-text query, compared with every field")
    title: Text | None = Field(None, min_length=1, description="a query item's title (with optional description)")
    description: Text | None = Field(None, description="the query item's description (only with title)")
    k: Annotated[StrictInt, BeforeValidator(json_integer)] = Field(
        10, ge=1, le=MAX_K, description=f"results wanted, 1 to {MAX_K}: a JSON integer (not 10.0 or 1e1)"
    )
    filter: dict[FilterKey, FilterValue] | None = Field(
        None,
        max_length=MAX_FILTER_KEYS,
        description=FILTER_DESCRIPTION,
        json_schema_extra={"propertyNames": {"pattern": "^[A-Za-z0-9_-]+$"}},  # the keys a filter can address
    )
    _few_in_values = field_validator("filter", mode="before")(_few_in_values)
    exclude_ids: list[ItemId] = Field(default_factory=list, max_length=1000)
    positive_ids: list[ItemId] | None = Field(
        None,
        min_length=1,
        max_length=MAX_RECOMMEND_IDS,
        description=f"recommend from several stored items (1-{MAX_RECOMMEND_IDS}), instead of id; they are excluded",
    )
    negative_ids: list[ItemId] | None = Field(
        None,
        max_length=MAX_RECOMMEND_IDS,
        description=f"with positive_ids: items the results should not resemble (0-{MAX_RECOMMEND_IDS}); excluded",
    )
    diversity: FiniteFloat = Field(
        0.0, ge=0, le=1, description="0: the plain ranking; up to 1: maximal marginal relevance, fewer near-copies"
    )
    group_by: MetadataKey | Annotated[list[MetadataKey], Field(min_length=1, max_length=MAX_GROUP_KEYS)] | None = Field(
        None, description=f"a metadata key, or a list of up to {MAX_GROUP_KEYS}: at most group_size per value"
    )
    group_size: int = Field(1, ge=1, le=MAX_K, description="results per distinct group_by value (with group_by)")
    min_score: FiniteFloat | None = Field(None, description="leave out results whose score is below it")
    offset: int = Field(0, ge=0, le=MAX_OFFSET, description=f"results to skip, for paging (0-{MAX_OFFSET})")
    boost: Boost | Annotated[list[Boost], Field(min_length=1, max_length=MAX_BOOSTS)] | None = Field(
        None, description=f"a value boost or recency decay added to the score, or a list of up to {MAX_BOOSTS}"
    )

    @model_validator(mode="after")
    def _exactly_one_query(self) -> SimilarRequest:
        if self.description is not None and self.title is None:
            raise ValueError("description is only allowed together with title")
        if self.negative_ids is not None and self.positive_ids is None:
            raise ValueError("negative_ids is only allowed together with positive_ids")
        given = [name for name in ("id", "text", "title", "positive_ids") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of id, text, title (+ description) or positive_ids (+ negative_ids); "
                f"got {given or 'none'}"
            )
        return self

    @property
    def group_keys(self) -> tuple[str, ...]:
        return (
            ()
            if self.group_by is None
            else (self.group_by,)
            if isinstance(self.group_by, str)
            else tuple(self.group_by)
        )

    @property
    def boosts(self) -> tuple[Boost, ...]:
        return () if self.boost is None else tuple(self.boost) if isinstance(self.boost, list) else (self.boost,)

    @property
    def plain(self) -> bool:
        """Asks for nothing beyond one query, k, filter and exclude_ids (the cached, fastest path)."""
        return (
            self.positive_ids is None
            and self.diversity == 0
            and not self.group_keys
            and self.min_score is None
            and self.offset == 0
            and not self.boosts
        )

    def conditions(self) -> list[Condition]:
        return conditions_of(self.filter)


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
    lexical_codes: float | None = Field(
        None,
        description="the query's model and part numbers alone (terms of letters and digits, or of 5+ digits) against "
        "the item's whole text; null when the query has none",
    )
    boost: float | None = Field(None, description="what the request's boosts added to the score; null without boost")


class SimilarResult(BaseModel):
    id: str
    score: float = Field(
        description="higher is more similar. Angular bundles: -(weighted sum of per-field angular distances), in "
        "[-sum of weights, 0]; frobenius: the weighted mean of per-field S_F, in [0, 1]; recobert: the sum of its "
        "z-normalised scores; fused (bundles with `fusion`): the weighted sum of each component's z-score over the "
        "catalog's item pairs, 0 for an average pair, unbounded"
    )
    title: str
    metadata: dict[str, StoredValue]
    scores: FieldScores = Field(description="each component of the score, as it is before normalisation")


class SimilarResponse(BaseModel):
    results: list[SimilarResult]
    model: str = Field(description="name of the bundle that scored the results")
    took_ms: float


class ItemOut(BaseModel):
    id: str
    title: str
    description: str
    metadata: dict[str, StoredValue]


CODE_DESCRIPTION = "what kind of error, for a program to branch on (docs/api.md, 'Error codes')"


class ProblemDetail(BaseModel):
    detail: str = Field(description="what went wrong and what to do about it")
    code: str = Field(description=CODE_DESCRIPTION, examples=["unknown_id"])


class BatchRequest(_Body):
    # Any JSON value per query: each is checked on its own (a SimilarRequest) and a bad one gets its error in its
    # answer's place, so the batch as a whole takes it.
    queries: list[Any] = Field(
        min_length=1,
        max_length=MAX_BATCH_QUERIES,
        description=f"up to {MAX_BATCH_QUERIES} /similar request bodies (SimilarRequest), each checked and answered "
        "on its own",
    )


class QueryError(BaseModel):
    status: int = Field(description="the HTTP status the query alone would have got")
    code: str = Field(description=CODE_DESCRIPTION)
    detail: str = Field(description="what went wrong and what to do about it")


class QueryFailure(BaseModel):
    error: QueryError


class BatchResponse(BaseModel):
    answers: list[SimilarResponse | QueryFailure] = Field(description="one per query, in order: an answer or an error")


class DeleteRequest(_Body):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {"required": ["ids"], "properties": {"ids": {"type": "array"}, "filter": {"type": "null"}}},
                {"required": ["filter"], "properties": {"filter": {"type": "object"}, "ids": {"type": "null"}}},
            ]
        },
    )

    ids: list[ItemId] | None = Field(None, min_length=1, max_length=MAX_DELETE_IDS, description="items to delete")
    filter: dict[FilterKey, FilterValue] | None = Field(
        None,
        min_length=1,
        max_length=MAX_FILTER_KEYS,
        description="delete every item it matches (the /similar filter syntax; at least one key)",
        json_schema_extra={"propertyNames": {"pattern": "^[A-Za-z0-9_-]+$"}},
    )
    _few_in_values = field_validator("filter", mode="before")(_few_in_values)

    @model_validator(mode="after")
    def _ids_or_filter(self) -> DeleteRequest:
        if (self.ids is None) == (self.filter is None):
            raise ValueError("give exactly one of ids or filter")
        return self

    def conditions(self) -> list[Condition]:
        return conditions_of(self.filter)


class DeleteResponse(BaseModel):
    deleted: int = Field(description="items that existed and are gone")


def conditions_of(filter_: dict[str, FilterValue] | None) -> list[Condition]:
    """A request's filter as the stores take it."""
    result: list[Condition] = []
    for key, value in (filter_ or {}).items():
        if isinstance(value, InFilter):
            result.append(AnyOf(key, tuple(value.in_)))
        elif isinstance(value, RangeFilter):
            result.append(Range(key, value.gte, value.lte))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            # One rule for numbers: by value, as a range matches them (the engine's integer match would miss a
            # stored 2.0, its float match a stored 2).
            result.append(Range(key, value, value))
        else:
            result.append(Equals(key, value))
    return result


class RolloutRequest(_Body):
    bundle: str = Field(
        min_length=1, max_length=4096, description="folder of the bundle to roll out, as the service's machine sees it"
    )


class RolloutStatus(BaseModel):
    state: Literal["none", "copying", "ready", "failed"] = Field(
        description="none: no rollout; copying: the new bundle's store is being filled; ready: it holds every item and "
        "can be swapped in; failed: it cannot be completed (see error), abort it"
    )
    model: str = Field(description="the bundle served now")
    target: str | None = Field(None, description="the bundle being rolled out")
    copied: int = Field(0, description="items the new bundle's store has read from the live store so far")
    total: int = Field(0, description="items in the live store")
    items_per_s: float | None = Field(None, description="copy rate since the rollout started")
    eta_s: float | None = Field(None, description="seconds until the copy is done, at that rate")
    error: str | None = Field(None, description="why a failed rollout cannot go on")
