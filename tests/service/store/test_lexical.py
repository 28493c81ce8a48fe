"""Sparse term vectors in both stores: scores equal the core's brute-force score (the same analyzer and idf in the
embedded shard, a Qdrant server's API and numpy), character n-gram scores equal scikit-learn's TF-IDF over the same
n-grams, and a lexical query adds its best matches to the candidates."""

from __future__ import annotations

import numpy as np
import pytest
from qdrant_client import QdrantClient

from metricsearch.core.lexical import (
    LexicalFields,
    code_vector,
    document_frequencies,
    idf,
    lexical_scores,
    term_vector,
)
from metricsearch.service.store import EdgeStore, RemoteStore
from metricsearch.service.store.base import Equals, StoredItem, VectorSchema, lexical_limit
from metricsearch.service.store.edge import term_rows
from tests.core.test_lexical import brute_force_ngrams

SCHEMA = VectorSchema(sizes={"ann": 8}, ann="ann", identity="lexical-test@1", sparse=("lex_title",))
TITLES = [
    "Sony PS-LX350H belt drive turntable",
    "Sony turntable black",
    "Canon EOS-5D camera body",
    "PSLX350H record player",
    "Apple iPod nano 8GB",
    "red cotton shirt",
    "blue linen shirt",
    "",  # no terms: no sparse vector stored
]


def items(rng: np.random.Generator) -> list[StoredItem]:
    return [
        StoredItem(
            id=f"i{n}",
            title=title or "-",
            description="",
            metadata={"shop": "a" if n % 2 else "b"},
            content_hash=str(n),
            vectors={"ann": rng.normal(size=8).astype(np.float32)},
            sparse={"lex_title": term_vector(title)},
        )
        for n, title in enumerate(TITLES)
    ]


@pytest.fixture(params=["edge", "remote-local"])
def store(request, tmp_path):
    if request.param == "edge":
        opened = EdgeStore(tmp_path / "edge", SCHEMA, optimize_after_writes=0)
    else:
        opened = RemoteStore(QdrantClient(path=str(tmp_path / "local")), "items", SCHEMA)
    opened.upsert(items(np.random.default_rng(0)))
    yield opened
    opened.close()


@pytest.mark.parametrize("text", ["sony ps-lx350h", "PSLX350H", "shirt", "nothing matches", "eos 5d"])
def test_lexical_scores_equal_brute_force(store, text):
    ids = [f"i{n}" for n in range(len(TITLES))]
    query = term_vector(text)
    got = store.lexical_scores({"lex_title": query}, store.points(ids))["lex_title"]
    frequencies, documents = document_frequencies(term_vector(t) for t in TITLES)
    expected = lexical_scores(query, [term_vector(t) for t in TITLES], frequencies, documents)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_a_query_scored_against_another_stored_vector_equals_brute_force(store):
    """`using`: the codes component scores the query's code terms against another field's stored vectors."""
    ids = [f"i{n}" for n in range(len(TITLES))]
    query = code_vector("sony ps-lx350h turntable")
    got = store.lexical_scores({"codes": query}, store.points(ids), {"codes": "lex_title"})["codes"]
    frequencies, documents = document_frequencies(term_vector(t) for t in TITLES)
    expected = lexical_scores(query, [term_vector(t) for t in TITLES], frequencies, documents)
    assert expected.max() > 0
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_listed_items_are_read_as_a_search_reads_its_hits(store):
    """A cached answer's check reads the items it rescores as a search reads its candidates: the same listings,
    vectors and lexical scores, items not stored left out."""
    queries = {"lex_title": term_vector("sony turntable shirt"), "codes": code_vector("PS-LX350H EOS-5D")}
    using = {"codes": "lex_title"}
    found = store.search(np.ones(8), 6, (), (), None, queries, using)
    listed = store.listed([*reversed(found.ids), "not-stored"], queries, using)
    order = [listed.ids.index(i) for i in found.ids]
    assert sorted(listed.ids) == sorted(found.ids) and [listed.listings[n] for n in order] == found.listings
    np.testing.assert_allclose(listed.vectors["ann"][order], found.vectors["ann"], rtol=1e-6)
    assert listed.points == store.points(listed.ids)
    for name in queries:
        np.testing.assert_allclose(listed.lexical[name][order], found.lexical[name], rtol=1e-6)
    assert store.listed(["not-stored"], queries, using).listings == []


