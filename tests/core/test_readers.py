"""Catalog files: CSV and JSONL read into items; a bad line is named by file and line."""

from __future__ import annotations

import pytest

from metricsearch.core.errors import InvalidInputError
from metricsearch.core.readers import read_catalog


def test_csv_extra_columns_become_metadata(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text('id,title,description,brand\n1,Red shirt,"soft, red",acme\n2,Hat,,\n')
    items = list(read_catalog(path))
    assert [(i.id, i.title, i.description, i.metadata) for i in items] == [
        ("1", "Red shirt", "soft, red", {"brand": "acme"}),
        ("2", "Hat", "", {}),
    ]


def test_jsonl_with_metadata(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(
        '{"id": 7, "title": "Lamp", "metadata": {"price": 3.5}}\n\n{"id": "8", "title": "Desk", "color": "oak"}\n'
    )
    items = list(read_catalog(path))
    assert items[0].id == "7" and items[0].metadata == {"price": 3.5}
    assert items[1].metadata == {"color": "oak"}


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("a.csv", "id,name\n1,x\n", r"a\.csv:1: header lacks column\(s\) title"),
        ("b.csv", "id,title\n1,ok\n2,\n", r"b\.csv:3: missing title"),
        ("c.jsonl", '{"id": 1, "title": "x"}\n{oops\n', r"c\.jsonl:2: not valid JSON"),
        ("d.jsonl", '["a"]\n', r"d\.jsonl:1: each line must be a JSON object"),
        ("e.txt", "x", "use .csv or .jsonl"),
    ],
)
def test_malformed_catalogs_name_file_and_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(InvalidInputError, match=message):
        list(read_catalog(path))
