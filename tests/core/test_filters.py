"""The metadata conditions every part passes: values built alike are equal and hashable, immutable once built, a range
is open on a side not given, and a condition's repr (the answer cache's key) keeps a value's JSON type."""

from __future__ import annotations

import dataclasses

import pytest

from metricsearch.core.filters import AnyOf, Equals, Range


def test_conditions_built_alike_are_equal_hashable_and_immutable():
    built = [Equals("brand", "acme"), AnyOf("colour", ("red", "blue")), Range("price", lte=9.5)]
    again = [Equals("brand", "acme"), AnyOf("colour", ("red", "blue")), Range("price", None, 9.5)]
    assert built == again and len({*built, *again}) == 3
    assert Equals("brand", "acme") != Equals("brand", "other") and AnyOf("c", ("a", "b")) != AnyOf("c", ("b", "a"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        built[0].value = "other"  # a request's conditions are shared with the cache: no one may change them


def test_a_range_is_open_on_a_side_not_given():
    assert (Range("price").gte, Range("price").lte) == (None, None)
    assert (Range("price", gte=2).gte, Range("price", gte=2).lte) == (2, None)


def test_a_conditions_repr_keeps_the_json_type_of_its_value():
    """The service caches answers under the repr of a request's conditions (service/engine/engine.py): the filters
    true, 1, "1" and 1.5 match different items, so their keys must differ (Python's True == 1 would not tell)."""
    assert len({repr(Equals("n", v)) for v in (True, 1, "1", 1.5)}) == 4
    assert repr(AnyOf("n", (1,))) != repr(AnyOf("n", ("1",)))