def test_the_embedded_store_gives_the_idf_of_a_querys_terms_now_and_a_server_store_none(store):
    """What a cached answer's check compares (engine/recheck.py): each term's idf over the documents now, for its
    own vector or the one `using` names; a server computes its idf itself, and its answers are not cached."""
    queries = {"lex_title": term_vector("sony turntable shirt unknownword"), "codes": code_vector("ps-lx350h")}
    got = store.term_idf(queries, {"codes": "lex_title"})
    if isinstance(store, RemoteStore):
        assert got is None
        return
    frequencies, documents = document_frequencies(term_vector(t) for t in TITLES)
    for name, query in queries.items():
        df = np.array([frequencies.get(int(t), 0) for t in query.indices], dtype=np.float64)
        np.testing.assert_allclose(got[name], idf(df, documents))
    store.upsert(
        [StoredItem("more", "sony", "", {}, "m", {"ann": np.ones(8, np.float32)}, {"lex_title": term_vector("sony")})]
    )
    sony = list(queries["lex_title"].indices).index(term_vector("sony").indices[0])
    now = store.term_idf(queries, {"codes": "lex_title"})["lex_title"]
    assert now[sony] < got["lex_title"][sony]  # held by more documents now
    assert (np.delete(now, sony) > np.delete(got["lex_title"], sony)).all()  # as many among more documents


@pytest.mark.parametrize("conditions", [(), (Equals("shop", "a"),), (Equals("shop", "nowhere"),)])
def test_a_search_scores_its_hits_as_lexical_scores_does(store, conditions):
    """`scored` queries come back scored for every hit, each as `lexical_scores` and the brute force score it."""
    queries = {"lex_title": term_vector("sony turntable shirt"), "codes": code_vector("PS-LX350H EOS-5D")}
    using = {"codes": "lex_title"}
    found = store.search(np.ones(8), 6, conditions, ["i1"], {"lex_title": term_vector("sony")}, queries, using)
    assert found.lexical.keys() == queries.keys() or not found.ids
    frequencies, documents = document_frequencies(term_vector(t) for t in TITLES)
    hits = [TITLES[int(i[1:])] for i in found.ids]
    for name, query in queries.items():
        np.testing.assert_allclose(found.lexical[name], store.lexical_scores(queries, found.points, using)[name])
        expected = lexical_scores(query, [term_vector(t) for t in hits], frequencies, documents)
        np.testing.assert_allclose(found.lexical[name], expected, rtol=1e-4, atol=1e-5)
    assert not store.search(np.ones(8), 6).lexical  # none asked for


def test_a_part_number_only_match_becomes_a_candidate(store):
    rng = np.random.default_rng(1)
    far = -store.get(["i3"], with_vectors=True)["i3"].vectors["ann"]  # the dense query points away from i3
    dense_only = store.search(far + 0.01 * rng.normal(size=8), limit=2).ids
    assert "i3" not in dense_only
    hybrid = store.search(far, limit=2, lexical={"lex_title": term_vector("PSLX-350H")}).ids
    assert "i3" in hybrid and set(dense_only) <= set(hybrid)


def test_lexical_candidates_respect_the_filter(store):
    found = store.search(
        np.ones(8), limit=3, conditions=[Equals("shop", "a")], lexical={"lex_title": term_vector("sony")}
    )
    assert found.ids and all(listing.metadata["shop"] == "a" for listing in found.listings)


