"""Evaluate what you serve: a fused bundle scored in-process by the evaluation gives the scores the service's own
catalog gives for the same items (the same lexical scores, character n-grams included, idf, statistics sample and
fusion)."""

from __future__ import annotations

import numpy as np
import pytest

from metricsearch.core.bundle import FUSION_COMPONENTS
from metricsearch.core.records import Item
from metricsearch.evaluation import BundleScorer, EvalData
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service
from tests.bundles import bundle_variant
from tests.service.catalogs import catalog_items


@pytest.mark.parametrize("ngrams", [False, True], ids=["words", "words+ngrams"])
def test_in_process_fused_scores_equal_the_services(tiny_bundle, tmp_path, ngrams):
    weights = {**dict.fromkeys(FUSION_COMPONENTS, 1.0), "description": 0.5}
    if not ngrams:
        weights = {name: w for name, w in weights.items() if not name.startswith("ngrams_")}
    fusion = {"weights": weights, "chosen_by": "test"}
    bundle = bundle_variant(tiny_bundle, tmp_path / "hybrid", ngrams=ngrams, fusion=fusion)
    items = catalog_items(60)
    runtime = Service(Settings(bundle_dir=bundle, data_dir=tmp_path / "data", candidates_min=100)).live
    try:
        runtime.engine.indexer.index(items)
        served = {q: {m.id: m.score for m in runtime.engine.similar_to_item(q, 100)} for q in ("i1", "i5", "i8")}
    finally:
        runtime.close()

    position = {item.id: n for n, item in enumerate(items)}
    queries = [items[position[q]] for q in served]
    data = EvalData(
        task="annotated",
        source="test",
        queries=queries,
        candidates=items,
        relevant=[[0]] * len(queries),
        own_index=[position[q.id] for q in queries],
    )
    scores = BundleScorer(bundle).scores(data)
    for row, (query, answers) in enumerate(served.items()):
        assert len(answers) == len(items) - 1
        for item_id, score in answers.items():
            np.testing.assert_allclose(scores[row, position[item_id]], score, rtol=1e-4, atol=1e-4, err_msg=query)


def test_lexical_baseline_finds_a_part_number(tmp_path):
    from metricsearch.evaluation import baseline_scorers

    (scorer,) = baseline_scorers(["lexical"], tmp_path)
    candidates = [Item("a", "kettle PS-LX350H"), Item("b", "kettle steel"), Item("c", "mug")]
    data = EvalData("catalog-match", "t", [Item("q", "PSLX350H kettle")], candidates, [[0]], [None])
    assert np.argmax(scorer.scores(data)[0]) == 0
