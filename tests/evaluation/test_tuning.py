"""`metricsearch tune`: weights chosen on the catalog's own pseudo-queries (no labels read) or on labelled pairs,
written into the bundle and read back by the service's rerank; bad catalogs give clear errors."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from metricsearch.core.bundle import load_bundle
from metricsearch.core.errors import InvalidInputError
from metricsearch.core.fusion import DEFAULT_FUSION
from metricsearch.core.records import Item
from metricsearch.core.rerank import Reranker
from metricsearch.evaluation import tuning
from metricsearch.evaluation.tuning import MIN_CODE_PAIRS, agreed_best, code_pairs, pseudo_queries, tune
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service
from tests.service.engine.test_statistics import ADAPTIVE
from tests.service.test_hybrid import catalog_items


def write_catalog(path, items):
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "title", "description"])
        writer.writerows([i.id, i.title, i.description] for i in items)
    return path


@pytest.fixture
def bundle(tiny_bundle, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, copy)
    return copy


def test_weights_are_written_into_the_bundle_and_served(bundle, tmp_path, monkeypatch):
    catalog = write_catalog(tmp_path / "c.csv", catalog_items(80))

    def no_labels(*args, **kwargs):
        raise AssertionError("tune without --pairs read a labelled file")

    monkeypatch.setattr(tuning, "records", no_labels)
    tuned = tune(catalog, bundle, queries=40)
    manifest = load_bundle(bundle).manifest
    assert manifest.fusion is not None and manifest.fusion.weights == tuned.weights
    assert "pseudo-queries" in manifest.fusion.chosen_by and tuned.queries == 40
    assert Reranker(manifest).fusion == tuned.weights
    # The grid holds the weights it started from: no signal ranks the chosen ones worse.
    assert set(tuned.mrr) == {"pseudo-queries"}  # catalog_items share no code: one signal
    assert all(tuned.mrr[signal] >= tuned.default_mrr[signal] for signal in tuned.mrr)


def test_labelled_pairs_rank_instead(bundle, tmp_path):
    items = catalog_items(40)
    catalog = write_catalog(tmp_path / "c.csv", items)
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("left_id,right_id\ni0,i1\ni2,i3\n")
    tuned = tune(catalog, bundle, pairs=pairs)
    assert tuned.queries == 2 and "labelled pairs" in load_bundle(bundle).manifest.fusion.chosen_by
    pairs.write_text("left_id,right_id\ni0,nope\n")
    with pytest.raises(InvalidInputError, match=r"pairs\.csv:2: right_id 'nope' is not an id of the catalog"):
        tune(catalog, bundle, pairs=pairs)


def test_a_labelled_query_ranks_among_the_items_that_are_no_query(bundle, tmp_path):
    """Two listings of one shop (the left ids) are no match to find for each other: with two shops in the catalog a
    query ranks among the other shop's, as a storefront filters; counted, the twin would tie the match."""
    twins = [Item("q0", "zq kettle PS-LX350H"), Item("q1", "zq kettle PS-LX350H"), Item("r0", "PS-LX350H zq kettle")]
    catalog = write_catalog(tmp_path / "c.csv", [*catalog_items(30), *twins])
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("left_id,right_id\nq0,r0\nq1,r0\n")
    assert tune(catalog, bundle, pairs=pairs).mrr == {"labelled pairs": 1.0}


def test_a_catalog_without_descriptions_leaves_their_weights_at_zero(bundle, tmp_path):
    items = [type(i)(i.id, i.title, "") for i in catalog_items(30)]
    tuned = tune(write_catalog(tmp_path / "c.csv", items), bundle, queries=20)
    assert tuned.weights.get("description", 0) == 0 and tuned.weights.get("lexical_description", 0) == 0


@pytest.mark.parametrize(("content", "message"), [("id,title\n", "has no items"), ("id,title\n1,a\n", "at least 10")])
def test_bad_catalogs_are_refused(bundle, tmp_path, content, message):
    catalog = tmp_path / "bad.csv"
    catalog.write_text(content)
    with pytest.raises(InvalidInputError, match=message):
        tune(catalog, bundle)
    assert json.loads((bundle / "bundle.json").read_text()).get("fusion") is None  # nothing written


def test_pseudo_queries_keep_part_numbers_and_are_reproducible():
    items = catalog_items(20)
    first, sources = pseudo_queries(items, 5, seed=1)
    again, _ = pseudo_queries(items, 5, seed=1)
    assert first == again and len(set(sources)) == 5
    for query, source in zip(first, sources, strict=True):
        number = items[source].title.split()[-1]  # "model<n>": a part number
        assert number in query.title.replace("-", "")


