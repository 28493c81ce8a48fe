"""The analyzer and the lexical score against hand-computed values and a brute-force TF-IDF cosine over whole texts."""

from __future__ import annotations

import hashlib
import math
import unicodedata
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metricsearch.core.bundle import load_bundle
from metricsearch.core.lexical import (
    CACHED_TERM_CHARS,
    CODES,
    STEM_MAX_CHARS,
    WHOLE_TEXT,
    LexicalFields,
    SparseVector,
    analyze,
    char_ngrams,
    code_terms,
    code_vector,
    document_frequencies,
    idf,
    is_code,
    lexical_fields,
    lexical_scores,
    ngram_vector,
    term_id,
    term_vector,
)


def test_part_numbers_match_whatever_their_punctuation():
    assert analyze("Sony PS-LX350H Turntable", stems=False) == ["sony", "ps", "lx350h", "pslx350h", "turntable"]
    assert "pslx350h" in analyze("PSLX350H") and "pslx350h" in analyze("ps-lx350h")
    assert analyze("Canon EOS-5D, 21.1MP", stems=False) == ["canon", "eos", "5d", "eos5d", "21", "1mp", "211mp"]


def test_a_codes_stems_are_its_leading_letter_and_digit_runs():
    """Analyzer v2: a model number with a shop's suffix shares its stem with the bare one."""
    assert analyze("Sony KDL-40V5100B") == [
        *["sony", "kdl", "40v5100b", "kdl40v5100b"],
        *["40v", "40v5100"],  # the piece's stems
        *["kdl40", "kdl40v", "kdl40v5100"],  # the joined code's
    ]
    assert set(analyze("lorex lw1002w")) & set(analyze("Lorex LW1002")) == {"lorex", "lw1002"}
    assert set(analyze("ihome id9svc")) & set(analyze("ihome id9s")) == {"ihome", "id9"}
    assert analyze("eos-5d mk2") == ["eos", "5d", "eos5d", "eos5", "mk2"]  # a stem is a code: not "eos", "5" or "mk"
    assert analyze("xrs-9645 12345678 2180 sony") == ["xrs", "9645", "xrs9645", "12345678", "2180", "sony"]
    assert analyze("A1-a1 a1a1") == ["a1", "a1", "a1a1", "a1a", "a1a1", "a1", "a1a"]  # once a word, none its term


def test_words_without_digits_are_not_joined_and_unicode_is_folded():
    assert analyze("Black-and-white Café") == ["black", "and", "white", "café"]
    assert analyze("ＴＶ") == ["tv"]  # NFKC: full-width letters
    assert analyze("  ...  ") == []


