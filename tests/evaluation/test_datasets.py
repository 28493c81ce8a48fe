"""Evaluation datasets: each format read into queries, candidates and relevance; a malformed file stops with a
message naming the file and line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from metricsearch.core.errors import InvalidInputError
from metricsearch.evaluation.datasets import read_task, split_halves

LEFT = "id,title,description\nl1,red cotton shirt,soft red shirt\nl2,leather boots,brown boots\nl3,jeans,\n"
RIGHT = "id,title,description\nr1,boots,brown leather\nr2,shirt,red cotton\nr3,denim jeans,blue\nr4,hat,green\n"


def _write(folder: Path, **files: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text)
    return folder


def _catalog_match(tmp_path: Path, gold: str, left: str = LEFT) -> Path:
    return _write(tmp_path / "cm", left_csv=left, right_csv=RIGHT, gold_csv=gold)


def test_catalog_match_reads_gold_with_several_matches(tmp_path):
    data = read_task("catalog-match", _catalog_match(tmp_path, "left_id,right_id\nl1,r2\nl3,r3\nl3,r4\n"))
    assert [q.id for q in data.queries] == ["l1", "l3"]  # l2 has no gold match: not a query
    assert [[data.candidates[j].id for j in r] for r in data.relevant] == [["r2"], ["r3", "r4"]]
    assert data.per == "query" and data.own_index == [None, None]


@pytest.mark.parametrize(
    ("gold", "message"),
    [
        ("left_id,right_id\nl1,r2\nl2,r9\n", "gold.csv:3: right_id 'r9' is not an id of the right catalog"),
        ("left_id,right_id\nl1,r2\nzz,r1\n", "gold.csv:3: left_id 'zz' is not an id of the left catalog"),
        ("left_id,match\nl1,r2\n", "gold.csv:1: header lacks column(s) right_id"),
        ("left_id,right_id\nl1,\n", "gold.csv:2: missing right_id"),
        ("left_id,right_id\n", "gold.csv: has no matches"),
    ],
)
def test_malformed_gold_names_file_and_line(tmp_path, gold, message):
    with pytest.raises(InvalidInputError) as error:
        read_task("catalog-match", _catalog_match(tmp_path, gold))
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("left", "message"),
    [
        ("id,name,description\nl1,shirt,soft\n", "left.csv:1: header lacks column(s) title"),
        ("id,title,description\nl1,shirt,soft\nl2,,boots\n", "left.csv:3: missing title"),
        ("id,title\nl1,shirt\nl2,hat\nl1,boots\n", "left.csv:4: id 'l1' appears more than once (first on line 2)"),
    ],
)
def test_malformed_catalog_names_file_and_line(tmp_path, left, message):
    with pytest.raises(InvalidInputError) as error:
        read_task("catalog-match", _catalog_match(tmp_path, "left_id,right_id\nl1,r1\n", left))
    assert message in str(error.value)


def test_catalog_match_needs_its_files(tmp_path):
    folder = _write(tmp_path / "cm", left_csv=LEFT, right_csv=RIGHT)
    with pytest.raises(InvalidInputError, match=r"needs exactly one of gold\.csv or gold\.tsv or gold\.jsonl"):
        read_task("catalog-match", folder)
    with pytest.raises(InvalidInputError, match="reads a folder"):
        read_task("catalog-match", folder / "left.csv")


def test_annotated_items_rank_every_other_item(tmp_path):
    catalog = "\n".join(json.dumps({"id": i, "title": t}) for i, t in [(1, "a"), (2, "b"), (3, "c")]) + "\n"
    folder = _write(tmp_path / "an", catalog_jsonl=catalog, annotations_csv="source_id,similar_id\n2,3\n2,1\n")
    data = read_task("annotated", folder)
    assert [q.id for q in data.queries] == ["2"] and data.own_index == [1]
    assert data.relevant == [[0, 2]] and data.per == "pair"

    _write(folder, annotations_csv="source_id,similar_id\n2,3\n2,7\n")
    with pytest.raises(InvalidInputError, match=r"annotations\.csv:3: similar_id '7' is not an id of the catalog"):
        read_task("annotated", folder)
    _write(folder, annotations_csv="source_id,similar_id\n2,2\n")
    with pytest.raises(InvalidInputError, match=r"annotations\.csv:2: an item cannot be annotated as similar to"):
        read_task("annotated", folder)


def test_pairs_in_tsv_csv_and_jsonl(tmp_path):
    tsv = tmp_path / "p.tsv"
    tsv.write_text('sentence1\tsentence2\tscore\nA "quoted" cat\ta cat\t4.5\na dog\ta car\t0.5\n')
    data = read_task("pairs", tsv)
    assert [q.title for q in data.queries] == ['A "quoted" cat', "a dog"]
    assert data.gold.tolist() == [4.5, 0.5] and data.is_pairs

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text_a": "x", "text_b": "y", "score": 1}\n\n{"text_a": "x", "text_b": "y", "score": "high"}\n')
    with pytest.raises(InvalidInputError, match=r"bad\.jsonl:3: score 'high' is not a number"):
        read_task("pairs", bad)
    missing = tmp_path / "m.csv"
    missing.write_text("text_a,score\nx,1\n")
    with pytest.raises(InvalidInputError, match=r"m\.csv:1: header lacks column\(s\) text_b"):
        read_task("pairs", missing)


def test_halves_split_long_descriptions_only(tmp_path):
    long = " ".join(f"w{n}" for n in range(17))
    catalog = tmp_path / "c.csv"
    catalog.write_text(f"id,title,description\na,Wine A,{long}\nb,Wine B,too short\nc,Wine C,{long} more\n")
    data = read_task("halves", catalog)
    assert [q.id for q in data.queries] == ["a", "c"]
    assert data.queries[0].title == " ".join(f"w{n}" for n in range(8))
    assert data.candidates[0].title == " ".join(f"w{n}" for n in range(8, 17))
    assert "Wine" not in data.queries[0].title + data.candidates[0].title  # titles would give the item away
    assert split_halves("one two three") == ("one", "two three")


def test_the_cli_stops_on_a_malformed_dataset_naming_file_and_line(tmp_path):
    folder = _catalog_match(tmp_path, "left_id,right_id\nl1,r2\nl2,nope\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "metricsearch.cli",
            "evaluate",
            "--task",
            "catalog-match",
            "--data",
            str(folder),
            "--baseline",
            "tfidf",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert result.returncode == 1
    assert f"{folder / 'gold.csv'}:3: right_id 'nope'" in result.stderr


def test_a_repeated_id_names_the_line_of_the_repeat(tmp_path):
    """The file's own lines: a blank JSONL line counts, and a CSV record with a quoted line break is named by its
    last line (csv's line_num, as every other message here)."""
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('{"id": 7, "title": "a"}\n\n{"id": "7", "title": "b"}\n')  # 7 and "7" are one id
    with pytest.raises(InvalidInputError, match=r"c\.jsonl:3: id '7' appears more than once \(first on line 1\)"):
        read_task("halves", jsonl)
    csv_file = tmp_path / "c.csv"
    csv_file.write_text('id,title,description\na,A,"two\nlines"\nb,B,\na,C,\n')
    with pytest.raises(InvalidInputError, match=r"c\.csv:5: id 'a' appears more than once \(first on line 3\)"):
        read_task("halves", csv_file)
