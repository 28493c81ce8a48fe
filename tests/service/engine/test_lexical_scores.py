"""The lexical candidates of several queries come from their whole texts' terms summed, in one sparse prefetch; a
bundle's character n-gram components are scored in either store as a brute-force TF-IDF scores them."""

from __future__ import annotations

import numpy as np
import pytest
from qdrant_client import QdrantClient

from metricsearch.core.bundle import load_bundle
from metricsearch.core.lexical import WHOLE_TEXT
from metricsearch.encoder import Encoder
from metricsearch.service.engine import Engine, vector_schema
from metricsearch.service.store import EdgeStore, RemoteStore
from tests.bundles import bundle_variant
from tests.core.test_lexical import brute_force_ngrams
from tests.service.catalogs import catalog_items


def test_the_prefetch_of_several_queries_sums_their_whole_text_terms(engine):
    lexical = engine.ranker.lexical
    whole = lexical.lexical.names[WHOLE_TEXT]
    red = lexical.lexical.queries("red shirt", None)
    blue = lexical.lexical.queries("blue shirt", None)
    assert lexical.prefetch([red]) == {whole: red[whole]}
    [(name, summed)] = lexical.prefetch([red, blue]).items()
    assert name == whole
    expected: dict[int, float] = {}
    for terms in (red, blue):
        for index, value in zip(terms[whole].indices.tolist(), terms[whole].values.tolist(), strict=True):
            expected[index] = expected.get(index, 0.0) + value
    assert dict(zip(summed.indices.tolist(), summed.values.tolist(), strict=True)) == expected
    assert np.all(np.diff(summed.indices) > 0)
    assert lexical.prefetch([{}]) is None


@pytest.mark.parametrize("remote", [False, True], ids=["edge", "remote-local"])
def test_a_bundle_with_ngrams_shows_them_as_a_brute_force_tfidf_over_the_catalog(tiny_bundle, tmp_path, remote):
    """Indexed with their words, asked by id in either store: each match's n-gram components are scikit-learn's
    TF-IDF of the same n-grams over the catalog's fields (None where the match lacks the field)."""
    loaded = load_bundle(bundle_variant(tiny_bundle, tmp_path / "bundle", ngrams=True))
    schema = vector_schema(loaded)
    assert {"ngrams_title", "ngrams_description", "ngrams_text"} <= set(schema.sparse)
    if remote:
        store = RemoteStore(QdrantClient(path=str(tmp_path / "local")), "items", schema)
    else:
        store = EdgeStore(tmp_path / "edge", schema, optimize_after_writes=0)
    items = catalog_items(40)
    engine = Engine(loaded.manifest, Encoder(loaded), store, candidates_min=100, candidates_factor=10)
    try:
        engine.indexer.index(items)
        matches = engine.similar_to_item("i3", 100)
    finally:
        engine.close()
        store.close()
    query, position = items[3], {item.id: n for n, item in enumerate(items)}
    assert len(matches) == len(items) - 1
    expected = {
        "ngrams_title": brute_force_ngrams(query.title, [i.title for i in items]),
        "ngrams_description": brute_force_ngrams(query.description, [i.description for i in items]),
        "ngrams_text": brute_force_ngrams(
            f"{query.title} {query.description}", [f"{i.title} {i.description}" for i in items]
        ),
    }
    for match in matches:
        item = items[position[match.id]]
        for name, scores in expected.items():
            got = match.field_scores[name]
            if name == "ngrams_description" and not item.description:
                assert got is None, match.id
            else:
                assert got == pytest.approx(scores[position[match.id]], rel=1e-4, abs=1e-5), (match.id, name)