def test_items_without_terms_or_unknown_ids_score_zero(store):
    points = store.points(["i7", "missing", "i0"])
    scores = store.lexical_scores({"lex_title": term_vector("sony")}, points)["lex_title"]
    assert scores[0] == 0 and scores[1] == 0 and scores[2] > 0


def test_a_sample_is_stable_and_carries_dense_vectors(store):
    first, again = store.sample(5), store.sample(5)
    assert [i.id for i in first] == [i.id for i in again] and len(first) == 5
    assert all(item.vectors["ann"].shape == (8,) and not item.sparse for item in first)
    assert len(store.sample(100)) == len(TITLES)


def test_scores_follow_replacements_deletions_and_a_reopen(tmp_path):
    """The embedded store scores from its in-memory term rows: document frequencies must follow every write, and
    those rows read back at open must score as the ones built by the writes."""
    store = EdgeStore(tmp_path / "edge", SCHEMA, optimize_after_writes=0)
    rng = np.random.default_rng(1)
    stored = items(rng)
    store.upsert(stored)
    replaced = [*stored[2:5], stored[2]]  # i2 twice in one batch: its last version counts once
    texts = {f"i{n}": title for n, title in enumerate(TITLES)}
    for n, title in ((2, "Sony camera"), (3, "linen turntable"), (4, "Sony Sony EOS-5D")):
        texts[f"i{n}"] = title
    store.upsert(
        [
            StoredItem(it.id, texts[it.id], "", {}, "x", it.vectors, {"lex_title": term_vector(texts[it.id])})
            for it in replaced
        ]
    )
    store.delete(["i0", "i6"])
    del texts["i0"], texts["i6"]
    texts["i8"] = "Sony EOS-5D turntable"  # a point taking a deleted one's rows
    store.upsert(
        [StoredItem("i8", texts["i8"], "", {}, "x", stored[0].vectors, {"lex_title": term_vector(texts["i8"])})]
    )

    def expected(query: str) -> np.ndarray:
        frequencies, documents = document_frequencies(term_vector(t) for t in texts.values())
        return lexical_scores(term_vector(query), [term_vector(t) for t in texts.values()], frequencies, documents)

    points = store.points(list(texts))
    for query in ("sony turntable", "eos 5d", "shirt"):
        got = store.lexical_scores({"lex_title": term_vector(query)}, points)["lex_title"]
        np.testing.assert_allclose(got, expected(query), rtol=1e-4, atol=1e-5)
    store.close()
    reopened = EdgeStore(tmp_path / "edge", SCHEMA, optimize_after_writes=0)
    got = reopened.lexical_scores({"lex_title": term_vector("sony turntable")}, points)["lex_title"]
    np.testing.assert_allclose(got, expected("sony turntable"), rtol=1e-4, atol=1e-5)
    reopened.close()


def test_the_embedded_store_reads_an_items_sparse_vectors_back_with_its_dense_ones(tmp_path):
    """What an item's query is made of (Catalog.item_query): the vectors written, also after a replacement and a
    reopen; none for a title without terms, and none read without the vectors."""
    store = EdgeStore(tmp_path / "edge", SCHEMA, optimize_after_writes=0)
    stored = items(np.random.default_rng(3))
    store.upsert(stored)
    store.upsert(
        [StoredItem("i1", "Canon EOS-5D", "", {}, "x", stored[1].vectors, {"lex_title": term_vector("EOS-5D")})]
    )
    written = {item.id: item.sparse for item in stored} | {"i1": {"lex_title": term_vector("EOS-5D")}}
    ids = list(written)
    assert not any(item.sparse for item in store.get(ids).values())
    for _ in range(2):
        got = store.get(ids, with_vectors=True)
        for item_id, sparse in written.items():
            kept = {name: vector for name, vector in sparse.items() if len(vector)}
            assert got[item_id].sparse.keys() == kept.keys(), item_id
            for name, vector in kept.items():
                assert got[item_id].sparse[name].indices.tolist() == vector.indices.tolist()
                assert got[item_id].sparse[name].values.tolist() == vector.values.tolist()
        store.close()
        store = EdgeStore(tmp_path / "edge", SCHEMA, optimize_after_writes=0)
    store.close()


