"""The harness turns a scorer's matrix into a table row: pessimistic ranks of the relevant candidates among the
others (a query's own item left out), the ranking metrics over them, or for scored pairs the correlation of each
pair's score with its gold score. Checked against values computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from metricsearch.core.records import Item
from metricsearch.evaluation.datasets import EvalData
from metricsearch.evaluation.harness import ModelResult, evaluate, rankings


class Fixed:
    """A scorer returning a matrix given up front."""

    def __init__(self, scores: list[list[float]], label: str = "fixed") -> None:
        self.label, self.how, self._scores = label, "`--fixed`", np.asarray(scores)

    def scores(self, data: EvalData) -> np.ndarray:
        return self._scores


def _items(prefix: str, n: int) -> list[Item]:
    return [Item(f"{prefix}{i}", f"title {i}") for i in range(n)]


def _matching(relevant: list[list[int]]) -> EvalData:
    """Queries ranking four candidates that are other items (catalog-match): no own index."""
    queries = _items("q", len(relevant))
    return EvalData("catalog-match", "hand", queries, _items("c", 4), relevant, [None] * len(queries))


def test_ranks_are_pessimistic_and_each_query_counts_once_by_its_best_relevant_candidate():
    data = _matching([[1], [0, 3]])
    # Query 0: its relevant candidate ties with candidate 2 and trails candidate 0, so it is third, not second.
    # Query 1: the best of its relevant candidates (0.7) trails one other: second.
    result = evaluate(data, Fixed([[0.9, 0.5, 0.5, 0.1], [0.2, 0.8, 0.1, 0.7]]))
    assert (result.model, result.how) == ("fixed", "`--fixed`")
    assert (result.ranks, result.n_candidates, result.predicted) == ([3, 2], [4, 4], [])
    assert result.metrics["MRR"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert result.metrics["MPR"] == pytest.approx(((1 - 2 / 3) + (1 - 1 / 3)) / 2)
    assert (result.metrics["HR@1"], result.metrics["HR@5"]) == (0.0, 1.0)
    assert result.metrics["P@5"] == pytest.approx((1 / 5 + 2 / 5) / 2)  # per query, every relevant one counts
    assert result.seconds >= 0


def test_a_query_never_competes_with_its_own_item():
    """Annotated and halves-like tasks rank a catalog against itself: the query's own candidate is left out."""
    items = _items("i", 3)
    data = EvalData("annotated", "hand", [items[0]], items, [[2]], [0], per="pair")
    result = evaluate(data, Fixed([[100.0, 0.1, 0.5]]))  # its own item scores highest, as it would
    assert (result.ranks, result.n_candidates) == ([1], [2])
    positions, counts = rankings(data, np.array([[100.0, 0.5, 0.1]]))
    assert [p.tolist() for p in positions] == [[2]] and counts == [2]  # index 2 is 1 once index 0 is gone


def test_per_pair_counts_each_relevant_item_among_the_non_relevant_ones():
    items = _items("i", 5)
    data = EvalData("annotated", "hand", [items[0]], items, [[1, 2]], [0], per="pair")
    # Without itself: candidates 1..4 score 0.9, 0.8, 0.95, 0.1; both relevant trail only candidate 3.
    result = evaluate(data, Fixed([[1.0, 0.9, 0.8, 0.95, 0.1]]))
    assert (result.ranks, result.n_candidates) == ([2, 2], [3, 3])


def test_scored_pairs_correlate_each_pairs_own_score_with_its_gold_score():
    queries, candidates = _items("a", 3), _items("b", 3)
    gold = np.array([1.0, 2.0, 3.0])
    data = EvalData("pairs", "hand", queries, candidates, [[0], [1], [2]], [None] * 3, gold=gold)
    # Only the diagonal is a pair's score; the rest must be ignored (9.0 would ruin both correlations).
    result = evaluate(data, Fixed([[0.1, 9.0, 9.0], [9.0, 0.3, 9.0], [9.0, 9.0, 0.2]]))
    assert result.predicted == pytest.approx([0.1, 0.3, 0.2])
    # Ranks 1, 3, 2 against 1, 2, 3: Spearman 1 - 6 * 2 / (3 * 8); Pearson of deviations (-.1, .1, 0) and (-1, 0, 1).
    assert result.metrics == pytest.approx({"Pearson": 0.5, "Spearman": 0.5})
    assert result.ranks == [] and result.n_candidates == []


def test_a_scorer_returning_the_wrong_shape_is_named():
    with pytest.raises(ValueError, match=r"broken returned scores of shape \(2, 3\), expected \(2, 4\)"):
        evaluate(_matching([[0], [1]]), Fixed(np.zeros((2, 3)).tolist(), label="broken"))


def test_a_row_serialises_to_the_fields_a_report_reads_back():
    row = ModelResult("m", "`how`", {"MRR": 0.5}, 1.5, ranks=[1, 2], n_candidates=[4, 4])
    assert row.to_json() == {
        "model": "m",
        "how": "`how`",
        "metrics": {"MRR": 0.5},
        "seconds": 1.5,
        "ranks": [1, 2],
        "n_candidates": [4, 4],
        "predicted": [],
    }
