"""End to end on the real packaged model: export, serve over HTTP, index 200 items, restart, and every item is
still there and answers /similar by id."""

from __future__ import annotations

import itertools
import random

import pytest

COLOURS = ["red", "blue", "black", "white", "green"]
PRODUCTS = [
    ("cotton t-shirt", "a soft {c} t-shirt made of organic cotton, crew neck, regular fit"),
    ("running shoes", "lightweight {c} running shoes with a cushioned sole for road running"),
    ("wireless headphones", "{c} over-ear bluetooth headphones with noise cancelling and 30 hour battery"),
    ("espresso machine", "a {c} espresso machine with a 15 bar pump and a milk frother"),
    ("laptop backpack", "water resistant {c} backpack with a padded 15 inch laptop compartment"),
    ("ceramic mug", "a {c} ceramic coffee mug, 350 ml, dishwasher safe"),
    ("yoga mat", "non-slip {c} yoga mat, 6 mm thick, with a carrying strap"),
    ("desk lamp", "a {c} led desk lamp with adjustable brightness and a usb charging port"),
]
BRANDS = ["acme", "northwind", "contoso", "globex", "initech"]


def catalog(n: int = 200) -> list[dict]:
    rng = random.Random(7)
    combos = itertools.cycle(itertools.product(PRODUCTS, COLOURS, BRANDS))
    items = []
    for i in range(n):
        (name, description), colour, brand = next(combos)
        items.append(
            {
                "id": f"sku-{i:04d}",
                "title": f"{brand.title()} {colour} {name} {i}",
                "description": description.format(c=colour) if i % 10 else "",
                "metadata": {"brand": brand, "price": round(rng.uniform(5, 300), 2)},
            }
        )
    return items


@pytest.mark.slow
def test_real_model_index_restart_and_similar(real_bundle, start_service, tmp_path):
    items = catalog()
    data_dir = tmp_path / "store"
    service = start_service(real_bundle, data_dir)
    with service.client() as client:
        for start in range(0, len(items), 50):
            response = client.post("/index", json={"items": items[start : start + 50]})
            assert response.status_code == 200, response.text
            assert response.json() == {"indexed": 50, "unchanged": 0}
    service.stop()

    restarted = start_service(real_bundle, data_dir)
    with restarted.client() as client:
        assert client.get("/readyz").json()["items"] == len(items)
        for item in items:
            assert client.get(f"/items/{item['id']}").json() == item
        assert client.post("/index", json={"items": items[:50]}).json() == {"indexed": 0, "unchanged": 50}

        body = client.post("/similar", json={"id": "sku-0000", "k": 10}).json()
        ids = [r["id"] for r in body["results"]]
        assert len(ids) == 10 and "sku-0000" not in ids
        assert body["model"] == "all-minilm-l6-v2"
        # the same product type in another colour or brand is closer than any other product type
        top = next(i for i in items if i["id"] == ids[0])
        assert "cotton t-shirt" in top["title"]

        by_text = client.post("/similar", json={"text": "headphones with noise cancelling", "k": 5}).json()
        assert all("headphones" in r["title"] for r in by_text["results"])