def test_a_delete_by_filter_leaves_the_term_frequencies_of_what_is_left(tmp_path):
    store = EdgeStore(tmp_path / "edge", SCHEMA, optimize_after_writes=0)
    store.upsert(items(np.random.default_rng(2)))
    assert store.delete_where([Equals("shop", "a")]) == 4  # the odd-numbered titles
    left = {f"i{n}": title for n, title in enumerate(TITLES) if n % 2 == 0}
    frequencies, documents = document_frequencies(term_vector(t) for t in left.values())
    query = term_vector("sony turntable shirt")
    got = store.lexical_scores({"lex_title": query}, store.points(list(left)))["lex_title"]
    expected = lexical_scores(query, [term_vector(t) for t in left.values()], frequencies, documents)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    store.close()


WORDS = [f"w{n}" for n in range(40)]
CANDIDATE_SEARCHES = {
    "plain": ((), ()),
    "filter": ((Equals("shop", "a"),), ()),
    "exclude": ((), ("c0", "c3", "c9", "no-such-item")),
    "filter-and-exclude": ((Equals("shop", "b"),), ("c2", "c4")),
}


@pytest.mark.parametrize("kind", ["edge", "remote-local"])
@pytest.mark.parametrize("search", CANDIDATE_SEARCHES)
def test_hybrid_candidates_equal_brute_force(tmp_path, monkeypatch, kind, search):
    """The candidates are the union of the dense top `limit` and the lexical top `lexical_limit(limit)` (points
    sharing a term), both among the points the filter and the exclusions leave (queries of at most PREFETCH_TERMS
    terms, none left out for its frequency: uncut). The embedded store drops a few excluded ids from a search for as
    many more hits: its union may then hold up to one more point per excluded id and prefetch, never an excluded one."""
    monkeypatch.setattr(term_rows, "PREFETCH_MAX_SHARE", 1.0)
    rng = np.random.default_rng(4)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 9))) for _ in range(80)]
    catalog = [
        StoredItem(
            id=f"c{n}",
            title=text,
            description="",
            metadata={"shop": "a" if n % 3 else "b"},
            content_hash=str(n),
            vectors={"ann": rng.normal(size=8).astype(np.float32)},
            sparse={"lex_title": term_vector(text)},
        )
        for n, text in enumerate(texts)
    ]
    if kind == "edge":
        store = EdgeStore(tmp_path / "edge", SCHEMA, optimize_after_writes=0)
    else:
        store = RemoteStore(QdrantClient(path=str(tmp_path / "local")), "items", SCHEMA)
    store.upsert(catalog)
    conditions, exclude = CANDIDATE_SEARCHES[search]
    kept = [
        n
        for n, item in enumerate(catalog)
        if item.id not in exclude and all(item.metadata[c.key] == c.value for c in conditions)
    ]
    frequencies, documents = document_frequencies(term_vector(t) for t in texts)
    for q in range(5):
        vector = rng.normal(size=8)
        query = term_vector(" ".join(rng.choice(WORDS, size=4)))
        ann = np.array([catalog[n].vectors["ann"] for n in kept])
        cosine = ann @ vector / np.linalg.norm(ann, axis=1)
        lexical = lexical_scores(query, [term_vector(texts[n]) for n in kept], frequencies, documents)
        ranked = np.sort(lexical)[::-1]
        # a limit that cuts the lexical ranking between two different scores, so the answer is one set
        limit = next(
            n for n in (8, 9, 12, 13, 4, 16, 20) if ranked[lexical_limit(n) - 1] > max(ranked[lexical_limit(n)], 0)
        )
        expected = {f"c{kept[i]}" for i in np.argsort(-cosine)[:limit]}
        expected |= {f"c{kept[i]}" for i in np.argsort(-lexical)[: lexical_limit(limit)]}
        found = store.search(vector, limit, conditions, exclude, lexical={"lex_title": query})
        assert len(found.ids) == len(set(found.ids)), q
        if kind == "edge" and exclude:
            assert expected <= set(found.ids) and not set(found.ids) & set(exclude), q
            assert len(found.ids) <= len(expected) + 2 * len(exclude), q
        else:
            assert set(found.ids) == expected, q
    store.close()