def test_pseudo_queries_keep_the_bundles_weights_without_a_clear_gain(bundle, tmp_path):
    items = [type(i)(i.id, i.title, "") for i in catalog_items(30)]
    tuned = tune(write_catalog(tmp_path / "c.csv", items), bundle, queries=20, margin=2.0)  # MRR cannot gain 2
    # The tiny bundle has no fusion: DEFAULT_FUSION is kept, less what a catalog without descriptions cannot use.
    assert tuned.weights == {n: w for n, w in DEFAULT_FUSION.items() if w > 0 and "description" not in n}
    assert tuned.mrr == tuned.default_mrr
    assert "kept" in load_bundle(bundle).manifest.fusion.chosen_by


def test_code_pairs_are_items_that_alone_share_a_part_number():
    items = [
        Item("a", "zq kettle PS-LX350H", "steel"),
        Item("b", "kettle", "the PSLX350H in steel"),  # the same code, written without its hyphen
        Item("c", "toaster T1000X"),
        Item("d", "toaster T1000X white"),
        Item("e", "toaster T1000X black"),  # three hold T1000X: no pair
        Item("f", "fan 5d"),
        Item("g", "fan 5d"),  # a short code says little: no pair
    ]
    assert code_pairs(items, 10, seed=1) == [(0, 1), (1, 0)]
    assert code_pairs(items, 1, seed=1) == code_pairs(items, 1, seed=1) and len(code_pairs(items, 1, seed=1)) == 1


def test_a_weighting_only_one_signal_prefers_does_not_win():
    before = {"pseudo-queries": 0.90, "code pairs": 0.80}
    one_sided = ({"pseudo-queries": 0.99, "code pairs": 0.70}, {"title": 1.0})
    both = ({"pseudo-queries": 0.92, "code pairs": 0.83}, {"title": 2.0})
    assert agreed_best([one_sided, both], before) == (*both, pytest.approx(0.02))


def test_code_pairs_join_the_pseudo_queries_in_a_catalog_of_part_numbers(bundle, tmp_path):
    items = catalog_items(60)
    shops = [Item(f"x{n}", f"{item.title} SKU{n:04d}A", item.description) for n, item in enumerate(items)]
    twins = [Item(f"y{n}", f"SKU{n:04d}A listing", "") for n in range(MIN_CODE_PAIRS)]
    tuned = tune(write_catalog(tmp_path / "c.csv", shops + twins), bundle, queries=40, margin=2.0)
    assert set(tuned.mrr) == {"pseudo-queries", "code pairs"} and tuned.queries == 40 + 2 * MIN_CODE_PAIRS
    assert f"and {2 * MIN_CODE_PAIRS} code pairs" in load_bundle(bundle).manifest.fusion.chosen_by
    assert tuned.mrr == tuned.default_mrr  # kept: no weighting gains 2 on both signals


def test_tune_keeps_an_adaptive_rule_whose_choice_no_weighting_beats_and_the_service_serves_that_choice(
    bundle, tmp_path
):
    """The round trip a user relies on: `tune` without labels compares against what the rule chooses on the catalog,
    keeps the rule (not a frozen copy of its weights) when nothing beats it, and the service given the tuned bundle
    and the same catalog ranks with exactly those weights."""
    manifest = json.loads((bundle / "bundle.json").read_text())
    (bundle / "bundle.json").write_text(json.dumps(manifest | {"fusion": ADAPTIVE}))
    items = catalog_items(40)
    tuned = tune(write_catalog(tmp_path / "c.csv", items), bundle, queries=20, margin=2.0)
    fusion = load_bundle(bundle).manifest.fusion
    assert fusion.adaptive.model_dump() == ADAPTIVE["adaptive"] and fusion.weights == DEFAULT_FUSION
    assert "kept its adaptive rule's choice" in fusion.chosen_by
    service = Service(Settings(bundle_dir=bundle, data_dir=tmp_path / "data"))
    try:
        service.live.engine.indexer.index(items)
        service.live.engine.statistics.warm()
        served, _ = service.live.engine.statistics.fusion_in_use()
    finally:
        service.live.close()
    assert {n: w for n, w in served.items() if w > 0} == tuned.weights


def test_labelled_pairs_replace_an_adaptive_rule_with_fixed_weights(bundle, tmp_path):
    manifest = json.loads((bundle / "bundle.json").read_text())
    (bundle / "bundle.json").write_text(json.dumps(manifest | {"fusion": ADAPTIVE}))
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("left_id,right_id\ni0,i1\ni2,i3\n")
    tuned = tune(write_catalog(tmp_path / "c.csv", catalog_items(40)), bundle, pairs=pairs)
    fusion = load_bundle(bundle).manifest.fusion
    assert (
        fusion.adaptive is None
        and fusion.weights == tuned.weights
        and "which these fixed weights replace" in (fusion.chosen_by)
    )
    assert "adaptive" not in json.loads((bundle / "bundle.json").read_text())["fusion"]  # as older services read it
