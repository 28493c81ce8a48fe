"""bench/catalog.py's text catalog: deterministic, with the shape of a real catalog's texts (titles of brand, words,
noun and model number; 8-30 word descriptions whose word frequencies fall with rank as in a language)."""

from __future__ import annotations

import re
from collections import Counter

from bench.catalog import NOUNS, VOCABULARY, indexed_store, text_catalog, word


def test_same_seed_same_catalog_other_seed_other_texts():
    assert text_catalog(200, seed=3) == text_catalog(200, seed=3)
    assert [i["title"] for i in text_catalog(200, seed=3)] != [i["title"] for i in text_catalog(200, seed=4)]


def test_titles_and_descriptions_have_catalog_shape():
    items = text_catalog(2000, seed=1, prefix="x")
    assert [i["id"] for i in items[:3]] == ["x0", "x1", "x2"]
    for item in items:
        brand, *middle, noun, model = item["title"].split()
        assert brand == item["metadata"]["brand"] and brand[0].isupper()
        assert 1 <= len(middle) <= 3 and noun in NOUNS
        assert re.fullmatch(r"[A-Z]{2}-\d{3,4}[a-d]?", model), model
        assert 8 <= len(item["description"].split()) <= 30
    assert {i["metadata"]["bucket"] for i in items} == set(range(10))


def test_word_frequencies_follow_rank():
    counts = Counter(w for i in text_catalog(3000, seed=2) for w in i["description"].split())
    top, tenth, hundredth = (counts[word(r)] for r in (0, 9, 99))
    assert top > 3 * tenth > 3 * hundredth > 0, (top, tenth, hundredth)
    assert len(counts) > 5000, "most of the vocabulary appears in a few thousand items"
    assert len({word(r) for r in range(VOCABULARY)}) == VOCABULARY


def test_indexed_store_is_reused_while_its_stamp_matches(tiny_bundle, tmp_path, capsys):
    """Indexed once through POST /index; the second call finds the stamp and starts no service."""
    made = indexed_store(tiny_bundle, 40, 0, tmp_path / "store")
    assert made["items"] == 40 and made["items_s"] > 0
    again = indexed_store(tiny_bundle, 40, 0, tmp_path / "store")
    assert again == made and "reusing the 40 items" in capsys.readouterr().out
    assert indexed_store(tiny_bundle, 30, 0, tmp_path / "store")["items"] == 30, "another size is indexed again"
