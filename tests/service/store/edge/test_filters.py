"""qdrant-edge's filter classes (store/edge/filters.py), evaluated by the engine itself: on the payloads the embedded
store writes, with values of every kind under one key, the filter `edge_filter` builds keeps exactly the items brute
force keeps (true is not 1, 1 equals 1.0, "1" is neither), with and without a payload index, and leaves out the
excluded ids. The store sends the engine only the filters its payload indexes serve (planner.py) and answers the rest
from its metadata index, so through the store most of these never reach the engine: here each one does."""

from __future__ import annotations

import pytest
from qdrant_edge import EdgeShard, ScrollRequest

from metricsearch.service.store import EdgeStore
from metricsearch.service.store.base import AnyOf, Equals, Range
from metricsearch.service.store.edge.filters import edge_filter
from tests.service.store.conftest import SCHEMA, matches
from tests.service.store.edge.test_exact import ASKED, MIXED, item

STORED = {f"i{n}": {"m": value, "b": value} for n, value in enumerate(MIXED)}
"""Item i<n> holds MIXED[n] under `m` (no payload index) and under `b` (a bool index, as MS_INDEXED_FIELDS=b:bool
makes)."""


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    """The shard the embedded store wrote STORED to, read by the engine itself once the store closed."""
    path = tmp_path_factory.mktemp("edge-filters") / "edge"
    store = EdgeStore(path, SCHEMA, optimize_after_writes=0, indexed_fields={"b": "bool"})
    store.upsert([item(int(i[1:]), meta, 0) for i, meta in STORED.items()])
    store.close()
    (folder,) = path.glob("shard-*")
    opened = EdgeShard.load(str(folder))
    yield opened
    opened.close()


def kept_by_engine(shard: EdgeShard, conditions, exclude_ids=()) -> set[str]:
    request = ScrollRequest(
        limit=1000, filter=edge_filter(conditions, exclude_ids), with_payload=["id"], with_vector=False
    )
    records, following = shard.scroll(request)
    assert following is None
    return {record.payload["id"] for record in records}


def kept_by_brute_force(conditions, exclude_ids=()) -> set[str]:
    return {i for i, meta in STORED.items() if i not in exclude_ids and all(matches(meta, c) for c in conditions)}


@pytest.mark.parametrize("condition", ASKED, ids=repr)
def test_the_engine_keeps_what_brute_force_keeps_for_every_kind_of_value(shard, condition):
    assert kept_by_engine(shard, [condition]) == kept_by_brute_force([condition])


@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_filter_on_a_bool_index_matches_booleans_only(shard, value):
    """What reaches the engine for a key with a bool index: qdrant-edge reads a Python bool as 1 or 0."""
    kept = kept_by_engine(shard, [Equals("b", value)])
    assert kept == kept_by_brute_force([Equals("b", value)])
    assert kept == {f"i{MIXED.index(value)}"}, "the stored 1 (or 0) is no boolean"


def test_every_condition_is_met_and_no_excluded_id_kept(shard):
    assert kept_by_engine(shard, [], ["i0", "i3", "no-such-item"]) == set(STORED) - {"i0", "i3"}
    both = [AnyOf("m", (1, "x")), Range("m", gte=1)]
    assert kept_by_engine(shard, both) == kept_by_brute_force(both) == {"i2", "i3"}
    assert kept_by_engine(shard, both[:1], ["i2"]) == kept_by_brute_force(both[:1], ["i2"]) == {"i3", "i7", "i8"}
