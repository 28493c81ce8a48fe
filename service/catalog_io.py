"""Reading catalog files (CSV or JSONL of id, title, description, metadata) for bulk loads and evaluation.
Every problem names the file and line."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

from service.catalog import Item
from service.errors import InvalidInputError

REQUIRED = ("id", "title")
TEXT_COLUMNS = ("id", "title", "description", "metadata")


def _item(record: dict, where: str) -> Item:
    missing = [c for c in REQUIRED if not str(record.get(c) or "").strip()]
    if missing:
        raise InvalidInputError(f"{where}: missing {', '.join(missing)}")
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


def read_catalog(path: Path) -> Iterator[Item]:
    """Items of a `.csv` (header row; extra columns become string metadata) or `.jsonl` file."""
    path = Path(path)
    if not path.is_file():
        raise InvalidInputError(f"{path}: no such file")
    if path.suffix.lower() == ".csv":
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
            if missing:
                raise InvalidInputError(f"{path}:1: header lacks column(s) {', '.join(missing)}")
            for row in reader:
                yield _item(row, f"{path}:{reader.line_num}")
    elif path.suffix.lower() in (".jsonl", ".ndjson"):
        for where, record in json_objects(path):
            yield _item(record, where)
    else:
        raise InvalidInputError(f"{path}: unknown catalog format; use .csv or .jsonl")
