"""The hot-path profile's stages: the embedded engine's native time, sampled in the Python frame that calls it, is
the engine's, not metricsearch's store code's."""

from __future__ import annotations

import inspect

from bench.profile import ENGINE, IDLE, stage_of
from metricsearch.service.store.edge.store import EdgeStore

STORE = inspect.getsourcefile(EdgeStore)
SOURCE, FIRST = inspect.getsourcelines(EdgeStore._engine_hits)
CALL = FIRST + next(n for n, line in enumerate(SOURCE) if "shard.query(" in line)
REQUEST = ("Engine.answer", "/x/metricsearch/service/engine/engine.py", "150")


def test_a_sample_in_the_line_calling_the_engine_is_the_engine_s():
    assert stage_of([REQUEST, ("EdgeStore._engine_hits", STORE, str(CALL))]) == ENGINE
    assert stage_of([REQUEST, ("EdgeStore._engine_hits", STORE, str(FIRST))]).startswith("store: metricsearch")
    assert stage_of([REQUEST, ("Ranker.rank", "/x/metricsearch/service/engine/ranker.py", "1")]).startswith("service")
    assert stage_of([]) == IDLE
