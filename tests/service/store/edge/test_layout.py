"""The embedded store's files (store/edge/layout.py): a store of another bundle or a foreign folder is refused, one
process owns a store, copies a crashed build left are removed at open, and a store (or snapshot) of format 1 is
upgraded at open to one that answers as a new store does."""

from __future__ import annotations

import json
import tarfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from qdrant_edge import PayloadSchemaType, Point, UpdateOperation
from qdrant_edge import SparseVector as EdgeSparseVector

from metricsearch.core.errors import StoreMismatchError, StoreUnavailableError
from metricsearch.core.lexical import term_vector
from metricsearch.core.records import point_id
from metricsearch.service.config import Settings
from metricsearch.service.store import EdgeStore
from metricsearch.service.store.base import Equals, StoredItem, VectorSchema
from metricsearch.service.store.edge import layout
from metricsearch.service.store.payload import sparse_lists, to_payload, vector_lists
from tests.service.store.conftest import SCHEMA
from tests.service.store.edge.test_store import shard_dirs
from tests.service.store.test_lexical import SCHEMA as LEXICAL
from tests.service.store.test_lexical import items as lexical_items


@pytest.mark.parametrize(
    ("other", "needle"),
    [
        (replace(SCHEMA, sizes={"title": 8, "description": 16}), "'description': 16"),
        (replace(SCHEMA, sizes={"title": 8}), "{'title': 8}"),
        (replace(SCHEMA, identity="other-bundle@2"), "'other-bundle@2'"),
    ],
)
def test_store_of_another_bundle_refused(tmp_path, items, other, needle):
    EdgeStore(tmp_path / "s", SCHEMA).close()
    with pytest.raises(StoreMismatchError) as error:
        EdgeStore(tmp_path / "s", other)
    message = str(error.value)
    assert "'test-bundle@1'" in message and "{'title': 8, 'description': 12}" in message and needle in message
    assert "MS_DATA_DIR" in message and "re-index" in message
    EdgeStore(tmp_path / "s", SCHEMA).close()  # the refused open changed nothing


def test_foreign_folder_refused(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "notes.txt").write_text("mine")
    with pytest.raises(StoreMismatchError, match="not a metricsearch store"):
        EdgeStore(tmp_path / "s", SCHEMA)


def test_one_owner(edge_store, tmp_path):
    with pytest.raises(StoreUnavailableError, match="already open"):
        EdgeStore(tmp_path / "edge", SCHEMA)
    assert edge_store.readiness() is None


def test_copies_left_by_a_crash_are_removed(tmp_path, items):
    EdgeStore(tmp_path / "s", SCHEMA).close()
    (tmp_path / "s" / "shard-2" / "segments").mkdir(parents=True)
    store = EdgeStore(tmp_path / "s", SCHEMA)
    try:
        assert shard_dirs(tmp_path / "s") == ["shard-1"]
        store.upsert(items(range(3)))
        assert store.count() == 3
    finally:
        store.close()


def format_one_store(path: Path, schema: VectorSchema, stored: list[StoredItem]) -> None:
    """A store as format 1 wrote it: each point keyed by its item's UUID (core.records.point_id), a payload index
    on a metadata key, and a store.json of format 1."""
    path.mkdir(parents=True)
    shard = layout.open_shard(path, layout.shard_dir(path, 1), layout.engine_config(schema, None))
    points = [
        Point(
            point_id(item.id),
            {
                **vector_lists(item, schema.sizes),
                **{name: EdgeSparseVector(*terms) for name, terms in sparse_lists(item, schema.sparse).items()},
            },
            to_payload(item),
        )
        for item in stored
    ]
    shard.update(UpdateOperation.upsert_points(points))
    shard.update(UpdateOperation.create_field_index("metadata.shop", PayloadSchemaType.Keyword))
    shard.flush()
    shard.close()
    state = {"format": 1, "identity": schema.identity, "sizes": dict(schema.sizes), "generation": 1}
    (path / layout.SIDECAR).write_text(json.dumps(state))


def test_a_format_one_store_is_upgraded_at_open_and_answers_as_a_new_one(tmp_path):
    stored = lexical_items(np.random.default_rng(0))
    format_one_store(tmp_path / "old", LEXICAL, stored)
    upgraded = EdgeStore(tmp_path / "old", LEXICAL, optimize_after_writes=0)
    fresh = EdgeStore(tmp_path / "new", LEXICAL, optimize_after_writes=0)
    try:
        fresh.upsert(stored)
        assert json.loads((tmp_path / "old" / layout.SIDECAR).read_text())["format"] == layout.FORMAT
        assert shard_dirs(tmp_path / "old") == ["shard-2"]
        assert upgraded.count() == len(stored)
        assert upgraded.metadata_kinds("shop") == {"keyword"} and upgraded._payload_indexes == {"shop": "keyword"}
        ids = [item.id for item in stored]
        old_items, new_items = upgraded.get(ids, with_vectors=True), fresh.get(ids, with_vectors=True)
        for item_id in ids:
            old, new = old_items[item_id], new_items[item_id]
            assert (old.title, old.metadata, old.content_hash) == (new.title, new.metadata, new.content_hash)
            np.testing.assert_allclose(old.vectors["ann"], new.vectors["ann"], atol=1e-6)
            assert old.sparse.keys() == new.sparse.keys(), item_id
            for name, terms in new.sparse.items():
                np.testing.assert_array_equal(old.sparse[name].indices, terms.indices)
                np.testing.assert_allclose(old.sparse[name].values, terms.values, rtol=1e-6)
        query = term_vector("sony turntable")
        for conditions in [(), (Equals("shop", "a"),)]:
            a, b = (
                s.search(stored[0].vectors["ann"], 5, conditions, ["i1"], {"lex_title": query}, {"lex_title": query})
                for s in (upgraded, fresh)
            )
            assert a.ids == b.ids and a.points == b.points
            np.testing.assert_allclose(a.lexical["lex_title"], b.lexical["lex_title"], rtol=1e-6)
    finally:
        upgraded.close()
        fresh.close()
    EdgeStore(tmp_path / "old", LEXICAL, optimize_after_writes=0).close()
    assert shard_dirs(tmp_path / "old") == ["shard-2"], "an upgraded store opens as it is"


