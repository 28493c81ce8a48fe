"""The one reader of the files every part takes: catalogs (CSV or JSONL of id, title, description, metadata), scored
pairs and triplets (CSV, TSV or JSONL), and the column files of evaluation tasks. The service's bulk load, the
trainer and the evaluation read through here, so they agree on every file (byte-order marks, quoting, types);
every problem raises InvalidInputError naming the file and line."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from pathlib import Path

from metricsearch.core.errors import InvalidInputError
from metricsearch.core.records import Item, ScoredPair, Triplet

REQUIRED = ("id", "title")
TEXT_COLUMNS = ("id", "title", "description", "metadata")
PAIR_COLUMNS = ("text_a", "text_b", "score")
TRIPLET_COLUMNS = ("anchor", "positive", "negative")
# STS-B and sentence-transformers' copies of it name the texts sentence1/sentence2.
ALIASES = {"sentence1": "text_a", "sentence2": "text_b"}
NUMBER_COLUMNS = frozenset({"score"})


def json_objects(path: Path) -> Iterator[tuple[str, dict]]:
    """("file:line", object) for each non-blank line of a JSONL file (a leading byte-order mark is skipped)."""
    with Path(path).open(encoding="utf-8-sig") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{where}: not valid JSON ({exc.msg})") from exc
            if not isinstance(record, dict):
                raise InvalidInputError(f"{where}: each line must be a JSON object")
            yield where, record


def _rows(path: Path, suffixes: tuple[str, ...]) -> Iterator[tuple[str, dict]]:
    """("file:line", raw row) of a .csv, .tsv (unquoted, as STS-B, whose texts hold bare quotes) or .jsonl file;
    the header's and the keys' aliases applied. A CSV row's line is where it ends, as the csv module counts."""
    path = Path(path)
    if not path.is_file():
        raise InvalidInputError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in suffixes:
        named = [s for s in suffixes if s != ".ndjson"]  # an alias of .jsonl
        raise InvalidInputError(f"{path}: unknown format; use {', '.join(named[:-1])} or {named[-1]}")
    if suffix in (".csv", ".tsv"):
        with path.open(newline="", encoding="utf-8-sig") as f:
            tsv = suffix == ".tsv"
            reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if tsv else csv.DictReader(f)
            reader.fieldnames = [ALIASES.get(name, name) for name in reader.fieldnames or []]
            for row in reader:
                yield f"{path}:{reader.line_num}", row
    else:
        for where, record in json_objects(path):
            yield where, {ALIASES.get(k, k): v for k, v in record.items()}


def _header(path: Path, columns: tuple[str, ...]) -> None:
    """Refuse a CSV/TSV whose header lacks a needed column, before any row (an empty file included)."""
    if Path(path).suffix.lower() not in (".csv", ".tsv") or not Path(path).is_file():
        return
    with Path(path).open(newline="", encoding="utf-8-sig") as f:
        delimiter = "\t" if Path(path).suffix.lower() == ".tsv" else ","
        header = next(csv.reader(f, delimiter=delimiter, quoting=csv.QUOTE_NONE if delimiter == "\t" else 0), [])
    missing = [c for c in columns if c not in {ALIASES.get(h, h) for h in header}]
    if missing:
        raise InvalidInputError(f"{path}:1: header lacks column(s) {', '.join(missing)}; it needs {', '.join(columns)}")


def records(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[str, dict]]:
    """("file:line", {column: value}) per record of a .csv, .tsv or .jsonl file: every column present and not
    blank, texts as strings (a JSON number or list where a text belongs is refused), NUMBER_COLUMNS as finite
    floats (a JSON true is no score)."""
    _header(path, columns)
    for where, row in _rows(path, (".csv", ".tsv", ".jsonl", ".ndjson")):
        values = {c: row.get(c) for c in columns}
        missing = [c for c, v in values.items() if v is None or (isinstance(v, str) and not v.strip())]
        if missing:
            raise InvalidInputError(f"{where}: missing {', '.join(missing)}")
        for column, value in values.items():
            if column in NUMBER_COLUMNS:
                values[column] = number(value, f"{where}: {column}")
            elif not isinstance(value, str):
                raise InvalidInputError(f"{where}: {column} must be a string, got {value!r}")
        yield where, values


def number(value: object, what: str) -> float:
    """A finite float from a CSV cell or a JSON number; `what` names it in the error."""
    try:
        if isinstance(value, bool):
            raise ValueError
        result = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidInputError(f"{what} {value!r} is not a number") from None
    if not math.isfinite(result):
        raise InvalidInputError(f"{what} {value!r} is not a finite number")
    return result


def _item(record: dict, where: str) -> Item:
    missing = [c for c in REQUIRED if record.get(c) is None or not str(record[c]).strip()]
    if missing:
        raise InvalidInputError(f"{where}: missing {', '.join(missing)}")
    if isinstance(record["id"], bool) or not isinstance(record["id"], str | int):
        raise InvalidInputError(f"{where}: id must be a string or an integer, got {record['id']!r}")
    for column in ("title", "description"):
        if record.get(column) is not None and not isinstance(record[column], str):
            raise InvalidInputError(f"{where}: {column} must be a string, got {record[column]!r}")
    metadata = record.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise InvalidInputError(f"{where}: metadata must be an object")
    extra = {k: v for k, v in record.items() if k not in TEXT_COLUMNS and v not in (None, "")}
    return Item(
        id=str(record["id"]),
        title=str(record["title"]),
        description=str(record.get("description") or ""),
        metadata={**extra, **metadata},
    )


def catalog_records(path: Path) -> Iterator[tuple[str, Item]]:
    """("file:line", item) of a `.csv` (header row; extra columns become string metadata) or `.jsonl` catalog."""
    path = Path(path)
    _header(path, REQUIRED)
    for where, record in _rows(path, (".csv", ".jsonl", ".ndjson")):
        yield where, _item(record, where)


def read_catalog(path: Path) -> Iterator[Item]:
    """Items of a catalog file, streamed (a bulk load need not hold the file); duplicate ids are the caller's."""
    for _, item in catalog_records(path):
        yield item


def read_catalog_list(path: Path) -> list[Item]:
    """Every item of a catalog that must be whole: at least one item, each id once (a repeat names both lines)."""
    items: list[Item] = []
    first_line: dict[str, str] = {}
    for where, item in catalog_records(path):
        if item.id in first_line:
            raise InvalidInputError(
                f"{where}: id {item.id!r} appears more than once (first on line {first_line[item.id]}); "
                "ids must be unique"
            )
        first_line[item.id] = where.rsplit(":", 1)[1]
        items.append(item)
    if not items:
        raise InvalidInputError(f"{path}: has no items; a catalog needs a header and at least one item")
    return items


def read_pairs(path: Path) -> list[ScoredPair]:
    """Scored pairs (text_a, text_b, score on the file's own scale), at least one."""
    pairs = [ScoredPair(r["text_a"], r["text_b"], r["score"]) for _, r in records(path, PAIR_COLUMNS)]
    if not pairs:
        raise InvalidInputError(f"{path}: has no pairs")
    return pairs


def read_triplets(path: Path) -> list[Triplet]:
    """(anchor, positive, negative) texts, at least one triplet."""
    triplets = [Triplet(**r) for _, r in records(path, TRIPLET_COLUMNS)]
    if not triplets:
        raise InvalidInputError(f"{path}: has no triplets")
    return triplets
