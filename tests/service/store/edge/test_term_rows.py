"""The embedded store's term rows (its in-memory copy of every item's terms) under churn: after thousands of
replacements and deletions (which force its arrays to be compacted and grown), every score equals the core's brute
force over the live documents."""

from __future__ import annotations

import numpy as np

from metricsearch.core.lexical import SparseVector, document_frequencies, lexical_scores, term_vector
from metricsearch.service.store.edge.term_rows import PREFETCH_MAX_SHARE, TermRows

NESTED = dict.fromkeys(("whole", "part", "empty"), "lex")


def test_scores_equal_brute_force_after_churn():
    rng = np.random.default_rng(3)
    words = [f"w{n}" for n in range(60)]
    term_rows = TermRows(["lex"])
    live: dict[int, str] = {}
    for _ in range(3000):
        row = int(rng.integers(0, 400))
        if rng.random() < 0.2:
            term_rows.remove([row])
            live.pop(row, None)
        else:
            text = " ".join(rng.choice(words, size=rng.integers(0, 12)))
            term_rows.put([row], [{"lex": term_vector(text)}])
            live[row] = text
    rows = np.array([*live, -1])  # -1: a point the owner does not hold
    documents = [term_vector(t) for t in live.values()]
    frequencies, n_documents = document_frequencies(documents)
    queries = ("w1 w2 w3", "w59", "w7 w7 w8 nothing", "")
    alone = {query: term_rows.scores({"lex": term_vector(query)}, rows)["lex"] for query in queries}
    # Several queries against one stored vector are scored in one pass: each as it scores alone.
    together = term_rows.scores({q: term_vector(q) for q in queries}, rows, using=dict.fromkeys(queries, "lex"))
    for query in queries:
        expected = lexical_scores(term_vector(query), documents, frequencies, n_documents)
        np.testing.assert_allclose(alone[query][:-1], expected, rtol=1e-5, atol=1e-6)
        assert alone[query][-1] == 0
        np.testing.assert_array_equal(together[query], alone[query])
    # A query holding every term of the others (a whole text and its codes) is their lookup table: the same scores.
    whole = term_vector("w1 w2 w3 w7 w7 nothing")
    part = SparseVector(whole.indices[1::2], whole.values[1::2])
    nested = term_rows.scores({"whole": whole, "part": part, "empty": SparseVector.empty()}, rows, using=NESTED)
    for name, query in (("whole", whole), ("part", part)):
        np.testing.assert_array_equal(nested[name], term_rows.scores({"lex": query}, rows)["lex"])
    assert not nested["empty"].any()
    kept = next(row for row, text in live.items() if text)
    np.testing.assert_array_equal(term_rows.vectors(kept)["lex"].indices, term_vector(live[kept]).indices)
    assert term_rows.vectors(-1) == {}


def test_the_candidate_query_keeps_its_strongest_terms():
    """A rare part number outweighs common words: it survives the cut, the commonest words do not."""
    term_rows = TermRows(["lex"])
    texts = [f"black new set item{n}" for n in range(100)] + ["Sony PS-LX350H turntable"] * 2
    term_rows.put(list(range(len(texts))), [{"lex": term_vector(t)} for t in texts])
    query = term_vector("black new set item7 Sony PS-LX350H turntable")
    kept = term_rows.strongest("lex", query, 1, keep=4)
    # item7 (in one document of 102) is rarer than the five terms of the two turntables (in 2 each)
    assert set(kept.indices.tolist()) - set(term_vector("item7").indices.tolist()) < set(
        term_vector("Sony PS-LX350H turntable").indices.tolist()
    )
    assert len(kept) == 4 and term_vector("item7").indices[0] in kept.indices
    short = term_vector("item3 turntable")
    assert term_rows.strongest("lex", short, 1, keep=4) is short


def test_the_candidate_query_leaves_out_terms_no_document_or_too_many_hold():
    """A term every item holds would make the engine read every posting for nothing a rerank needs from the
    candidate search; a term no document holds finds nothing. Both are left out, whatever `keep` allows; a query of
    only such terms is left empty (the search is then dense alone). The search's limit here: 1 point."""
    term_rows = TermRows(["lex"])
    documents = 200
    texts = [f"synthetic item n{n}" + (" rare" if n < PREFETCH_MAX_SHARE * documents else "") for n in range(documents)]
    term_rows.put(list(range(documents)), [{"lex": term_vector(t)} for t in texts])
    query = term_vector("synthetic item n5 rare unseen")
    kept = term_rows.strongest("lex", query, 1, keep=8)
    assert set(kept.indices.tolist()) == set(term_vector("n5 rare").indices.tolist())
    np.testing.assert_array_equal(kept.values, query.values[np.isin(query.indices, kept.indices)])
    assert len(term_rows.strongest("lex", term_vector("synthetic item unseen"), 1)) == 0
    term_rows.put([199], [{"lex": term_vector("synthetic item n199 rare")}])  # one document more than the share
    assert set(term_rows.strongest("lex", query, 1, keep=8).indices.tolist()) == set(term_vector("n5").indices.tolist())
    # A search of as many points as hold a term reads no more postings than it returns: the term is kept.
    common = term_vector("synthetic")
    assert term_rows.strongest("lex", common, documents) is common and not len(term_rows.strongest("lex", common, 199))
