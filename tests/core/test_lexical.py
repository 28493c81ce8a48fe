"""The analyzer and BM25 against hand-computed values and a brute-force BM25 over whole texts."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from metricsearch.core.lexical import Bm25, analyze, bm25_scores, document_frequencies, idf, query_vector, term_id


def test_part_numbers_match_whatever_their_punctuation():
    assert analyze("Sony PS-LX350H Turntable") == ["sony", "ps", "lx350h", "pslx350h", "turntable"]
    assert "pslx350h" in analyze("PSLX350H") and "pslx350h" in analyze("ps-lx350h")
    assert analyze("Canon EOS-5D, 21.1MP") == ["canon", "eos", "5d", "eos5d", "21", "1mp", "211mp"]


def test_words_without_digits_are_not_joined_and_unicode_is_folded():
    assert analyze("Black-and-white Café") == ["black", "and", "white", "café"]
    assert analyze("ＴＶ") == ["tv"]  # NFKC: full-width letters
    assert analyze("  ...  ") == []


def test_term_ids_are_stable_32_bit():
    assert term_id("sony") == term_id("sony") != term_id("sonny")
    assert 0 <= term_id("x") < 2**32
    assert term_id("\ud800") >= 0  # a lone surrogate is a term like any other, not a crash


def test_document_weights_are_bm25_term_saturation():
    bm25 = Bm25(k1=1.2, b=0.75, avg_length=4.0)
    vector = bm25.document("red red shirt")  # dl = 3
    weights = dict(zip(vector.indices.tolist(), vector.values.tolist(), strict=True))
    norm = 1.2 * (1 - 0.75 + 0.75 * 3 / 4.0)
    assert math.isclose(weights[term_id("red")], 2 * 2.2 / (2 + norm), rel_tol=1e-6)
    assert math.isclose(weights[term_id("shirt")], 1 * 2.2 / (1 + norm), rel_tol=1e-6)
    assert len(bm25.document("")) == 0


def brute_force_bm25(query: str, documents: list[str], k1: float, b: float, avg: float) -> list[float]:
    """BM25 from its definition over the analyzed texts, nothing shared with the code under test but analyze()."""
    analyzed = [analyze(d) for d in documents]
    holding = [d for d in analyzed if d]
    n = len(holding)
    scores = []
    for terms in analyzed:
        counts = Counter(terms)
        total = 0.0
        for term in set(analyze(query)):
            df = sum(term in d for d in holding)
            weight = math.log(1 + (n - df + 0.5) / (df + 0.5))
            tf = counts[term]
            total += weight * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(terms) / avg)) if tf else 0.0
        scores.append(total)
    return scores


words = st.sampled_from(["red", "shirt", "ps-lx350h", "pslx350h", "cotton", "blue", "eos-5d", "hat"])
texts = st.lists(words, min_size=0, max_size=8).map(" ".join)


@settings(max_examples=60, deadline=None)
@given(query=texts, documents=st.lists(texts, min_size=1, max_size=8))
def test_bm25_scores_equal_brute_force(query, documents):
    bm25 = Bm25(k1=1.2, b=0.75, avg_length=5.0)
    vectors = [bm25.document(d) for d in documents]
    frequencies, n = document_frequencies(vectors)
    got = bm25_scores(query_vector(query), vectors, frequencies, n)
    np.testing.assert_allclose(got, brute_force_bm25(query, documents, 1.2, 0.75, 5.0), rtol=1e-5, atol=1e-6)


def test_idf_is_qdrants_and_positive():
    assert math.isclose(float(idf(np.array([1]), 10)[0]), math.log(1 + 9.5 / 1.5))
    assert (idf(np.array([0, 5, 10]), 10) > 0).all()
