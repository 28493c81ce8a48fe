"""The vector layout: what decides re-encoding, a free text standing for every field, a stored item read back as
the per-field vectors it was written from, and the sparse vectors a bundle with character n-grams stores."""

from __future__ import annotations

import numpy as np
import pytest

from metricsearch.core.bundle import load_bundle
from metricsearch.core.errors import StoreMismatchError
from metricsearch.service.engine import ANN_VECTOR, content_hash, vector_schema
from metricsearch.service.store import EdgeStore
from tests.bundles import bundle_variant


def test_only_the_texts_decide_re_encoding():
    assert content_hash("red shirt", "soft") == content_hash("red shirt", "soft")
    assert content_hash("red shirt", "soft") != content_hash("red shirt", "soft ")
    assert content_hash("red", " shirt") != content_hash("red shirt", "")  # the field boundary counts


def test_a_free_text_stands_for_every_field_and_a_title_for_its_own(engine):
    layout = engine.layout
    encoded = engine.encoder.encode(["red shirt"])
    free = layout.from_texts(encoded, free_text=True)
    titled = layout.from_texts(encoded, free_text=False)
    assert free.present.tolist() == [True, True] and titled.present.tolist() == [True, False]
    np.testing.assert_allclose(free.fields[0], free.fields[1])
    np.testing.assert_allclose(np.linalg.norm(free.fields, axis=1), 1, atol=1e-5)


def test_stored_vectors_read_back_per_field(engine):
    per_field = np.zeros((1, 2, engine.encoder.dim), dtype=np.float32)
    per_field[0, 0] = engine.encoder.encode(["red shirt"])[0]  # a title, no description
    [vectors] = engine.layout.vectors_of(per_field)
    stored = engine.layout.stored_one({ANN_VECTOR: vectors[ANN_VECTOR]})
    assert stored.present.tolist() == [True, False]
    np.testing.assert_allclose(stored.fields[0], per_field[0, 0] / np.linalg.norm(per_field[0, 0]), atol=1e-5)


def test_a_store_built_without_ngrams_refuses_a_bundle_that_needs_them(tiny_bundle, tmp_path):
    """The n-gram analyzer is part of the bundle's identity: a store holding words alone is refused by name, not
    served with n-gram components that would all read 0."""
    words = load_bundle(tiny_bundle)
    bundle = bundle_variant(tiny_bundle, tmp_path / "bundle", ngrams=True)
    ngrams = vector_schema(load_bundle(bundle))
    assert set(ngrams.sparse) - set(vector_schema(words).sparse) == {
        "ngrams_title",
        "ngrams_description",
        "ngrams_text",
    }
    EdgeStore(tmp_path / "store", vector_schema(words)).close()
    with pytest.raises(StoreMismatchError, match="char-wb-3grams/v1"):
        EdgeStore(tmp_path / "store", ngrams)
