"""The generic product listings an int8 export calibrates on without a catalog: 400 of them, title and description,
the same on every machine and run (a fixed seed of their own), and a catalog the export's reader takes."""

from __future__ import annotations

import json

import numpy as np

from metricsearch.core.readers import read_catalog_list
from metricsearch.export import calibration


def test_the_listings_are_the_same_bytes_every_time_whatever_the_global_seed(tmp_path):
    np.random.seed(1)
    first = calibration.write(tmp_path / "a.jsonl").read_bytes()
    np.random.seed(2)
    np.random.default_rng(3).random(10)
    assert calibration.write(tmp_path / "b.jsonl").read_bytes() == first


def test_400_listings_of_an_id_a_title_and_a_description_read_as_a_catalog(tmp_path):
    path = calibration.write(tmp_path / "listings.jsonl")
    assert path == tmp_path / "listings.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == calibration.ITEMS == 400
    assert [r["id"] for r in rows] == [f"cal{n}" for n in range(400)]
    assert all(set(r) == {"id", "title", "description"} for r in rows)
    items = read_catalog_list(path)  # what the export reads it with: unique ids, a title each
    assert [i.id for i in items] == [r["id"] for r in rows]
    assert all(i.title.strip() for i in items)


def test_the_listings_look_like_product_listings_with_no_template_left(tmp_path):
    rows = [json.loads(line) for line in calibration.write(tmp_path / "l.jsonl").read_text().splitlines()]
    for row in rows:
        assert any(brand in row["title"] for brand in calibration.BRANDS), row
        assert any(kind in row["title"] for kind in calibration.KINDS), row
        assert "{" not in row["title"] + row["description"], row  # every {n} and {model} filled in
    described = [r["description"] for r in rows if r["description"]]
    assert 300 < len(described) < 400  # about one in ten has no description, as in real catalogs
    assert len({r["title"] for r in rows}) > 390 and len(set(described)) == len(described)
    assert all(d.startswith("The ") and " offers " in d for d in described)
