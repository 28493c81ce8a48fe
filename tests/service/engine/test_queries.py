"""Queries: the texts a text query encodes, a stored item as the query of its own texts, ids not stored named in a
404, and a text query that waits past the request timeout for the encoder."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from metricsearch.core.errors import NotFoundError, TimedOutError
from metricsearch.service.engine import TextQuery
from metricsearch.service.engine.queries import Query, QueryBuilder


def test_the_texts_a_text_query_encodes(engine):
    texts = engine.queries.texts
    assert texts(TextQuery(text="red shirt")) == ["red shirt"]
    assert texts(TextQuery(title="red shirt", description="  ")) == ["red shirt"]
    assert texts(TextQuery(title="red shirt", description="soft")) == ["red shirt", "soft"]


def test_a_stored_item_is_the_query_of_its_own_texts(engine):
    stored = engine.queries.of_id("shirt")
    encoded = engine.encoder.encode(["red cotton shirt", "soft and light"])
    from_texts = engine.layout.from_texts(encoded, free_text=False)
    np.testing.assert_allclose(stored.vectors.fields, from_texts.fields, atol=1e-5)
    assert stored.vectors.present.tolist() == from_texts.present.tolist() == [True, True]
    assert stored.terms.keys() == engine.queries.terms(TextQuery(title="red cotton shirt", description="soft")).keys()


def test_ids_not_stored_are_named_in_the_404(engine):
    with pytest.raises(NotFoundError, match="'nope'"):
        engine.queries.of_id("nope")
    with pytest.raises(NotFoundError, match="negative id 'gone' is not stored"):
        engine.queries.of_ids(["hat", "gone", "also-gone"], "negative id")
    assert len(engine.queries.of_ids(["hat", "boots"], "positive id")) == 2


class _StuckBatcher:
    async def encode(self, texts: list[str]) -> np.ndarray:
        await asyncio.sleep(60)
        raise AssertionError("not reached")


def test_a_text_query_waits_no_longer_than_the_request_timeout(engine):
    queries = QueryBuilder(engine.store, engine.layout, None, _StuckBatcher(), timeout_s=0.05)
    with pytest.raises(TimedOutError, match="MS_REQUEST_TIMEOUT_S"):
        asyncio.run(queries.of_texts([TextQuery(text="red shirt")]))


def test_a_stored_item_s_query_searches_with_its_stored_ann_vector(engine):
    """The packed vector the indexer stored is the ANN query of a query by id: the same ranking as packing its
    per-field vectors again, without the work."""
    stored = engine.queries.of_id("shirt")
    np.testing.assert_array_equal(stored.ann, engine.store.get(["shirt"], with_vectors=True)["shirt"].vectors["ann"])
    np.testing.assert_allclose(stored.ann, engine.layout.packed(stored.vectors), atol=1e-6)
    repacked = engine.ranker.rank([Query(stored.vectors, stored.terms)], 3, exclude_ids=["shirt"])
    assert engine.ranker.rank([stored], 3, exclude_ids=["shirt"]) == repacked
