"""A search whose candidates hold the whole catalog answers what a rerank of every item, sorted by hand, gives: the
same ids in the same order, the same scores and components, for a narrow and a wide page."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from metricsearch.core.fusion import DEFAULT_FUSION
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service
from metricsearch.service.store.base import Equals
from tests.service.catalogs import catalog_items

N_ITEMS = 150


@pytest.fixture(scope="module")
def engine(tiny_bundle, tmp_path_factory):
    folder = tmp_path_factory.mktemp("exact")
    bundle = folder / "bundle"
    shutil.copytree(tiny_bundle, bundle)
    manifest = json.loads((bundle / "bundle.json").read_text())
    manifest["fusion"] = {"weights": DEFAULT_FUSION, "chosen_by": "test"}
    (bundle / "bundle.json").write_text(json.dumps(manifest))
    # At least N_ITEMS candidates for any k: every search reranks the whole (filtered) catalog.
    runtime = Service(Settings(bundle_dir=bundle, data_dir=folder / "data", candidates_min=N_ITEMS)).live
    runtime.engine.indexer.index(catalog_items(N_ITEMS))
    yield runtime.engine
    runtime.close()


def exact(engine, query_id: str, k: int, conditions) -> list[tuple]:
    """Every other item meeting `conditions`, read as a search reads it, reranked, then sorted by hand best first
    with ties by id: (id, score, components) each."""
    query = engine.queries.of_id(query_id)
    everything = engine.store.search(engine.layout.packed(query.vectors), N_ITEMS, conditions, [query_id])
    wanted = {f"i{n}" for n in range(N_ITEMS) if all(c.value == ("a" if n % 2 else "b") for c in conditions)}
    assert set(everything.ids) == wanted - {query_id}
    candidates = engine.layout.stored(everything.vectors)
    lexical = engine.ranker.lexical.score(query.terms, candidates.present, everything.points)
    ranked = engine.rerank(query.vectors, candidates, lexical, engine.statistics.current())
    rows = [
        (
            i,
            float(ranked.scores[n]),
            {c: float(v[n]) if math.isfinite(v[n]) else None for c, v in ranked.components.items()},
        )
        for n, i in enumerate(everything.ids)
    ]
    return sorted(rows, key=lambda row: (-row[1], row[0]))[:k]


@pytest.mark.parametrize("k", [10, 100])
@pytest.mark.parametrize("shop", [None, "a"])
def test_answer_is_the_exact_rerank_of_every_item(engine, k, shop):
    conditions = [Equals("shop", shop)] if shop else []
    for query_id in ("i3", "i10", "i41", "i77"):
        served = engine.similar_to_item(query_id, k, conditions)
        assert [(m.id, m.score, m.field_scores) for m in served] == exact(engine, query_id, k, conditions)
