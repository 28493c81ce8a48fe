"""The hybrid rerank in the service: a part-number-only match is a candidate and ranks, `scores` explains each
component, and the fused ranking, like RecoBERT's, depends neither on k nor on the filter, since it is normalised
with statistics of the whole catalog."""

from __future__ import annotations

import json

import numpy as np
import pytest

from metricsearch.core.bundle import CODE_STEMS, FUSION_COMPONENTS
from metricsearch.core.errors import StoreMismatchError
from metricsearch.core.fusion import DEFAULT_FUSION
from metricsearch.core.records import Item
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service
from metricsearch.service.store.base import Equals
from tests.service.catalogs import catalog_items, served_catalog  # noqa: F401 (tests/evaluation import catalog_items)

WORD_COMPONENTS = [name for name in FUSION_COMPONENTS if not name.startswith("ngrams_")]
"""What the tiny bundle shows: no character n-grams."""


def test_a_match_that_only_shares_a_part_number_is_found(hybrid):
    hybrid.indexer.index([Item("target", "zq kettle PS-LX350H", ""), Item("query", "vintage PSLX350H", "")])
    results = hybrid.similar_to_item("query", 5)
    assert results[0].id == "target"
    assert results[0].field_scores["lexical_title"] > 0 and results[0].field_scores["lexical_text"] > 0
    assert results[0].field_scores["lexical_codes"] > 0
    assert set(results[0].field_scores) == set(WORD_COMPONENTS)
    assert results[0].field_scores["description"] is None and results[0].field_scores["lexical_description"] is None


def test_a_write_after_the_search_does_not_change_what_ranked_the_items_it_read(hybrid, monkeypatch):
    """The lexical scores a ranking reads come with the search's read of each hit (its listing and vectors): a write
    landing between the search and the rerank does not score the shown title on the text that replaced it."""
    hybrid.indexer.index([Item("target", "zq kettle PS-LX350H", ""), Item("query", "vintage PSLX350H", "")])
    search = hybrid.store.search

    def search_then_write(*args, **kwargs):
        found = search(*args, **kwargs)
        monkeypatch.setattr(hybrid.store, "search", search)
        hybrid.indexer.index([Item("target", "zq kettle", "")])  # its part number gone, after the read
        return found

    monkeypatch.setattr(hybrid.store, "search", search_then_write)
    [read] = [m for m in hybrid.similar_to_item("query", 5) if m.id == "target"]
    assert read.title == "zq kettle PS-LX350H"
    assert read.field_scores["lexical_codes"] > 0 and read.field_scores["lexical_text"] > 0
    [now] = [m for m in hybrid.similar_to_item("query", 130) if m.id == "target"]
    assert now.title == "zq kettle" and now.field_scores["lexical_codes"] == 0


def test_only_model_numbers_count_as_codes(hybrid):
    """A short number or a plain word shared with the query is no code: the component is unknown (null) for a query
    without codes, whatever it shares; with a code, items without it score 0."""
    hybrid.indexer.index([Item("twin", "red kettle 3 pack", ""), Item("plain", "red kettle 3", "")])
    assert all(m.field_scores["lexical_codes"] is None for m in hybrid.similar_to_item("plain", 5))
    hybrid.indexer.index([Item("coded", "red kettle 3 kx200", "")])
    by_id = {m.id: m.field_scores["lexical_codes"] for m in hybrid.similar_to_item("coded", 130)}
    assert by_id["twin"] == 0 and by_id["plain"] == 0


@pytest.mark.parametrize(("analyzer", "stems"), [("words+joined-part-numbers/v1", False), (CODE_STEMS, True)])
def test_the_bundles_analyzer_decides_whether_a_suffixed_model_number_matches(tiny_bundle, tmp_path, analyzer, stems):
    """A v2 bundle stores each code's stems: "LW1002" matches "LW1002W" by its codes; a v1 bundle (exported before
    v2) keeps analysing as v1, which its stores were built with, so they are not silently scored on other terms."""
    lexical = {"analyzer": analyzer, "weighting": "sublinear-tf-l2/v1"}
    runtime = served_catalog(tiny_bundle, tmp_path, lexical=lexical, fusion={"weights": DEFAULT_FUSION})
    try:
        runtime.engine.indexer.index([Item("suffixed", "zq kettle LW1002W", ""), Item("bare", "lamp LW1002", "")])
        [match] = [m for m in runtime.engine.similar_to_item("bare", 130) if m.id == "suffixed"]
        assert (match.field_scores["lexical_codes"] > 0) is stems
    finally:
        runtime.close()


def test_a_store_built_with_analyzer_v1_refuses_a_bundle_reexported_with_v2(tiny_bundle, tmp_path):
    """Its stored terms lack the stems v2 queries carry: re-index rather than rank on terms of another analyzer."""
    v1 = {"analyzer": "words+joined-part-numbers/v1", "weighting": "sublinear-tf-l2/v1"}
    served_catalog(tiny_bundle, tmp_path, lexical=v1, fusion={"weights": DEFAULT_FUSION}).close()
    path = tmp_path / "bundle" / "bundle.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "lexical": {**v1, "analyzer": CODE_STEMS}}))
    with pytest.raises(StoreMismatchError, match="re-index"):
        Service(Settings(bundle_dir=tmp_path / "bundle", data_dir=tmp_path / "data"))


def test_ranking_does_not_depend_on_k_or_the_filter(normalised):
    """k=10 reranks a part of the 120 items (its candidates), k=100 all of them: the items both return come in the
    same order with the same scores (a candidate set may miss an item, never reorder or rescore the others)."""
    for query in ("i3", "i10", "i41"):
        top10 = normalised.similar_to_item(query, 10)
        wide = {m.id: m for m in normalised.similar_to_item(query, 100)}
        both = [m for m in top10 if m.id in wide]
        assert len(both) >= 7
        assert [m.id for m in both] == [i for i in wide if i in {m.id for m in both}]
        np.testing.assert_allclose([wide[m.id].score for m in both], [m.score for m in both], rtol=1e-6)
        filtered = [m.id for m in normalised.similar_to_item(query, 60, [Equals("shop", "a")])]
        shop_a = [m.id for m in top10 if int(m.id[1:]) % 2]
        assert [i for i in filtered if i in shop_a] == [i for i in shop_a if i in filtered]


def test_components_shown_only_are_the_same_for_the_shown_rows_as_for_every_candidate(hybrid):
    """The embedded store scores the components no ranking reads (lexical_title, lexical_description) for the shown
    rows alone; a server store scores every candidate on everything in one call: the answers are the same."""
    assert hybrid.store.lexical_in_process and hybrid.ranker._shown_only == {"lexical_title", "lexical_description"}
    split = [hybrid.similar_to_item(query, k) for query in ("i3", "i10", "i41") for k in (3, 40)]
    hybrid.store.lexical_in_process = False  # as a server store does
    whole = [hybrid.similar_to_item(query, k) for query in ("i3", "i10", "i41") for k in (3, 40)]
    assert split == whole
    assert all(list(m.field_scores) == WORD_COMPONENTS for answer in split for m in answer)
