"""Pseudo-match mining: pairs each side ranks first for the other, widest margins kept, a lexical look-alike as
the negative, per field; a catalog without two sources is refused with a message naming the fix."""

from __future__ import annotations

import json

import numpy as np
import pytest

from metricsearch.core.errors import TrainerError
from metricsearch.core.records import Item, Triplet
from metricsearch.trainer.pseudo import mine_pseudo_matches, mutual_matches, pseudo_triplets, split_sources


def item(id: str, source: str | None, title: str = "t", description: str = "") -> Item:
    return Item(id, title, description, {"source": source} if source is not None else None)


def test_sources_split_in_two_and_anything_else_is_refused():
    left, right = split_sources([item("a", "abt"), item("b", "buy"), item("c", "abt"), item("d", "buy")])
    assert [i.id for i in left] == ["a", "c"] and [i.id for i in right] == ["b", "d"]
    with pytest.raises(TrainerError, match="item 'x' has no source"):
        split_sources([item("a", "abt"), item("x", None)])
    with pytest.raises(TrainerError, match=r"exactly two sources.*'abt' \(2\)"):
        split_sources([item("a", "abt"), item("c", "abt")])
    with pytest.raises(TrainerError, match="at least 2 items each"):
        split_sources([item("a", "abt"), item("c", "abt"), item("b", "buy")])


def test_only_mutual_firsts_are_kept_widest_margin_first():
    scores = np.array(
        [
            [9.0, 1.0, 0.0],  # 0 -> 0, and 0 is column 0's best: margin min(8, 4) = 4
            [5.0, 2.0, 1.0],  # 1 -> 0, but column 0 prefers 0: not mutual
            [0.0, 2.5, 3.0],  # 2 -> 2 (margin 0.5 in its row), column 2's best: kept
        ]
    )
    found = mutual_matches(scores, keep=1.0)
    assert [(m.left, m.right) for m in found] == [(0, 0), (2, 2)]
    assert [m.margin for m in found] == pytest.approx([4.0, 0.5])
    assert [(m.left, m.right) for m in mutual_matches(scores, keep=0.5)] == [(0, 0)]


def test_triplets_pair_each_field_with_the_lexically_nearest_other_item():
    left = [item("l0", "a", "red shirt", "cotton red shirt"), item("l1", "a", "blue cap", "")]
    right = [item("r0", "b", "shirt red", "red cotton shirt"), item("r1", "b", "red scarf", "wool red scarf")]
    matches = mutual_matches(np.array([[5.0, 1.0], [0.0, 1.0]]), keep=1.0)
    lexical = np.array([[0.9, 0.8], [0.1, 0.2]])
    triplets = pseudo_triplets(left, right, [m for m in matches if m.left == 0], lexical)
    assert triplets == [
        Triplet("red shirt", "shirt red", "red scarf"),
        Triplet("cotton red shirt", "red cotton shirt", "wool red scarf"),
        Triplet("shirt red", "red shirt", "blue cap"),  # l1 has no description: no description triplet
    ]


def test_mining_writes_the_triplets_from_the_given_scores_only(tmp_path):
    catalog = tmp_path / "catalog.csv"
    rows = ["id,title,description,source", "a,red shirt,,abt", "b,blue cap,,abt", "c,shirt red,,buy", "d,cap,,buy"]
    catalog.write_text("\n".join(rows) + "\n")
    seen = []

    def scores(left, right):
        seen.append(([i.id for i in left], [i.id for i in right]))
        return np.array([[3.0, 0.0], [0.0, 3.0]]), np.array([[0.5, 0.1], [0.2, 0.6]])

    out = tmp_path / "run" / "pseudo_matches.jsonl"
    line = mine_pseudo_matches(catalog, scores, out, keep=1.0)
    assert seen == [(["a", "b"], ["c", "d"])]
    assert "2 pairs kept of 2 x 2 items, 4 triplets" in line
    written = [json.loads(row) for row in out.read_text().splitlines()]
    assert written[0] == {"anchor": "red shirt", "positive": "shirt red", "negative": "cap"}

    with pytest.raises(TrainerError, match="already holds a run"):
        mine_pseudo_matches(catalog, scores, out)
    out.unlink()
    with pytest.raises(TrainerError, match="too little to train on"):
        mine_pseudo_matches(catalog, lambda left, right: (np.array([[3.0, 2.0], [3.0, 1.0]]), np.ones((2, 2))), out)
