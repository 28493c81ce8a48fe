"""The values request bodies are built from, and their limits: text that every store, log and client can encode,
integers exact in JSON, ids a URL can address. Kept apart from the bodies (schemas.py) so each stays one job."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

MAX_K = 100
MAX_OFFSET = 100
"""Paging reaches the 200th result at most (k + offset <= 200), a bound JSON Schema can state: each one's own."""
MAX_RECOMMEND_IDS = 32
MAX_GROUP_KEYS = 8
MAX_BOOSTS = 8
MAX_BATCH_QUERIES = 100
MAX_DELETE_IDS = 1000
MAX_FILTER_KEYS = 64
"""As many keys as an item's metadata holds by default (MS_MAX_METADATA_KEYS): each filter key is one more condition
every candidate is checked against."""
MAX_IN_VALUES = 1000
"""`in` values in one filter, over all its keys: each number among them is a condition built in Python before the
engine runs (service/store/filters.py), about 18 us a value, so 64 keys x 1,000 numbers held the event loop 1.3 s."""
EXACT_INT = 2**53
"""Integers up to this magnitude are exact in every JSON client (a double) and in the engine (64-bit)."""


def valid_unicode(value: Any) -> Any:
    """JSON may escape a lone surrogate (\\ud800), which no store, log or response can encode: refused here, naming
    the field, rather than failing later as a 500. Runs before pydantic's own string checks, whose message for it
    ("unable to parse raw data as a unicode string") does not say what to fix."""
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"not valid Unicode: a lone surrogate at character {exc.start} (escape surrogates only in pairs, "
                "as in \\ud83d\\ude00, or send the UTF-8 character itself)"
            ) from None
    return value


def plain_json(value: Any) -> Any:
    """The checks every metadata or filter value gets before its type union: valid Unicode, and integers exact in
    JSON (a larger one would be rounded by JavaScript clients, and pydantic's number union takes it silently as a
    float)."""
    if isinstance(value, str):
        valid_unicode(value)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > EXACT_INT:
        raise ValueError(f"an integer beyond ±2^53 ({EXACT_INT}) is not exact in JSON: send it as a string")
    elif isinstance(value, list):
        for n, element in enumerate(value):
            try:
                plain_json(element)
            except ValueError as exc:
                raise ValueError(f"element {n}: {exc}") from None
    return value


def one_of(what: str) -> WrapValidator:
    """One error naming what the field takes, instead of pydantic's one error per member of the type union."""

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        plain_json(value)
        try:
            return handler(value)
        except ValidationError:
            raise ValueError(f"must be {what}") from None

    return WrapValidator(validate)


def json_integer(value: Any) -> Any:
    """JSON Schema calls 10.0 and 1e1 integers; this API takes only what every client reads as one."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(
            "must be a JSON integer such as 10: not a string, a boolean, or a number written with a fraction or an "
            "exponent (10.0, 1e1)"
        )
    return value


Text = Annotated[str, BeforeValidator(valid_unicode)]
SafeInt = Annotated[StrictInt, Field(ge=-EXACT_INT, le=EXACT_INT)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False, strict=True)]
# Order matters: bool before int (JSON true is not 1), int before float.
MetadataValue = Annotated[
    StrictBool | SafeInt | FiniteFloat | StrictStr | list[StrictStr],
    one_of("a string, a finite number, a boolean or a list of strings"),
]
StoredValue = StrictBool | StrictInt | float | StrictStr | list[StrictStr]
"""A metadata value as the store holds it: what responses show (checked on the way in, not again on the way out)."""


def _addressable(item_id: str) -> str:
    """`GET/DELETE /items/{id}` take any id percent-encoded (a '/' included), but HTTP clients remove '.' and '..'
    path segments before sending, so such an id could be written and never read or deleted again."""
    if any(segment in (".", "..") for segment in item_id.split("/")):
        raise ValueError(
            "an id whose '/'-separated parts include '.' or '..' cannot be addressed in a URL (clients drop such "
            "path segments): rename it"
        )
    return item_id


ADDRESSABLE_PATTERN = r"^(?!(?:[^/]*/)*\.{1,2}(?:/|$))"
"""`_addressable` as the OpenAPI document states it, for clients and fuzzers; only declared, since pydantic's Rust
regex has no look-ahead."""

ItemId = Annotated[
    Text,
    Field(
        min_length=1,
        max_length=256,
        description="your id of the item (any string but '.'/'..' path segments)",
        json_schema_extra={"pattern": ADDRESSABLE_PATTERN},
    ),
    AfterValidator(_addressable),
]
MetadataKey = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9_-]+$", max_length=256, description="a metadata key: letters, digits, _ and -")
]


TEXT_PATTERN = r"[^\s\x1c-\x1f\x85]"
"""A title's OpenAPI pattern: a character that is whitespace neither to ECMAScript's \\s (which clients and fuzzers
apply) nor to Python's str.isspace (which the catalog applies: it adds \\x1c-\\x1f and \\x85)."""
NOT_BLANK = re.compile("[^\t\n\v\f\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff\x1c-\x1f\x85]")
"""TEXT_PATTERN spelled out for Python, whose own \\s differs from ECMAScript's."""
