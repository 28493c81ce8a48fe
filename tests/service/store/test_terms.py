"""The embedded store's term mirror under churn: after thousands of replacements and deletions (which force its
arrays to be compacted and grown), every score equals the core's brute force over the live documents."""

from __future__ import annotations

import numpy as np

from metricsearch.core.lexical import document_frequencies, lexical_scores, term_vector
from metricsearch.service.store.terms import TermMirror


def test_scores_equal_brute_force_after_churn():
    rng = np.random.default_rng(3)
    words = [f"w{n}" for n in range(60)]
    mirror = TermMirror(["lex"])
    live: dict[str, str] = {}
    for _ in range(3000):
        point = f"p{rng.integers(0, 400)}"
        if rng.random() < 0.2:
            mirror.remove([point])
            live.pop(point, None)
        else:
            text = " ".join(rng.choice(words, size=rng.integers(0, 12)))
            mirror.put([point], [{"lex": term_vector(text)}])
            live[point] = text
    points = [*live, "never-stored"]
    documents = [term_vector(t) for t in live.values()]
    frequencies, n_documents = document_frequencies(documents)
    queries = ("w1 w2 w3", "w59", "w7 w7 w8 nothing", "")
    alone = {query: mirror.scores({"lex": term_vector(query)}, points)["lex"] for query in queries}
    # Several queries against one stored vector are scored in one pass: each as it scores alone.
    together = mirror.scores({q: term_vector(q) for q in queries}, points, using=dict.fromkeys(queries, "lex"))
    for query in queries:
        expected = lexical_scores(term_vector(query), documents, frequencies, n_documents)
        np.testing.assert_allclose(alone[query][:-1], expected, rtol=1e-5, atol=1e-6)
        assert alone[query][-1] == 0
        np.testing.assert_array_equal(together[query], alone[query])


def test_the_candidate_query_keeps_its_strongest_terms():
    """A rare part number outweighs common words: it survives the cut, the commonest words do not."""
    mirror = TermMirror(["lex"])
    common = "black new set pack with and"
    texts = [f"{common} item{n}" for n in range(30)] + ["Sony PS-LX350H turntable"]
    mirror.put([f"p{n}" for n in range(len(texts))], [{"lex": term_vector(t)} for t in texts])
    query = term_vector(f"{common} Sony PS-LX350H turntable")
    kept = mirror.strongest("lex", query, keep=4)
    rare = set(term_vector("Sony PS-LX350H turntable").indices.tolist())  # 5 terms, each in one document
    assert len(kept) == 4 and set(kept.indices.tolist()) <= rare
    short = term_vector("two words")
    assert mirror.strongest("lex", short, keep=4) is short