NGRAM_FIELDS = LexicalFields(["title", "description"], ngrams=True)
DESCRIPTIONS = ["belt drive, black", "", "full frame", "", "", "100% cotton", "", ""]


@pytest.fixture(params=["edge", "remote-local"])
def ngram_store(request, tmp_path):
    """Both stores holding every sparse vector of a bundle with n-grams (words and n-grams, per field and whole)."""
    schema = VectorSchema(sizes={"ann": 8}, ann="ann", identity="ngram-test@1", sparse=NGRAM_FIELDS.stored)
    if request.param == "edge":
        opened = EdgeStore(tmp_path / "edge", schema, optimize_after_writes=0)
    else:
        opened = RemoteStore(QdrantClient(path=str(tmp_path / "local")), "items", schema)
    rng = np.random.default_rng(5)
    opened.upsert(
        [
            StoredItem(
                id=f"i{n}",
                title=title or "-",
                description=description,
                metadata={"shop": "a" if n % 2 else "b"},
                content_hash=str(n),
                vectors={"ann": rng.normal(size=8).astype(np.float32)},
                sparse=NGRAM_FIELDS.documents(title, description),
            )
            for n, (title, description) in enumerate(zip(TITLES, DESCRIPTIONS, strict=True))
        ]
    )
    yield opened
    opened.close()


@pytest.mark.parametrize(
    ("title", "description"),
    [("Sony PSLX350 turntabel", "belt-drive"), ("cotton shirts", ""), ("EOS 5D", "full-frame camera"), ("zzz", "")],
)
def test_ngram_scores_equal_a_brute_force_tfidf_over_the_same_ngrams(ngram_store, title, description):
    """Per field and over the whole text, scored by the store (the idf over the items holding the field's n-grams)
    as scikit-learn's TF-IDF of the same analyzer scores them, and as a search scores its hits; a misspelt or split
    part number still scores."""
    points = ngram_store.points([f"i{n}" for n in range(len(TITLES))])
    queries = {name: v for name, v in NGRAM_FIELDS.queries(title, description).items() if name.startswith("ngrams_")}
    got = ngram_store.lexical_scores(queries, points)
    texts = {
        "ngrams_title": (title, TITLES),
        "ngrams_description": (description, DESCRIPTIONS),
        "ngrams_text": (f"{title}\n{description}", [f"{t}\n{d}" for t, d in zip(TITLES, DESCRIPTIONS, strict=True)]),
    }
    assert set(got) == {name for name in texts if texts[name][0]}
    for name, scores in got.items():
        query, documents = texts[name]
        np.testing.assert_allclose(scores, brute_force_ngrams(query, documents), rtol=1e-4, atol=1e-5, err_msg=name)
    if title != "zzz":
        assert got["ngrams_title"].argmax() == {"S": 0, "c": 5, "E": 2}[title[0]]
    found = ngram_store.search(np.ones(8), 8, (), (), None, queries)
    for name, scores in found.lexical.items():
        np.testing.assert_allclose(scores, ngram_store.lexical_scores(queries, found.points)[name], rtol=1e-6)


def test_word_scores_are_unchanged_by_ngrams_stored_beside_them(ngram_store):
    points = ngram_store.points([f"i{n}" for n in range(len(TITLES))])
    query = term_vector("sony ps-lx350h")
    got = ngram_store.lexical_scores({"lexical_title": query}, points)["lexical_title"]
    frequencies, documents = document_frequencies(term_vector(t) for t in TITLES)
    expected = lexical_scores(query, [term_vector(t) for t in TITLES], frequencies, documents)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
