"""Files written whole or not at all (store/atomic.py): a write that fails leaves the old file and no partial one,
one that succeeds replaces it."""

from __future__ import annotations

import pytest

from metricsearch.service.store.atomic import fsync_tree, written_whole


def test_a_file_is_replaced_only_when_written_whole(tmp_path):
    target = tmp_path / "store.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), written_whole(target) as partial:
        partial.write_text("half")
        raise RuntimeError("killed")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["store.json"]
    with written_whole(target) as partial:
        assert partial != target
        partial.write_text("new")
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["store.json"]


def test_a_tree_is_synced_file_by_file(tmp_path):
    (tmp_path / "wal").mkdir()
    (tmp_path / "wal" / "segment").write_bytes(b"x")
    fsync_tree(tmp_path)
    (tmp_path / "wal" / "link").symlink_to(tmp_path / "wal" / "retired")  # a file the engine removed meanwhile
    with pytest.raises(FileNotFoundError):
        fsync_tree(tmp_path)
    fsync_tree(tmp_path, missing_ok=True)