def test_only_codes_of_a_model_numbers_length_get_stems():
    """A longer run of letters and digits is no model number, and would give stems quadratic in its length."""
    assert analyze("a1" * (STEM_MAX_CHARS // 2 + 1)) == ["a1" * (STEM_MAX_CHARS // 2 + 1)]
    assert len(analyze("a1" * (STEM_MAX_CHARS // 2))) == STEM_MAX_CHARS - 1  # the code and every stem but "a"
    hostile = " ".join(f"q{i}x{i}y{i}z{i}" for i in range(1200))  # a description at the service's limit
    assert len(hostile) > 20_000 and len(analyze(hostile)) < len(hostile) / 2


def test_term_ids_are_stable_32_bit():
    assert term_id("sony") == term_id("sony") != term_id("sonny")
    assert 0 <= term_id("x") < 2**32
    assert term_id("\ud800") >= 0  # a lone surrogate is a term like any other, not a crash


def test_long_terms_get_the_same_ids_as_cached_short_ones():
    """Ids of short terms are cached, longer ones hashed each time: both are the same stable hash."""
    long = "x" * (CACHED_TERM_CHARS + 1)
    assert term_id(long) == int.from_bytes(hashlib.blake2b(long.encode(), digest_size=4).digest(), "little")
    assert term_id("sony") == int.from_bytes(hashlib.blake2b(b"sony", digest_size=4).digest(), "little")


@settings(max_examples=300, deadline=None)
@given(title=st.text(), description=st.text())
def test_the_whole_text_vector_is_the_joined_texts(title, description):
    """The whole text is analysed as the title's terms then the description's: what the two joined by a newline give,
    whatever the characters at the join (combining marks, a final sigma, odd spaces)."""
    joined = term_vector(f"{title}\n{description}")
    for vector in (
        LexicalFields(["title"]).documents(title, description)["lexical_text"],
        LexicalFields(["title"]).queries(title, description).get("lexical_text", SparseVector.empty()),
    ):
        assert vector.indices.tolist() == joined.indices.tolist() and vector.values.tolist() == joined.values.tolist()


def test_term_weights_are_sublinear_tf_normalised():
    vector = term_vector("red red shirt")
    weights = dict(zip(vector.indices.tolist(), vector.values.tolist(), strict=True))
    red, shirt = 1 + math.log(2), 1.0
    norm = math.hypot(red, shirt)
    assert math.isclose(weights[term_id("red")], red / norm, rel_tol=1e-6)
    assert math.isclose(weights[term_id("shirt")], shirt / norm, rel_tol=1e-6)
    assert len(term_vector("")) == 0 and len(term_vector(" -- ")) == 0


def brute_force(query: str, documents: list[str]) -> list[float]:
    """sum_t idf_t q_t d_t from its definition over the analyzed texts, nothing shared with the code under test but
    analyze()."""
    analyzed = [analyze(d) for d in documents]
    holding = [d for d in analyzed if d]
    n = len(holding)

    def unit(terms: list[str]) -> dict[str, float]:
        weights = {t: 1 + math.log(c) for t, c in Counter(terms).items()}
        norm = math.sqrt(sum(w * w for w in weights.values()))
        return {t: w / norm for t, w in weights.items()}

    q = unit(analyze(query))
    scores = []
    for terms in analyzed:
        d = unit(terms) if terms else {}
        total = 0.0
        for term, weight in q.items():
            if term in d:
                df = sum(term in h for h in holding)
                total += math.log(1 + (n - df + 0.5) / (df + 0.5)) * weight * d[term]
        scores.append(total)
    return scores


words = st.sampled_from(["red", "shirt", "ps-lx350h", "pslx350h", "cotton", "blue", "eos-5d", "hat"])
texts = st.lists(words, min_size=0, max_size=8).map(" ".join)


@settings(max_examples=60, deadline=None)
@given(query=texts, documents=st.lists(texts, min_size=1, max_size=8))
def test_lexical_scores_equal_brute_force(query, documents):
    vectors = [term_vector(d) for d in documents]
    frequencies, n = document_frequencies(vectors)
    got = lexical_scores(term_vector(query), vectors, frequencies, n)
    np.testing.assert_allclose(got, brute_force(query, documents), rtol=1e-5, atol=1e-6)


def test_a_text_scores_itself_highest_and_the_whole_text_holds_both_fields():
    documents = [term_vector(t) for t in ("sony ps-lx350h turntable", "sony speaker", "red shirt")]
    frequencies, n = document_frequencies(documents)
    scores = lexical_scores(term_vector("Sony PSLX350H turntable"), documents, frequencies, n)
    assert scores.argmax() == 0 and scores[2] == 0
    fields = LexicalFields(["title", "description"])
    assert list(fields.names.values()) == ["lexical_title", "lexical_description", "lexical_text"]
    docs = fields.documents("Sony turntable", "model PS-LX350H")
    assert (
        term_id("pslx350h") in docs["lexical_text"].indices
        and term_id("pslx350h") in docs["lexical_description"].indices
    )
    assert term_id("pslx350h") not in docs["lexical_title"].indices
    # A query field without a term has no vector (its component is unknown); a free text stands for every field.
    assert set(fields.queries("Sony turntable", "")) == {"lexical_title", "lexical_text"}
    assert set(fields.queries(None, None, free_text="sony")) == set(fields.names.values())


def test_idf_is_qdrants_and_positive():
    assert math.isclose(float(idf(np.array([1]), 10)[0]), math.log(1 + 9.5 / 1.5))
    assert (idf(np.array([0, 5, 10]), 10) > 0).all()


def test_codes_are_model_and_part_numbers_not_short_numbers_or_words():
    text = "Sony KDL-40V5100 40in LCD, 2012 model, 3 pack, UPC 027242774727"
    assert [t for t in analyze(text, stems=False) if is_code(t)] == ["40v5100", "kdl40v5100", "40in", "027242774727"]
    assert not any(is_code(t) for t in analyze("3 killed in 2012 blast, 40 hurt"))
    assert is_code("12345") and not is_code("1234") and is_code("5d") and not is_code("sony")


def test_a_code_vector_keeps_the_code_terms_with_their_weights():
    text = "Canon EOS-5D camera body 12345"
    whole, codes = term_vector(text), code_vector(text)
    kept = {term_id(t) for t in ("5d", "eos5d", "eos5", "12345")}
    assert set(codes.indices.tolist()) == kept
    weight = dict(zip(whole.indices.tolist(), whole.values.tolist(), strict=True))
    assert codes.values.tolist() == [weight[i] for i in codes.indices.tolist()]
    assert len(code_vector("a camera body")) == 0


def test_queries_carry_codes_only_when_there_are_some_and_score_them_on_the_whole_text():
    fields = LexicalFields(["title", "description"])
    assert fields.using == {CODES: fields.names[WHOLE_TEXT]}
    with_code = fields.queries("Sony PS-LX350H", "a turntable")
    assert set(with_code) == {"lexical_title", "lexical_description", "lexical_text", CODES}
    assert set(with_code[CODES].indices.tolist()) == {term_id(t) for t in ("lx350h", "pslx350h", "lx350", "pslx350")}
    assert CODES not in fields.queries("Sony turntable", "belt drive")
    assert set(fields.queries(None, None, free_text="eos 5d")) == {*fields.names.values(), CODES}
    assert CODES not in fields.queries(None, None, free_text="camera")


@given(
    text=st.text() | st.sampled_from(["Ｋ１２３ x² ½ ①-a ٣٤٥٦٧ A1-b-2 12-34 ab-cd 12345", "EOS-5D mk2, 2012"]),
    stems=st.booleans(),
)
def test_code_terms_are_the_analyzers_codes(text, stems):
    """Read from the words with a digit alone, they are what analysing every word finds (digits that only NFKC
    makes digits, other scripts' digits and fractions included), with or without stems."""
    assert code_terms(text, stems) == {term for term in analyze(text, stems) if is_code(term)}


@pytest.mark.parametrize(
    ("title", "description"),
    [
        ("Sony PS-LX350H turntable", "Belt drive turntable, PS-LX350H, black"),
        ("Canon EOS 5D", ""),
        ("camera camera body", "no codes at all here"),
        ("Ｆｕｌｌｗｉｄｔｈ KDL-40V5100 ＴＶ", "a 12345 part and a 12 digit"),
    ],
)
@pytest.mark.parametrize("ngrams", [False, True])
def test_a_stored_items_queries_from_its_documents_equal_those_from_its_texts(title, description, ngrams):
    fields = LexicalFields(["title", "description"], ngrams=ngrams)
    stored = {name: vector for name, vector in fields.documents(title, description).items() if len(vector)}
    analysed, read_back = fields.queries(title, description), fields.item_queries(title, description, stored)
    assert read_back.keys() == analysed.keys()
    for name, vector in analysed.items():
        assert read_back[name].indices.tolist() == vector.indices.tolist(), name
        assert read_back[name].values.tolist() == vector.values.tolist(), name


def test_character_ngrams_are_scikit_learns_char_wb_trigrams():
    from sklearn.feature_extraction.text import TfidfVectorizer

    sklearn = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 3)).build_analyzer()
    for text in ("Sony PS-LX350H turntable", "a  b\tcd", "Ｔｈｅ Café 5D", "", " - "):
        assert char_ngrams(text) == sklearn(unicodedata.normalize("NFKC", text).lower())
    assert char_ngrams("a PS") == [" a ", " ps", "ps "]


def brute_force_ngrams(query: str, documents: list[str]) -> np.ndarray:
    """scikit-learn's TF-IDF over the same n-grams, sublinear tf, L2-normalised, with the query's terms weighted by
    the documents' idf (Qdrant's formula): nothing shared with the code under test."""
    from sklearn.feature_extraction.text import CountVectorizer

    if not any(char_ngrams(text) for text in (query, *documents)):
        return np.zeros(len(documents))
    counter = CountVectorizer(analyzer=char_ngrams).fit([query, *documents])
    counts = counter.transform([query, *documents]).toarray().astype(float)
    weights = np.where(counts > 0, 1 + np.log(np.maximum(counts, 1)), 0.0)
    norms = np.linalg.norm(weights, axis=1, keepdims=True)
    unit = np.divide(weights, norms, out=np.zeros_like(weights), where=norms > 0)
    held = counts[1:][norms[1:, 0] > 0] > 0
    df, n = held.sum(axis=0), len(held)
    return unit[1:] @ (unit[0] * np.log1p((n - df + 0.5) / (df + 0.5)))


@settings(max_examples=60, deadline=None)
@given(query=texts | st.text(max_size=20), documents=st.lists(texts | st.text(max_size=20), min_size=1, max_size=8))
def test_ngram_scores_equal_a_brute_force_tfidf(query, documents):
    vectors = [ngram_vector(d) for d in documents]
    frequencies, n = document_frequencies(vectors)
    got = lexical_scores(ngram_vector(query), vectors, frequencies, n)
    np.testing.assert_allclose(got, brute_force_ngrams(query, documents), rtol=1e-5, atol=1e-6)


def test_ngram_vectors_are_stored_and_asked_per_field_beside_the_words():
    fields = LexicalFields(["title", "description"], ngrams=True)
    assert fields.ngram_names == {f: f"ngrams_{f}" for f in ("title", "description", WHOLE_TEXT)}
    assert fields.stored == (*fields.names.values(), *fields.ngram_names.values())
    docs = fields.documents("Sony turntable", "")
    assert set(docs) == set(fields.stored) and len(docs["ngrams_description"]) == 0
    assert docs["ngrams_text"].indices.tolist() == docs["ngrams_title"].indices.tolist()
    assert set(fields.queries("Sony turntable", "")) == {"lexical_title", "lexical_text", "ngrams_title", "ngrams_text"}
    free = fields.queries(None, None, free_text="sony")
    assert {name: free[name].indices.tolist() for name in fields.ngram_names.values()} == dict.fromkeys(
        fields.ngram_names.values(), ngram_vector("sony").indices.tolist()
    )
    present = fields.present(["title", "description"], np.array([[True, False], [True, True]]))
    assert present["ngrams_description"].tolist() == [False, True] and present["ngrams_text"].all()
    assert LexicalFields(["title"]).stored == ("lexical_title", "lexical_text")  # without n-grams: words alone


def test_ngram_text_vector_is_the_joined_fields():
    fields = LexicalFields(["title", "description"], ngrams=True)
    joined = ngram_vector("Sony PS-LX350H\nbelt drive")
    got = fields.documents("Sony PS-LX350H", "belt drive")["ngrams_text"]
    assert got.indices.tolist() == joined.indices.tolist() and got.values.tolist() == joined.values.tolist()


def test_a_manifest_that_names_the_ngram_analyzer_stores_and_scores_ngrams(tiny_bundle):
    manifest = load_bundle(tiny_bundle).manifest
    words = lexical_fields(manifest)
    assert not words.ngram_names and words.stored == tuple(words.names.values())
    lexical = manifest.lexical.model_copy(update={"ngrams": "char-wb-3grams/v1"})
    fields = lexical_fields(manifest.model_copy(update={"lexical": lexical}))
    assert fields.stems == words.stems and fields.names == words.names
    assert fields.ngram_names == {f: f"ngrams_{f}" for f in ("title", "description", WHOLE_TEXT)}
    assert fields.components == [*words.components, *fields.ngram_names.values()]
    assert lexical_fields(manifest.model_copy(update={"lexical": None, "fusion": None})) is None
