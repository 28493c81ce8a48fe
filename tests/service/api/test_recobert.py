"""A bundle whose manifest says metric 'recobert' is served with RecoBERT's fused rerank over the ANN candidates, its
four scores z-normalised with the catalog's statistics (every pair of items, in a catalog this small)."""

from __future__ import annotations

import numpy as np

from metricsearch.core import scoring
from metricsearch.core.bundle import load_bundle
from metricsearch.encoder import Encoder
from metricsearch.service.process import ServiceProcess
from tests.bundles import bundle_variant
from tests.service.api.test_api import ITEMS


def test_recobert_bundle_reranks_by_fused_scores(tiny_bundle, tmp_path):
    lambdas = [1.0, 1.0, 0.5, 0.5]
    bundle = bundle_variant(tiny_bundle, tmp_path / "recobert", metric="recobert", recobert_lambdas=lambdas)

    process = ServiceProcess(bundle, tmp_path / "data", {})
    process.start()
    try:
        with process.client() as client:
            assert client.post("/index", json={"items": ITEMS}).status_code == 200
            assert client.get("/model").json()["metric"] == "recobert"
            results = client.post("/similar", json={"id": "p1", "k": 5}).json()["results"]
    finally:
        process.stop()

    # The same fusion computed here from the bundle's own encoder, over the same candidates (every other item).
    encoder = Encoder(load_bundle(bundle))

    def fields(item):
        vectors = np.zeros((2, encoder.dim), dtype=np.float32)
        vectors[0] = encoder.encode([item["title"]])[0]
        if item["description"]:
            vectors[1] = encoder.encode([item["description"]])[0]
        return vectors

    stored, present = scoring.unpack(scoring.pack(np.stack([fields(i) for i in ITEMS]), [1.0, 1.0]), 2)
    pairs = np.concatenate(
        [
            np.delete(scoring.recobert_parts(stored[n], present[n], stored, present), n, axis=0)
            for n in range(len(ITEMS))
        ]
    )
    mean, std = pairs.mean(axis=0), pairs.std(axis=0)
    others = [n for n, item in enumerate(ITEMS) if item["id"] != "p1"]
    query = next(n for n, item in enumerate(ITEMS) if item["id"] == "p1")
    parts = scoring.recobert_parts(stored[query], present[query], stored[others], present[others])
    expected = ((parts - mean) / std) @ np.array([1.0, 1.0, 0.5, 0.5])
    order = np.argsort(-expected, kind="stable")
    assert [r["id"] for r in results] == [ITEMS[others[i]]["id"] for i in order]
    np.testing.assert_allclose([r["score"] for r in results], expected[order], atol=1e-4)
