"""What an evaluation run leaves behind and how `--compare` reads it back: results.json with everything (ranks
included), results.md with the table, the plots, and one table per task kind over several runs; a folder that holds
no run is refused saying what to pass."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from metricsearch.core.errors import InvalidInputError
from metricsearch.core.records import Item
from metricsearch.evaluation.datasets import EvalData
from metricsearch.evaluation.harness import evaluate
from metricsearch.evaluation.report import Run, compare_tables, describe, load_run, plot_runs, write_run

COMMAND = "metricsearch evaluate --task catalog-match --data hand"
PNG = b"\x89PNG"


class Fixed:
    def __init__(self, label: str, scores: list[list[float]]) -> None:
        self.label, self.how, self._scores = label, "`--fixed`", np.asarray(scores)

    def scores(self, data: EvalData) -> np.ndarray:
        return self._scores


def _items(prefix: str, n: int) -> list[Item]:
    return [Item(f"{prefix}{i}", f"title {i}") for i in range(n)]


RANKING = EvalData("catalog-match", "hand", _items("q", 2), _items("c", 4), [[1], [0, 3]], [None, None])
PAIRS = EvalData("pairs", "pairs.tsv", _items("a", 3), _items("b", 3), [[0], [1], [2]], [None] * 3, gold=np.arange(3.0))


@pytest.fixture(scope="module")
def ranking_run(tmp_path_factory) -> tuple[Path, list[Path]]:
    # model-a: ranks 3 and 2 (a tie broken against it, see tests/evaluation/test_harness.py); model-b: 1 and 1.
    results = [
        evaluate(RANKING, Fixed("model-a", [[0.9, 0.5, 0.5, 0.1], [0.2, 0.8, 0.1, 0.7]])),
        evaluate(RANKING, Fixed("model-b", [[0.0, 0.9, 0.1, 0.1], [0.9, 0.1, 0.1, 0.8]])),
    ]
    folder = tmp_path_factory.mktemp("runs") / "run1"
    return folder, write_run(folder, RANKING, results, COMMAND)


@pytest.fixture(scope="module")
def pairs_run(tmp_path_factory) -> tuple[Path, list[Path]]:
    result = evaluate(PAIRS, Fixed("pair-model", [[0.1, 0, 0], [0, 0.3, 0], [0, 0, 0.2]]))
    folder = tmp_path_factory.mktemp("runs") / "pairs1"
    return folder, write_run(folder, PAIRS, [result], "metricsearch evaluate --task pairs")


def test_a_ranking_run_writes_its_results_its_table_and_two_plots(ranking_run):
    folder, written = ranking_run
    assert [p.name for p in written] == ["results.json", "results.md", "rank_histogram.png", "hr_at_k.png"]
    assert all(p.parent == folder for p in written)
    assert all(p.read_bytes()[:4] == PNG for p in written[2:])
    payload = json.loads((folder / "results.json").read_text())
    assert (payload["task"], payload["data"], payload["command"], payload["gold"]) == (
        "catalog-match",
        "hand",
        COMMAND,
        None,
    )
    assert payload["summary"] == describe(RANKING)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", payload["created_at"])
    model_a, model_b = payload["models"]
    assert (model_a["model"], model_a["ranks"], model_a["n_candidates"]) == ("model-a", [3, 2], [4, 4])
    assert (model_b["model"], model_b["ranks"]) == ("model-b", [1, 1])


def test_results_md_is_the_table_with_every_ranking_metric_to_three_decimals(ranking_run):
    folder, _ = ranking_run
    text = (folder / "results.md").read_text()
    assert text.startswith(f"# catalog-match\n\n{describe(RANKING)}.\n\nCommand: `{COMMAND}`\n\n")
    lines = text.splitlines()
    header = lines.index("| model | MPR | MRR | HR@1 | HR@10 | HR@100 | P@10 | NDCG@10 | how |")
    assert lines[header + 1] == "|---|---|---|---|---|---|---|---|---|"
    # model-a by hand: MPR (1/3 + 2/3) / 2, MRR (1/3 + 1/2) / 2, P@10 (1 + 2) / 10 / 2,
    # NDCG@10 (1/log2(4) + (1/log2(3) + 1/log2(4)) / (1 + 1/log2(3))) / 2.
    assert lines[header + 2] == "| model-a | 0.500 | 0.417 | 0.000 | 1.000 | 1.000 | 0.150 | 0.597 | `--fixed` |"
    assert lines[header + 3] == "| model-b | 1.000 | 1.000 | 1.000 | 1.000 | 1.000 | 0.150 | 1.000 | `--fixed` |"


def test_a_pairs_run_keeps_the_gold_scores_and_plots_predicted_against_gold(pairs_run):
    folder, written = pairs_run
    assert [p.name for p in written] == ["results.json", "results.md", "pairs_scatter.png"]
    assert written[2].read_bytes()[:4] == PNG
    payload = json.loads((folder / "results.json").read_text())
    assert payload["gold"] == [0.0, 1.0, 2.0] and payload["models"][0]["predicted"] == pytest.approx([0.1, 0.3, 0.2])
    assert "| model | Pearson | Spearman | how |" in (folder / "results.md").read_text()
    assert "| pair-model | 0.500 | 0.500 | `--fixed` |" in (folder / "results.md").read_text()


def test_a_run_reads_back_as_it_was_written(ranking_run, pairs_run):
    folder, _ = ranking_run
    written = json.loads((folder / "results.json").read_text())
    assert load_run(folder) == Run("run1", "catalog-match", describe(RANKING), written["models"], None)
    assert not load_run(folder).is_pairs
    pairs = load_run(pairs_run[0])
    assert (pairs.name, pairs.is_pairs, pairs.gold) == ("pairs1", True, [0.0, 1.0, 2.0])


def test_compare_gives_one_table_per_task_kind_with_a_row_per_run_and_model(ranking_run, pairs_run):
    runs = [load_run(pairs_run[0]), load_run(ranking_run[0])]  # the ranking table comes first whatever the order
    ranking, pairs = compare_tables(runs).split("\n\n")
    ranking_lines, pair_lines = ranking.splitlines(), pairs.splitlines()
    assert ranking_lines[0] == "| run | model | MPR | MRR | HR@1 | HR@10 | HR@100 | P@10 | NDCG@10 | how |"
    assert [line.split(" | ")[:2] for line in ranking_lines[2:]] == [
        ["| run1 (catalog-match)", "model-a"],
        ["| run1 (catalog-match)", "model-b"],
    ]
    assert pair_lines[0] == "| run | model | Pearson | Spearman | how |"
    assert pair_lines[2:] == ["| pairs1 (pairs) | pair-model | 0.500 | 0.500 | `--fixed` |"]
    assert compare_tables([runs[1]]) == ranking  # no empty pairs table for ranking runs alone


def test_compare_plots_every_run_under_its_prefix(ranking_run, pairs_run, tmp_path):
    runs = [load_run(ranking_run[0]), load_run(pairs_run[0])]
    written = plot_runs(runs, tmp_path, prefix="compare_")
    names = ["compare_rank_histogram.png", "compare_hr_at_k.png", "compare_pairs_scatter.png"]
    assert [p.name for p in written] == names
    assert all(p.read_bytes()[:4] == PNG for p in written)


def test_the_summary_says_what_was_ranked_and_how_examples_count():
    assert describe(RANKING) == (
        "2 queries ranking 4 candidates (3 relevant) from hand; ties pessimistic; "
        "each query counts once, by its best-ranked relevant item"
    )
    per_pair = EvalData("annotated", "cat", _items("i", 2), _items("i", 5), [[1], [0, 2]], [0, 1], per="pair")
    assert describe(per_pair).endswith("; each (query, relevant item) pair counts once")
    assert describe(PAIRS) == "3 scored pairs from pairs.tsv; Pearson and Spearman of score vs gold"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"no results\.json; pass a folder written by `metricsearch evaluate --report-dir`"),
        ("{not json", r"results\.json: not a results file of this version"),
        ('{"task": "pairs"}', r"results\.json: not a results file of this version \('summary'\)"),
        ("[]", r"results\.json: not a results file of this version"),
    ],
)
def test_a_folder_without_a_run_of_this_version_is_refused_saying_what_to_pass(tmp_path, content, message):
    if content is not None:
        (tmp_path / "results.json").write_text(content)
    with pytest.raises(InvalidInputError, match=message):
        load_run(tmp_path)
