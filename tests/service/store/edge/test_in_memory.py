"""The embedded store's in-memory copies (store/edge/in_memory.py), as a restart loads them from the shard: a store of
more points than one page of the load (2,048) answers after a reopen as it did before, each item with its listing,
its dense and sparse vectors and its metadata, replaced items in their last version and deleted ones gone. How the
copies follow each write is tested with the writes (test_congruence.py, test_lexical.py, test_metadata_index.py)."""

from __future__ import annotations

import numpy as np

from metricsearch.core.lexical import term_vector
from metricsearch.service.store import EdgeStore
from metricsearch.service.store.base import Equals, Range, StoredItem, VectorSchema
from tests.service.store.conftest import matches, unit

SCHEMA = VectorSchema(sizes={"ann": 4, "other": 3}, ann="ann", identity="in-memory-test@1", sparse=("lex",))
N_ITEMS = 2100
"""More points than the load reads a page."""


def catalog(ids: range, version: int) -> list[StoredItem]:
    rng = np.random.default_rng(version)
    made = []
    for n in ids:
        title = "" if n % 97 == 0 else f"part p{n} v{version} word{n % 40}"  # a few items without terms
        made.append(
            StoredItem(
                id=f"i{n}",
                title=title or "-",
                description="",
                metadata={"shop": "abc"[n % 3], "n": n, "version": version},
                content_hash=f"{n}-{version}",
                vectors={name: rng.normal(size=size).astype(np.float32) for name, size in SCHEMA.sizes.items()},
                sparse={"lex": term_vector(title)},
            )
        )
    return made


def test_a_reopened_store_of_many_pages_holds_every_item_as_written(tmp_path):
    written = {it.id: it for it in catalog(range(N_ITEMS), 0)}
    replaced = catalog(range(2040, 2060), 1)  # across the first page's end
    deleted = ["i3", "i2047", "i2099"]
    store = EdgeStore(tmp_path / "edge", SCHEMA, optimize_after_writes=0)
    store.upsert(list(written.values()))
    store.upsert(replaced)
    assert store.delete(deleted) == len(deleted)
    written.update((it.id, it) for it in replaced)
    for i in deleted:
        del written[i]
    ids = sorted(written)
    queries = {"lex": term_vector("part p2050 word10 p5")}
    before = store.lexical_scores(queries, store.points(ids))["lex"]
    assert np.count_nonzero(before) > 40
    store.close()

    store = EdgeStore(tmp_path / "edge", SCHEMA, optimize_after_writes=0)
    try:
        assert store.count() == len(written)
        np.testing.assert_array_equal(store.lexical_scores(queries, store.points(ids))["lex"], before)
        read = store.get([*ids, *deleted], with_vectors=True)
        assert read.keys() == written.keys()
        for item_id, item in read.items():
            wanted = written[item_id]
            assert (item.title, item.metadata, item.content_hash) == (
                wanted.title,
                wanted.metadata,
                wanted.content_hash,
            )
            for name in SCHEMA.sizes:
                np.testing.assert_allclose(item.vectors[name], unit(wanted.vectors[name]), atol=1e-6)
            if len(wanted.sparse["lex"]):
                np.testing.assert_array_equal(item.sparse["lex"].indices, wanted.sparse["lex"].indices)
                np.testing.assert_allclose(item.sparse["lex"].values, wanted.sparse["lex"].values, atol=1e-6)
            else:
                assert "lex" not in item.sparse, "an empty sparse vector is not stored"

        query = np.random.default_rng(9).normal(size=SCHEMA.sizes["ann"]).astype(np.float32)
        found = store.search(query, N_ITEMS)
        assert sorted(found.ids) == ids
        for at, listing in enumerate(found.listings):  # each hit's listing and vectors read from the same row
            wanted = written[listing.id]
            assert (listing.title, listing.metadata) == (wanted.title, wanted.metadata)
            np.testing.assert_allclose(found.vectors["other"][at], unit(wanted.vectors["other"]), atol=1e-6)
        # Answered from the metadata index the load filled (no payload index serves them).
        for conditions in ([Equals("shop", "b")], [Equals("version", 1)], [Range("n", gte=2048)]):
            expected = {i for i, it in written.items() if all(matches(it.metadata, c) for c in conditions)}
            assert 0 < len(expected) < len(written)
            assert set(store.search(query, N_ITEMS, conditions).ids) == expected, conditions
    finally:
        store.close()
