"""The service's lifecycle in process: start-up serves the store a swap committed and removes what an interrupted
rollout left; the app reads the live runtime from the service, so a swap needs nothing patched."""

from __future__ import annotations

import math

from fastapi.testclient import TestClient

from metricsearch.core.errors import StoreUnavailableError
from metricsearch.core.records import Item
from metricsearch.service.api.app import create_app
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service


def test_start_up_removes_the_stores_an_interrupted_rollout_left(tiny_bundle, tmp_path):
    left = tmp_path / "items.r4"
    left.mkdir(parents=True)
    (tmp_path / "other.r1").mkdir()  # another collection's: not ours to remove
    service = Service(Settings(bundle_dir=tiny_bundle, data_dir=tmp_path))
    try:
        assert not left.exists() and (tmp_path / "other.r1").exists()
        assert service.live.store.count() == 0
    finally:
        service.live.close()


def test_the_app_serves_the_runtime_a_swap_made_live(tiny_bundle, bundle_b, tmp_path):
    service = Service(Settings(bundle_dir=tiny_bundle, data_dir=tmp_path))
    with TestClient(create_app(service)) as client:
        service.live.engine.indexer.index([Item("a", "red cotton shirt"), Item("b", "blue linen shirt")])
        assert client.get("/model").json()["name"] == "tiny-bert"
        service.rollout.start(str(bundle_b))
        while service.rollout.status().state == "copying":
            client.get("/healthz")
        old = service.live
        assert client.post("/admin/rollout/swap").status_code == 200
        assert service.live is not old
        assert client.get("/model").json()["name"] == "tiny-bert-b"
        assert [r["id"] for r in client.post("/similar", json={"id": "a", "k": 1}).json()["results"]] == ["b"]
        assert service.metrics.registry.get_sample_value("metricsearch_items") == 2


def test_the_item_count_is_nan_while_the_store_does_not_answer(tiny_bundle, tmp_path, monkeypatch):
    service = Service(Settings(bundle_dir=tiny_bundle, data_dir=tmp_path))
    try:
        assert service.metrics.registry.get_sample_value("metricsearch_items") == 0

        def unreachable() -> int:
            raise StoreUnavailableError("the store is out of reach")

        monkeypatch.setattr(service.live.store, "count", unreachable)
        assert math.isnan(service.metrics.registry.get_sample_value("metricsearch_items"))
    finally:
        service.live.close()
