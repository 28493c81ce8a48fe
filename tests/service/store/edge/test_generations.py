"""The embedded store's stores over model rollouts (store/edge/generations.py): the folders `<collection>.r<n>` a
rollout adds, `serving.json` as the commit point that a restart follows, and what is removed after. The rollout
itself is tested end to end in tests/service/test_rollout.py."""

from __future__ import annotations

import json

import pytest

from metricsearch.core.errors import StoreMismatchError
from metricsearch.service.config import Settings
from metricsearch.service.store import EdgeStore, generations
from tests.service.store.conftest import SCHEMA


def test_a_commit_is_served_after_a_restart_and_the_rest_is_removed(tmp_path):
    settings = Settings(data_dir=tmp_path, collection="items", bundle_dir=tmp_path / "bundle-a")
    folders = generations(settings)
    assert folders.serving() == settings, "nothing swapped in: the configured store and bundle"
    for name in ("items", "items.r1", "other"):
        (tmp_path / name).mkdir()
    assert folders.next_name() == "items.r2"
    new = settings.model_copy(update={"collection": "items.r2", "bundle_dir": tmp_path / "bundle-b"})
    (tmp_path / "items.r2").mkdir()
    folders.commit(new)
    served = generations(settings).serving()
    assert (served.collection, served.bundle_dir) == ("items.r2", tmp_path / "bundle-b")
    folders.remove_leftovers(served)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["items.r2", "items.serving.json", "other"]


def test_drop_removes_a_closed_store(tmp_path):
    store = EdgeStore(tmp_path / "items.r1", SCHEMA)
    store.close()
    generations(Settings(data_dir=tmp_path, collection="items")).drop(store)
    assert not (tmp_path / "items.r1").exists()


def test_a_damaged_or_dangling_pointer_names_the_file(tmp_path):
    settings = Settings(data_dir=tmp_path, collection="items")
    pointer = tmp_path / "items.serving.json"
    pointer.write_text("{")
    with pytest.raises(StoreMismatchError, match=r"items\.serving\.json is damaged"):
        generations(settings).serving()
    pointer.write_text(json.dumps({"collection": "items.r3", "bundle_dir": str(tmp_path)}))
    with pytest.raises(StoreMismatchError, match="which is gone"):
        generations(settings).serving()
