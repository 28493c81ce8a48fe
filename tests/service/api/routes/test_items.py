"""Items over real HTTP (a subprocess service with the tiny bundle, embedded store): upsert with POST /index, read and
delete one with GET/DELETE /items/{id} (any id /index takes, slashes included), delete many with POST
/items/delete. The tests run in order on one catalog: each puts back or removes what it writes."""

from __future__ import annotations

from urllib.parse import quote

import pytest

KEY = "write-secret"
ITEMS = [
    {
        "id": f"i{n}",
        "title": f"{['red shirt', 'leather boots', 'wool hat'][n % 3]} {n}",
        "description": f"item number {n}",
        "metadata": {"brand": ["acme", "boota", "zeta"][n % 3], "n": n},
    }
    for n in range(15)
]


def test_reindexing_the_same_items_changes_nothing(client):
    assert client.post("/index", json={"items": ITEMS}).json() == {"indexed": 0, "unchanged": len(ITEMS)}


def test_get_update_and_delete_item(client):
    item = {"id": "tmp", "title": "temporary lamp", "description": "a desk lamp", "metadata": {"brand": "x"}}
    assert client.post("/index", json={"items": [item]}).json() == {"indexed": 1, "unchanged": 0}
    assert client.get("/items/tmp").json() == item
    changed = {**item, "metadata": {"brand": "y"}}
    assert client.post("/index", json={"items": [changed]}).json() == {"indexed": 1, "unchanged": 0}
    assert client.get("/items/tmp").json()["metadata"] == {"brand": "y"}
    assert client.delete("/items/tmp").status_code == 204
    assert client.get("/items/tmp").status_code == 404
    assert client.delete("/items/tmp").status_code == 404


def test_duplicate_ids_in_one_batch_last_wins(client):
    first = {"id": "dup", "title": "first version", "description": ""}
    last = {"id": "dup", "title": "last version", "description": ""}
    assert client.post("/index", json={"items": [first, last]}).json()["indexed"] == 1
    assert client.get("/items/dup").json()["title"] == "last version"
    client.delete("/items/dup")


SLASHED_IDS = ["shoes/red", "a/b/c/", "/leading", "per%2Fcent", "sp ace?#&"]


def test_ids_with_slashes_can_be_read_and_deleted(client):
    items = [{"id": i, "title": f"item {n}"} for n, i in enumerate(SLASHED_IDS)]
    assert client.post("/index", json={"items": items}).json()["indexed"] == len(items)
    for item_id in SLASHED_IDS:
        encoded = quote(item_id, safe="")
        assert client.get(f"/items/{encoded}").json()["id"] == item_id
        assert client.get(f"/items/{quote(item_id, safe='/')}").json()["id"] == item_id  # '/' left as it is
    assert client.delete(f"/items/{quote('shoes/red', safe='')}").status_code == 204
    assert client.get(f"/items/{quote('shoes/red', safe='')}").status_code == 404
    results = client.post("/similar", json={"id": "i0", "k": 100}).json()["results"]
    assert "shoes/red" not in {r["id"] for r in results}
    for item_id in SLASHED_IDS[1:]:
        assert client.delete(f"/items/{quote(item_id, safe='')}").status_code == 204


def test_delete_by_ids_counts_what_existed(client):
    response = client.post("/items/delete", json={"ids": ["i13", "i14", "never-there"]})
    assert response.status_code == 200, response.text
    assert response.json() == {"deleted": 2}
    assert client.get("/items/i13").status_code == 404
    ids = {r["id"] for r in client.post("/similar", json={"id": "i0", "k": 20}).json()["results"]}
    assert not ids & {"i13", "i14"}


def test_delete_by_filter_removes_every_match(client):
    zeta = {i["id"] for i in ITEMS if i["metadata"]["brand"] == "zeta"} - {"i14"}
    response = client.post("/items/delete", json={"filter": {"brand": "zeta", "n": {"lte": 100}}})
    assert response.json() == {"deleted": len(zeta)}
    assert client.post("/similar", json={"id": "i0", "filter": {"brand": "zeta"}}).json()["results"] == []
    assert client.post("/items/delete", json={"filter": {"brand": "zeta"}}).json() == {"deleted": 0}
    assert client.get("/readyz").json()["items"] == len(ITEMS) - 2 - len(zeta)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"ids": ["i0"], "filter": {"brand": "acme"}}, "exactly one of ids or filter"),
        ({}, "exactly one of ids or filter"),
        ({"ids": []}, "ids"),
        ({"filter": {}}, "filter"),
        ({"ids": ["x"] * 1001}, "ids"),
    ],
)
def test_bad_deletes_are_422_and_delete_nothing(client, body, message):
    before = client.get("/readyz").json()["items"]
    response = client.post("/items/delete", json=body)
    assert response.status_code == 422, response.text
    assert message in response.json()["detail"]
    assert client.get("/readyz").json()["items"] == before


def test_delete_needs_the_write_key(service):
    with service.client() as anonymous:
        assert anonymous.post("/items/delete", json={"ids": ["i0"]}).status_code == 401
        assert anonymous.post("/similar/batch", json={"queries": [{"id": "i0"}]}).status_code == 200
