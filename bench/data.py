"""The public datasets the benchmarks read, from one place: `MS_BENCH_DATA` (default ../shared/data/raw beside the
repository, see its README.md), never copied into the repository."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MS_BENCH_DATA", ROOT.parent / "shared/data/raw"))


@dataclass(frozen=True)
class Product:
    id: str
    title: str
    description: str


def _read_products(path: Path, encoding: str, title: str = "name") -> list[Product]:
    with path.open(newline="", encoding=encoding) as f:
        return [Product(row["id"], row[title].strip(), (row["description"] or "").strip()) for row in csv.DictReader(f)]


def abt_buy() -> tuple[list[Product], list[Product], dict[str, set[str]]]:
    """Abt products, Buy products, and each Abt id's gold Buy ids."""
    abt = _read_products(DATA / "abt_buy/Abt.csv", "latin-1")
    buy = _read_products(DATA / "abt_buy/Buy.csv", "utf-8")
    gold: dict[str, set[str]] = {}
    with (DATA / "abt_buy/abt_buy_perfectMapping.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            gold.setdefault(row["idAbt"], set()).add(row["idBuy"])
    return abt, buy, gold


def _left_right(folder: str) -> tuple[list[Product], list[Product], dict[str, set[str]]]:
    """A pair stored as left.csv, right.csv and mapping.csv (idLeft, idRight) under `folder`."""
    left = _read_products(DATA / folder / "left.csv", "utf-8", title="title")
    right = _read_products(DATA / folder / "right.csv", "utf-8", title="title")
    gold: dict[str, set[str]] = {}
    with (DATA / folder / "mapping.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            gold.setdefault(row["idLeft"], set()).add(row["idRight"])
    return left, right, gold


def walmart_amazon() -> tuple[list[Product], list[Product], dict[str, set[str]]]:
    """Walmart (left) products, Amazon (right) products, and each left id's gold right ids."""
    return _left_right("walmart_amazon")


def dblp_scholar() -> tuple[list[Product], list[Product], dict[str, set[str]]]:
    """DBLP (left) and Google Scholar (right) records, and each left id's gold right ids."""
    return _left_right("dblp_scholar")


CATALOG_PAIRS = {"Abt-Buy": abt_buy, "Walmart-Amazon": walmart_amazon}
SHARED_PAIRS = {**CATALOG_PAIRS, "DBLP-Scholar": dblp_scholar}
"""Every labelled catalog pair of the shared data: what a rule chosen on some of them is checked on."""


def wine_items(limit: int) -> list[dict]:
    """Up to `limit` wine reviews as /index items (real texts for text queries and indexing)."""
    items = []
    with (DATA / "wine_reviews_kaggle_130k_head/winemag-data-130k-v2.csv").open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row.get("title") and row.get("description"):
                items.append({"id": f"w{row['id']}", "title": row["title"], "description": row["description"]})
            if len(items) >= limit:
                break
    return items


def sts_test(folder: Path) -> Path:
    """STS-benchmark's test pairs as a `pairs` task file (text_a, text_b, score) in `folder`."""
    path = folder / "sts-test.csv"
    with (DATA / "stsbenchmark/sts-test.csv").open(encoding="utf-8") as f, path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["text_a", "text_b", "score"])
        for line in f:
            cells = line.rstrip("\n").split("\t")
            if len(cells) >= 7:
                writer.writerow([cells[5], cells[6], cells[4]])
    return path


def write_catalog_match(left: list[Product], right: list[Product], gold: dict[str, set[str]], folder: Path) -> Path:
    """A `catalog-match` folder (docs/evaluation.md): left.csv, right.csv, gold.csv."""
    folder.mkdir(parents=True, exist_ok=True)
    write_catalog(left, folder / "left.csv")
    write_catalog(right, folder / "right.csv")
    with (folder / "gold.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["left_id", "right_id"])
        writer.writerows((a, b) for a, matches in sorted(gold.items()) for b in sorted(matches))
    return folder


def write_catalog(products: list[Product], path: Path) -> Path:
    """Products as one unlabelled catalog CSV (what `metricsearch tune` and `train` read)."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "title", "description"])
        writer.writerows((p.id, p.title, p.description) for p in products)
    return path


def write_two_shops(left: list[Product], right: list[Product], path: Path) -> Path:
    """Both sides of a pair as one catalog CSV with a `source` column (left, right), no label: what `metricsearch
    train --pseudo-matches` pairs across."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "title", "description", "source"])
        for source, products in (("left", left), ("right", right)):
            writer.writerows((p.id, p.title, p.description, source) for p in products)
    return path
