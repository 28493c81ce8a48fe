"""The one filter translation (store/filters.py), through a node builder that records what it is asked: numbers by
value as ranges, strings as matches, an `in` of many numbers as a tree that checks each span before its halves, and
the search filter around them. Both engines' builders are held to the same answers by the congruence tests."""

from __future__ import annotations

from metricsearch.service.store.base import AnyOf, Equals, Range
from metricsearch.service.store.filters import LEAF, condition_node, engine_filter


class Recorded:
    """Nodes as tuples, so a translation can be compared whole."""

    def equals(self, path, value):
        return ("equals", path, value)

    def any_of(self, path, strings):
        return ("any_of", path, tuple(strings))

    def between(self, path, gte, lte):
        return ("between", path, gte, lte)

    def either(self, nodes):
        return ("either", *nodes)

    def all_of(self, nodes):
        return ("all_of", *nodes)

    def point(self, item_id):
        return ("point", item_id)

    def search_filter(self, must, excluded_points):
        return ("filter", tuple(must), tuple(excluded_points))


NODES = Recorded()


def numbers_met(node, value) -> bool:
    """Whether a number meets a recorded tree of ranges, as an engine would evaluate it."""
    kind, *rest = node
    if kind == "between":
        _, low, high = rest
        return (low is None or value >= low) and (high is None or value <= high)
    if kind == "either":
        return any(numbers_met(n, value) for n in rest)
    assert kind == "all_of"
    return all(numbers_met(n, value) for n in rest)


def leaves(node) -> int:
    kind, *rest = node
    return 1 if kind == "between" else sum(leaves(n) for n in rest)


def test_conditions_become_matches_and_ranges_on_the_metadata_path():
    assert condition_node(Equals("color", "red"), NODES) == ("equals", "metadata.color", "red")
    assert condition_node(Equals("new", True), NODES) == ("equals", "metadata.new", True), "true is not 1"
    assert condition_node(Equals("year", 2001), NODES) == ("between", "metadata.year", 2001, 2001), "2001 = 2001.0"
    assert condition_node(Range("price", gte=2.5), NODES) == ("between", "metadata.price", 2.5, None)
    assert condition_node(AnyOf("color", ("red", "blue")), NODES) == ("any_of", "metadata.color", ("red", "blue"))
    assert condition_node(AnyOf("color", ()), NODES) == ("any_of", "metadata.color", ()), "matches nothing"
    assert condition_node(AnyOf("k", ("a", 1)), NODES) == (
        "either",
        ("any_of", "metadata.k", ("a",)),
        ("between", "metadata.k", 1, 1),
    )


def test_many_numbers_form_a_tree_that_meets_exactly_those_numbers():
    numbers = [9, 3, 3, 100, -4, 7, 50, 12, 0, 81, 2]
    node = condition_node(AnyOf("k", tuple(numbers)), NODES)
    assert leaves(node) > len(set(numbers)), "spans are checked before their halves"
    for value in range(-10, 110):
        assert numbers_met(node, value) == (value in numbers), value
    small = condition_node(AnyOf("k", tuple(range(LEAF))), NODES)
    assert small[0] == "either" and leaves(small) == LEAF, "a few numbers are checked one by one"


def test_the_search_filter_holds_the_conditions_and_the_excluded_points():
    assert engine_filter([], [], NODES) is None
    assert engine_filter([Equals("a", "x")], [], NODES) == ("filter", (("equals", "metadata.a", "x"),), ())
    assert engine_filter([], ["item-1"], NODES) == ("filter", (), (("point", "item-1"),))
