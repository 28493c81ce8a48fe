"""Evaluation datasets (formats in docs/evaluation.md), each read into one shape: queries that rank candidates,
with the relevant candidates of each query (or, for scored pairs, the gold score of query i and candidate i).
Every problem in a file stops the run with a message naming the file and line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from metricsearch.core import readers
from metricsearch.core.errors import InvalidInputError
from metricsearch.core.ranking import Per
from metricsearch.core.readers import records
from metricsearch.core.records import Item

Task = Literal["catalog-match", "annotated", "pairs", "halves"]
TASKS: tuple[Task, ...] = ("catalog-match", "annotated", "pairs", "halves")
CATALOG_SUFFIXES = (".csv", ".jsonl", ".ndjson")
HALVES_MIN_WORDS = 16  # shorter descriptions leave halves of a few words: noise, not retrieval


@dataclass(frozen=True)
class EvalData:
    """One task's data: each query ranks every candidate, except itself when it is one of them."""

    task: Task
    source: str
    queries: list[Item]
    candidates: list[Item]
    relevant: list[list[int]]  # per query: indices into candidates; pairs: [i]
    own_index: list[int | None]  # per query: its own index among the candidates (left out of its ranking)
    per: Per = "query"
    gold: np.ndarray | None = None  # pairs: the gold score of (queries[i], candidates[i])

    @property
    def is_pairs(self) -> bool:
        return self.gold is not None


def read_task(task: str, path: Path) -> EvalData:
    readers = {
        "catalog-match": read_catalog_match,
        "annotated": read_annotated,
        "pairs": read_pairs,
        "halves": read_halves,
    }
    if task not in readers:
        raise InvalidInputError(f"unknown task {task!r}; use one of {', '.join(TASKS)}")
    path = Path(path)
    if not path.exists():
        raise InvalidInputError(f"{path}: no such file or folder")
    return readers[task](path)


def read_catalog_match(folder: Path) -> EvalData:
    """`left` and `right` catalogs and `gold.csv` (left_id, right_id): each left item with a gold match ranks every
    right item; its gold matches are relevant (per query: the best-ranked match counts, as for Abt-Buy)."""
    left = readers.read_catalog_list(_one_file(folder, "left", CATALOG_SUFFIXES))
    right = readers.read_catalog_list(_one_file(folder, "right", CATALOG_SUFFIXES))
    left_index = {item.id: i for i, item in enumerate(left)}
    right_index = {item.id: j for j, item in enumerate(right)}
    gold_path = _one_file(folder, "gold", (".csv", ".tsv", ".jsonl"))
    matches: dict[int, list[int]] = {}
    for where, row in records(gold_path, ("left_id", "right_id")):
        if row["left_id"] not in left_index:
            raise InvalidInputError(f"{where}: left_id {row['left_id']!r} is not an id of the left catalog")
        if row["right_id"] not in right_index:
            raise InvalidInputError(f"{where}: right_id {row['right_id']!r} is not an id of the right catalog")
        matches.setdefault(left_index[row["left_id"]], []).append(right_index[row["right_id"]])
    if not matches:
        raise InvalidInputError(f"{gold_path}: has no matches")
    queries = sorted(matches)
    return EvalData(
        task="catalog-match",
        source=str(folder),
        queries=[left[i] for i in queries],
        candidates=right,
        relevant=[matches[i] for i in queries],
        own_index=[None] * len(queries),
    )


def read_annotated(folder: Path) -> EvalData:
    """`catalog` and `annotations.csv` (source_id, similar_id): each annotated source ranks every other item;
    each annotated similar item is one example (per pair, as the papers' expert sets are scored)."""
    catalog = readers.read_catalog_list(_one_file(folder, "catalog", CATALOG_SUFFIXES))
    index = {item.id: i for i, item in enumerate(catalog)}
    annotations_path = _one_file(folder, "annotations", (".csv", ".tsv", ".jsonl"))
    similar: dict[int, list[int]] = {}
    for where, row in records(annotations_path, ("source_id", "similar_id")):
        for column in ("source_id", "similar_id"):
            if row[column] not in index:
                raise InvalidInputError(f"{where}: {column} {row[column]!r} is not an id of the catalog")
        if row["source_id"] == row["similar_id"]:
            raise InvalidInputError(f"{where}: an item cannot be annotated as similar to itself")
        similar.setdefault(index[row["source_id"]], []).append(index[row["similar_id"]])
    if not similar:
        raise InvalidInputError(f"{annotations_path}: has no annotations")
    sources = sorted(similar)
    return EvalData(
        task="annotated",
        source=str(folder),
        queries=[catalog[i] for i in sources],
        candidates=catalog,
        relevant=[sorted(set(similar[i])) for i in sources],
        own_index=sources,
        per="pair",
    )


def read_pairs(path: Path) -> EvalData:
    """Scored pairs (text_a, text_b, score on any scale): text_a is a query with only a title, text_b the
    candidate it is scored against."""
    rows = [(pair.text_a, pair.text_b, pair.score) for pair in readers.read_pairs(path)]
    if len(rows) < 2:
        raise InvalidInputError(f"{path}: needs at least two pairs to correlate")
    return EvalData(
        task="pairs",
        source=str(path),
        queries=[Item(id=f"a{i}", title=a) for i, (a, _, _) in enumerate(rows)],
        candidates=[Item(id=f"b{i}", title=b) for i, (_, b, _) in enumerate(rows)],
        relevant=[[i] for i in range(len(rows))],
        own_index=[None] * len(rows),
        gold=np.array([score for _, _, score in rows]),
    )


def split_halves(text: str) -> tuple[str, str]:
    """First and second half of a text, cut between words at the middle word."""
    words = text.split()
    middle = len(words) // 2
    return " ".join(words[:middle]), " ".join(words[middle:])


def read_halves(path: Path) -> EvalData:
    """A catalog whose descriptions of at least HALVES_MIN_WORDS words are cut in two: each first half (a query
    with only a title, the half's text) ranks every second half; its own is relevant (second-order-metrics.txt
    section 4.2). Titles are not used: they would give the item away."""
    catalog = [item for item in readers.read_catalog_list(path) if len(item.description.split()) >= HALVES_MIN_WORDS]
    if len(catalog) < 2:
        raise InvalidInputError(f"{path}: fewer than two items with a description of {HALVES_MIN_WORDS}+ words")
    halves = [split_halves(item.description) for item in catalog]
    return EvalData(
        task="halves",
        source=str(path),
        queries=[Item(id=item.id, title=first) for item, (first, _) in zip(catalog, halves, strict=True)],
        candidates=[Item(id=item.id, title=second) for item, (_, second) in zip(catalog, halves, strict=True)],
        relevant=[[i] for i in range(len(catalog))],
        own_index=[None] * len(catalog),
    )


def _one_file(folder: Path, stem: str, suffixes: tuple[str, ...]) -> Path:
    if not folder.is_dir():
        raise InvalidInputError(f"{folder}: this task reads a folder (docs/evaluation.md), not a file")
    found = [folder / f"{stem}{s}" for s in suffixes if (folder / f"{stem}{s}").is_file()]
    if len(found) != 1:
        wanted = " or ".join(f"{stem}{s}" for s in suffixes)
        raise InvalidInputError(f"{folder}: needs exactly one of {wanted}, found {len(found)}")
    return found[0]
