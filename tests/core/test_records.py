"""Point ids: every store keys an item by a UUID derived from its id, the same in every process and release (a
change would orphan every stored point)."""

from __future__ import annotations

import uuid

from metricsearch.core.records import point_id


def test_point_ids_are_fixed_uuids_of_the_item_id():
    assert point_id("a") == "cab31446-6342-5f67-b357-f3a850e7fb05"
    assert point_id("item-42") == "a53bf9fd-69c9-5caf-a5e5-277881320cd2"
    assert uuid.UUID(point_id("any id")).version == 5
    assert len({point_id(str(i)) for i in range(1000)}) == 1000