def test_a_snapshot_of_format_one_restores_upgraded(tmp_path):
    stored = lexical_items(np.random.default_rng(0))
    format_one_store(tmp_path / "old", LEXICAL, stored)
    archive = tmp_path / "old.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for entry in (tmp_path / "old").iterdir():
            tar.add(entry, arcname=entry.name)
    for overwrite in (False, True):  # into a new folder, and over the store the first restore made
        settings = Settings(data_dir=tmp_path / "restored")
        assert EdgeStore.restore_snapshot(settings, LEXICAL, archive, overwrite=overwrite).items == len(stored)
        store = EdgeStore(tmp_path / "restored" / settings.collection, LEXICAL, optimize_after_writes=0)
        try:
            assert set(store.get([item.id for item in stored])) == {item.id for item in stored}
        finally:
            store.close()


def test_a_store_of_a_newer_format_is_refused(tmp_path):
    EdgeStore(tmp_path / "s", SCHEMA).close()
    sidecar = tmp_path / "s" / layout.SIDECAR
    sidecar.write_text(json.dumps(json.loads(sidecar.read_text()) | {"format": layout.FORMAT + 1}))
    with pytest.raises(StoreMismatchError, match="newer metricsearch"):
        EdgeStore(tmp_path / "s", SCHEMA)


def test_an_upgrade_that_meets_two_items_of_one_key_stops_and_keeps_the_old_store(tmp_path, monkeypatch):
    stored = lexical_items(np.random.default_rng(0))
    format_one_store(tmp_path / "old", LEXICAL, stored)
    with monkeypatch.context() as patched:
        patched.setattr(layout, "point_key", lambda item_id: 7)
        with pytest.raises(StoreMismatchError, match="share a point key"):
            EdgeStore(tmp_path / "old", LEXICAL, optimize_after_writes=0)
    assert json.loads((tmp_path / "old" / layout.SIDECAR).read_text())["format"] == 1
    store = EdgeStore(tmp_path / "old", LEXICAL, optimize_after_writes=0)  # with distinct keys, the next open upgrades
    try:
        assert store.count() == len(stored) and shard_dirs(tmp_path / "old") == ["shard-2"]
    finally:
        store.close()


def test_an_upgrade_that_fails_midway_says_what_to_do_and_leaves_the_old_store(tmp_path, monkeypatch):
    stored = lexical_items(np.random.default_rng(0))
    format_one_store(tmp_path / "old", LEXICAL, stored)

    def disk_full(old, new, vectors):
        new.update(UpdateOperation.upsert_points([]))
        raise RuntimeError("No space left on device (os error 28)")

    with monkeypatch.context() as patched:
        patched.setattr(layout, "_copy_points", disk_full)
        with pytest.raises(StoreUnavailableError, match=r"No space left.*unchanged.*free as much disk"):
            EdgeStore(tmp_path / "old", LEXICAL, optimize_after_writes=0)
    assert shard_dirs(tmp_path / "old") == ["shard-1"], "the half-written copy is removed"
    assert json.loads((tmp_path / "old" / layout.SIDECAR).read_text())["format"] == 1
    store = EdgeStore(tmp_path / "old", LEXICAL, optimize_after_writes=0)
    try:
        assert store.count() == len(stored)
    finally:
        store.close()


def test_a_point_without_an_item_id_stops_the_upgrade_with_a_message(tmp_path):
    stored = lexical_items(np.random.default_rng(0))
    format_one_store(tmp_path / "old", LEXICAL, stored)
    shard = layout.open_shard(
        tmp_path / "old", layout.shard_dir(tmp_path / "old", 1), layout.engine_config(LEXICAL, None)
    )
    shard.update(UpdateOperation.upsert_points([Point(point_id("stray"), {"ann": [1.0] * 8}, {"title": "no id"})]))
    shard.close()
    with pytest.raises(StoreMismatchError, match=r"holds no item id.*damaged.*snapshot restore"):
        EdgeStore(tmp_path / "old", LEXICAL, optimize_after_writes=0)
    assert shard_dirs(tmp_path / "old") == ["shard-1"]
