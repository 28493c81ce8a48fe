"""GET /model: the served manifest, and the fusion weights requests rank with now and why, whether the bundle fixes
them or its adaptive rule chose them on the catalog."""

from __future__ import annotations

from fastapi.testclient import TestClient

from metricsearch.service.api.app import create_app
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service
from tests.service.catalogs import catalog_items
from tests.service.engine.test_statistics import ADAPTIVE, adaptive_service


def test_model_shows_the_weights_an_adaptive_rule_chose_and_why(tiny_bundle, tmp_path):
    service = adaptive_service(tiny_bundle, tmp_path, catalog_items(60))
    with TestClient(create_app(service)) as client:
        service.live.engine.statistics.warm()
        model = client.get("/model").json()
    assert model["fusion"]["adaptive"]["gate"] == ADAPTIVE["adaptive"]["gate"]
    chosen, why = service.live.engine.statistics.fusion_in_use()
    assert model["fusion_in_use"] == {"weights": dict(chosen), "chosen_by": why}
    assert why.startswith("test rule; near-duplicates") and model["fusion_in_use"]["weights"] != ADAPTIVE["weights"]


def test_model_shows_no_fusion_in_use_for_a_bundle_without_fusion(tiny_bundle, tmp_path):
    service = Service(Settings(bundle_dir=tiny_bundle, data_dir=tmp_path))
    with TestClient(create_app(service)) as client:
        model = client.get("/model").json()
    assert model["fusion"] is None and model["fusion_in_use"] is None
