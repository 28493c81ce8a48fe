"""Evaluation datasets (formats in docs/evaluation.md), each read into one shape: queries that rank candidates,
with the relevant candidates of each query (or, for scored pairs, the gold score of query i and candidate i).
Every problem in a file stops the run with a message naming the file and line."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from evaluation.metrics import Per
from service.catalog import Item
from service.catalog_io import json_objects, read_catalog
from service.errors import InvalidInputError

Task = Literal["catalog-match", "annotated", "pairs", "halves"]
TASKS: tuple[Task, ...] = ("catalog-match", "annotated", "pairs", "halves")
CATALOG_SUFFIXES = (".csv", ".jsonl", ".ndjson")
# STS-B and sentence-transformers' copies of it name the texts sentence1/sentence2, as the trainer accepts.
ALIASES = {"sentence1": "text_a", "sentence2": "text_b"}
PAIR_COLUMNS = ("text_a", "text_b", "score")
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
    left = _catalog(_one_file(folder, "left", CATALOG_SUFFIXES))
    right = _catalog(_one_file(folder, "right", CATALOG_SUFFIXES))
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
    catalog = _catalog(_one_file(folder, "catalog", CATALOG_SUFFIXES))
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
    rows = [(row["text_a"], row["text_b"], _number(row["score"], where)) for where, row in records(path, PAIR_COLUMNS)]
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
    catalog = [item for item in _catalog(path) if len(item.description.split()) >= HALVES_MIN_WORDS]
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


def records(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[str, dict[str, str]]]:
    """("file:line", {column: text}) per row of a .csv, .tsv (unquoted, as STS-B) or .jsonl file; every column
    present and not blank."""
    path = Path(path)
    if not path.is_file():
        raise InvalidInputError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        with path.open(newline="", encoding="utf-8-sig") as f:
            tsv = suffix == ".tsv"
            reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if tsv else csv.DictReader(f)
            reader.fieldnames = [ALIASES.get(name, name) for name in reader.fieldnames or []]
            missing = [c for c in columns if c not in reader.fieldnames]
            if missing:
                raise InvalidInputError(
                    f"{path}:1: header lacks column(s) {', '.join(missing)}; it needs {', '.join(columns)}"
                )
            for row in reader:
                yield _checked(row, columns, f"{path}:{reader.line_num}")
    elif suffix in (".jsonl", ".ndjson"):
        for where, record in json_objects(path):
            yield _checked({ALIASES.get(k, k): v for k, v in record.items()}, columns, where)
    else:
        raise InvalidInputError(f"{path}: unknown format; use .csv, .tsv or .jsonl")


def _checked(row: dict, columns: tuple[str, ...], where: str) -> tuple[str, dict[str, str]]:
    values = {c: row.get(c) for c in columns}
    missing = [c for c, v in values.items() if v is None or not str(v).strip()]
    if missing:
        raise InvalidInputError(f"{where}: missing {', '.join(missing)}")
    return where, {c: str(v) for c, v in values.items()}


def _number(value: object, where: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidInputError(f"{where}: score {value!r} is not a number") from None
    if not math.isfinite(number):
        raise InvalidInputError(f"{where}: score {value!r} is not a finite number")
    return number


def _catalog(path: Path) -> list[Item]:
    items = list(read_catalog(path))
    if not items:
        raise InvalidInputError(f"{path}: has no items")
    # read_catalog yields items without their lines: records() reads the same rows again to name them.
    first_line: dict[str, str] = {}
    for item, (where, _) in zip(items, records(path, ("id",)), strict=True):
        if item.id in first_line:
            raise InvalidInputError(
                f"{where}: id {item.id!r} appears more than once (first on line {first_line[item.id]}); "
                "ids must be unique"
            )
        first_line[item.id] = where.rsplit(":", 1)[1]
    return items


def _one_file(folder: Path, stem: str, suffixes: tuple[str, ...]) -> Path:
    if not folder.is_dir():
        raise InvalidInputError(f"{folder}: this task reads a folder (docs/evaluation.md), not a file")
    found = [folder / f"{stem}{s}" for s in suffixes if (folder / f"{stem}{s}").is_file()]
    if len(found) != 1:
        wanted = " or ".join(f"{stem}{s}" for s in suffixes)
        raise InvalidInputError(f"{folder}: needs exactly one of {wanted}, found {len(found)}")
    return found[0]
