"""An engine over the tiny bundle and an embedded store, with a few items indexed."""

from __future__ import annotations

import pytest

from metricsearch.core.bundle import load_bundle
from metricsearch.core.records import Item
from metricsearch.encoder import Encoder
from metricsearch.service.cache import AnswerCache
from metricsearch.service.engine import Engine, vector_schema
from metricsearch.service.store import EdgeStore

ITEMS = [
    Item("shirt", "red cotton shirt", "soft and light", {"brand": "acme"}),
    Item("shirt-2", "red linen shirt", "", {"brand": "zeta"}),
    Item("boots", "leather boots", "for winter walks", {"brand": "acme"}),
    Item("hat", "wool winter hat", "warm", {"brand": "boota"}),
]


@pytest.fixture
def engine(tiny_bundle, tmp_path):
    loaded = load_bundle(tiny_bundle)
    store = EdgeStore(tmp_path / "store", vector_schema(loaded), optimize_after_writes=0)
    engine = Engine(
        loaded.manifest, Encoder(loaded), store, candidates_min=10, candidates_factor=3, answers=AnswerCache(100)
    )
    engine.indexer.index(ITEMS)
    yield engine
    engine.close()
    store.close()
