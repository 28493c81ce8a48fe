"""The values request bodies are built from, as any client meets them: text every store can encode, integers exact in
JSON, one error naming what a metadata value may be, ids a URL can address, and the OpenAPI patterns declaring
exactly what the validators enforce."""

from __future__ import annotations

import re
import sys
import unicodedata

import pytest
from pydantic import TypeAdapter, ValidationError

from metricsearch.core.values import (
    ADDRESSABLE_PATTERN,
    EXACT_INT,
    NOT_BLANK,
    TEXT_PATTERN,
    ItemId,
    MetadataKey,
    MetadataValue,
    SafeInt,
    Text,
    json_integer,
    plain_json,
    valid_unicode,
)

ECMASCRIPT_SPACE = set("\t\n\v\f\r\ufeff\u2028\u2029") | {
    chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Zs"
}
"""ECMAScript's \\s by its spec: WhiteSpace (tab, VT, FF, ZWNBSP and every Zs character) and LineTerminator."""


def _errors(adapter: TypeAdapter, value: object) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        adapter.validate_python(value)
    return [e["msg"] for e in caught.value.errors()]


def test_a_lone_surrogate_is_refused_naming_where_it_is_and_how_to_send_it():
    with pytest.raises(ValueError, match=r"lone surrogate at character 2 .*\\ud83d\\ude00.*UTF-8 character itself"):
        valid_unicode("ab\ud800c")
    assert valid_unicode("café 😀") == "café 😀"
    assert valid_unicode(3) == 3  # not text: left to the field's own type
    (message,) = _errors(TypeAdapter(Text), "x\udfff")
    assert "not valid Unicode: a lone surrogate at character 1" in message


def test_integers_are_taken_up_to_2_53_either_way_and_larger_ones_asked_for_as_strings():
    for exact in (EXACT_INT, -EXACT_INT, 0, True):
        assert plain_json(exact) == exact
    for inexact in (EXACT_INT + 1, -EXACT_INT - 1, 2**70):
        with pytest.raises(ValueError, match=r"beyond ±2\^53 .* send it as a string"):
            plain_json(inexact)
    safe = TypeAdapter(SafeInt)
    assert safe.validate_python(EXACT_INT) == EXACT_INT
    assert _errors(safe, EXACT_INT + 1) == [f"Input should be less than or equal to {EXACT_INT}"]


def test_a_bad_element_of_a_list_is_named_by_its_position():
    assert plain_json(["a", "b"]) == ["a", "b"]
    with pytest.raises(ValueError, match=r"^element 1: not valid Unicode"):
        plain_json(["ok", "\ud800"])
    with pytest.raises(ValueError, match=r"^element 0: an integer beyond"):
        plain_json([2**60])


def test_a_metadata_value_keeps_its_json_type_and_a_wrong_one_gets_one_error_saying_what_it_may_be():
    metadata = TypeAdapter(MetadataValue)
    for value in (True, False, 2, 2.5, "2", ["red", "blue"]):
        kept = metadata.validate_python(value)
        assert kept == value and type(kept) is type(value)  # true is not 1, 2 not 2.0, "2" not 2
    what = "Value error, must be a string, a finite number, a boolean or a list of strings"
    for wrong in ({"a": 1}, float("inf"), float("nan"), [1, 2], None):
        assert _errors(metadata, wrong) == [what], wrong
    (message,) = _errors(metadata, 2**60)
    assert "not exact in JSON" in message  # the reason, not the union's list of members


@pytest.mark.parametrize("value", [10.0, 1e1, "10", True, None])
def test_k_and_the_like_take_only_what_every_client_reads_as_an_integer(value):
    with pytest.raises(ValueError, match=r"must be a JSON integer such as 10: .*\(10\.0, 1e1\)"):
        json_integer(value)


def test_json_integer_passes_integers_through():
    assert json_integer(10) == 10 and json_integer(-(2**60)) == -(2**60)


ADDRESSABLE = ["a", "shoes/red", ".x", "..x", "a.b", "x/...", "a..b/c", "...", "a/.b"]
UNADDRESSABLE = [".", "..", "a/./b", "a/..", "../a", "a/.", "./a", "a/b/../c"]


@pytest.mark.parametrize("item_id", ADDRESSABLE + UNADDRESSABLE)
def test_an_id_is_refused_exactly_when_a_dot_segment_would_drop_it_from_the_url(item_id):
    """Clients and fuzzers read ADDRESSABLE_PATTERN (declared only, pydantic's regex lacks look-ahead): it must
    say what `_addressable` enforces."""
    ids = TypeAdapter(ItemId)
    if item_id in ADDRESSABLE:
        assert ids.validate_python(item_id) == item_id
        assert re.match(ADDRESSABLE_PATTERN, item_id)
    else:
        (message,) = _errors(ids, item_id)
        assert "cannot be addressed in a URL (clients drop such path segments): rename it" in message
        assert not re.match(ADDRESSABLE_PATTERN, item_id)


def test_an_id_is_1_to_256_characters_of_valid_unicode():
    ids = TypeAdapter(ItemId)
    assert ids.validate_python("x" * 256) == "x" * 256
    assert "should have at least 1 " in _errors(ids, "")[0]
    assert "should have at most 256 items after validation, not 257" in _errors(ids, "x" * 257)[0]
    assert "not valid Unicode" in _errors(ids, "a\ud800")[0]


def test_a_metadata_key_is_letters_digits_underscore_and_hyphen():
    keys = TypeAdapter(MetadataKey)
    assert keys.validate_python("colour_2-b") == "colour_2-b"
    for bad in ("a b", "a.b", "ü", "", "k" * 257):
        _errors(keys, bad)


def test_a_text_is_blank_exactly_when_python_or_ecmascript_calls_every_character_whitespace():
    """NOT_BLANK is what the service checks a title with, TEXT_PATTERN what the OpenAPI document declares (read with
    ECMAScript's \\s); the catalog blanks a field with str.isspace. All three must call the same texts blank."""
    python_space = {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}
    blank = python_space | ECMASCRIPT_SPACE
    assert {"\x1c", "\x85", "\ufeff", "\u3000", " "} <= blank
    declared = re.compile(TEXT_PATTERN.replace(r"\s", "".join(sorted(ECMASCRIPT_SPACE))))
    for c in map(chr, range(0x10000)):  # every whitespace character of either is in the BMP
        assert (NOT_BLANK.search(c) is None) == (c in blank), hex(ord(c))
        assert (declared.search(c) is None) == (c in blank), hex(ord(c))
    assert NOT_BLANK.search(" \t\u3000a")
