"""Delete by filter: both stores remove exactly what brute force says matches, page after page, and answer
searches afterwards as if the items had never been there (the embedded store's in-memory vector rows included)."""

from __future__ import annotations

import pytest

from metricsearch.core.errors import InvalidInputError
from metricsearch.service.store import base
from metricsearch.service.store.base import AnyOf, Equals, Range
from tests.service.store.conftest import Reference, matches
from tests.service.store.test_congruence import assert_matches_reference, populate, query_vector

FILTERS = {
    "equals": (Equals("color", "red"),),
    "any-of-list-element": (AnyOf("tags", ("t1", "t3")),),
    "range-and-bool": (Range("price", gte=2.0, lte=9.0), Equals("new", True)),
    "nothing": (Equals("absent", "x"),),
}


@pytest.mark.parametrize("name", FILTERS)
def test_delete_where_removes_what_brute_force_matches(store, items, name, monkeypatch):
    monkeypatch.setattr(base, "DELETE_PAGE", 7)  # several rounds
    reference = Reference()
    populate(store, reference, items)
    conditions = FILTERS[name]
    doomed = [i for i, item in reference.items.items() if all(matches(item.metadata, c) for c in conditions)]
    assert store.delete_where(conditions) == len(doomed)
    reference.delete(doomed)
    assert store.count() == len(reference.items)
    assert store.get(doomed) == {}
    for seed in range(3):
        expected_ids, _ = reference.search(query_vector(seed), 1000)
        assert_matches_reference(store.search(query_vector(seed), 1000), reference, expected_ids)
    assert store.delete_where(conditions) == 0


def test_delete_where_without_a_condition_is_refused(store, items):
    store.upsert(items(range(5)))
    with pytest.raises(InvalidInputError, match="at least one condition"):
        store.delete_where(())
    assert store.count() == 5
