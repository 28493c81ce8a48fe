"""The embedded store's files (store/edge/layout.py): a store of another bundle or a foreign folder is refused, one
process owns a store, and copies a crashed build left are removed at open."""

from __future__ import annotations

from dataclasses import replace

import pytest

from metricsearch.core.errors import StoreMismatchError, StoreUnavailableError
from metricsearch.service.store import EdgeStore
from tests.service.store.conftest import SCHEMA
from tests.service.store.edge.test_store import shard_dirs


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
