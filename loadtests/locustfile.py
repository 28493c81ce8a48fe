"""Storefront load on a running metricsearch service: 90% `/similar` by id, 8% by free text, 2% `/index` of small
batches, with ids drawn from items indexed once before the users start.

Run it as its own process (importing Locust beside the service stack crashes: gevent patches ssl too late), e.g.
`make loadtest URL=http://127.0.0.1:8000 USERS=16 DURATION=60s`. It reads only the standard library and Locust, so
it never imports the service. Environment (not service settings, hence no MS_ prefix):

- LOADTEST_API_KEY: bearer key sent on /index (optional).
- LOADTEST_SEED_ITEMS: items indexed at start and drawn from (default 500); with a catalog, its first N rows
  (0 = every row).
- LOADTEST_CATALOG: a .csv (id,title,description,...) or .jsonl catalog to seed from instead of synthetic items.
- LOADTEST_NEW_ID_POOL: how many distinct ids the "new item" upserts draw from (default 0 = a fresh id each time,
  so the catalog keeps growing; a soak sets a pool so that, once it is filled, memory growth means a leak).
"""

from __future__ import annotations

import csv
import itertools
import json
import logging
import os
import random
import sys
import uuid
from pathlib import Path

import requests
from locust import FastHttpUser, constant, events, task
from locust.runners import WorkerRunner

log = logging.getLogger("loadtest")

SEED_BATCH = 250
NEW_ID_POOL = int(os.environ.get("LOADTEST_NEW_ID_POOL", "0"))
ADJECTIVES = ["red", "blue", "black", "white", "wireless", "compact", "portable", "stainless", "digital", "cotton"]
NOUNS = ["shirt", "headphones", "speaker", "kettle", "camera", "laptop", "backpack", "watch", "lamp", "keyboard"]
BRANDS = ["acme", "globex", "initech", "umbrella", "stark", "wayne"]


def _synthetic(n: int) -> list[dict]:
    rng = random.Random(42)  # the same ids in every process of a distributed run
    items = []
    for i in range(n):
        adjective, noun, brand = rng.choice(ADJECTIVES), rng.choice(NOUNS), rng.choice(BRANDS)
        items.append(
            {
                "id": f"lt-{i}",
                "title": f"{brand} {adjective} {noun} {rng.randint(100, 999)}",
                "description": f"A {adjective} {noun} by {brand}, model {i}. " + " ".join(rng.sample(NOUNS, 3)),
                "metadata": {"brand": brand, "price": round(rng.uniform(5, 500), 2)},
            }
        )
    return items


def _catalog(path: Path, n: int) -> list[dict]:
    """Rows as /index items: id, title, description; other CSV columns become string metadata."""
    with path.open(newline="", encoding="utf-8") as f:
        if path.suffix == ".jsonl":
            rows = (json.loads(line) for line in f if line.strip())
            items = [
                {
                    "id": str(r["id"]),
                    "title": str(r["title"]),
                    "description": str(r.get("description") or ""),
                    "metadata": r.get("metadata") or {},
                }
                for r in itertools.islice(rows, n or None)
            ]
        else:
            rows = csv.DictReader(f)
            items = [
                {
                    "id": r.pop("id"),
                    "title": r.pop("title"),
                    "description": r.pop("description", "") or "",
                    "metadata": {k: v for k, v in r.items() if k and v},
                }
                for r in itertools.islice(rows, n or None)
            ]
    return [i for i in items if i["title"].strip()]


def _headers() -> dict[str, str]:
    key = os.environ.get("LOADTEST_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


ITEMS: list[dict] = []
IDS: list[str] = []
TEXTS: list[str] = []


@events.init.add_listener
def seed(environment, **_kwargs) -> None:
    """Index the seed items once, before any user starts (so seeding does not eat into the run time)."""
    n = int(os.environ.get("LOADTEST_SEED_ITEMS", "500"))
    catalog = os.environ.get("LOADTEST_CATALOG")
    ITEMS[:] = _catalog(Path(catalog), n) if catalog else _synthetic(n)
    if not ITEMS:
        sys.exit("loadtest: no items to seed (LOADTEST_SEED_ITEMS=0 without a catalog, or an empty catalog)")
    IDS[:] = [i["id"] for i in ITEMS]
    TEXTS[:] = [i["title"] for i in ITEMS]
    if isinstance(environment.runner, WorkerRunner) or not environment.host:
        return
    indexed = unchanged = 0
    with requests.Session() as session:
        for start in range(0, len(ITEMS), SEED_BATCH):
            response = session.post(
                f"{environment.host.rstrip('/')}/index",
                json={"items": ITEMS[start : start + SEED_BATCH]},
                headers=_headers(),
                timeout=300,
            )
            if response.status_code != 200:
                sys.exit(f"loadtest: seeding {environment.host}/index answered {response.status_code}: {response.text}")
            indexed += response.json()["indexed"]
            unchanged += response.json()["unchanged"]
    log.info("seeded %d items (%d written, %d unchanged)", len(ITEMS), indexed, unchanged)


class Shopper(FastHttpUser):
    """A closed-loop client with no think time: USERS is the number of requests in flight."""

    wait_time = constant(0)

    def _post(self, name: str, path: str, body: dict, headers: dict[str, str] | None = None) -> None:
        with self.client.post(path, json=body, headers=headers, name=name, catch_response=True) as response:
            if response.status_code != 200:
                response.failure(f"{response.status_code}: {(response.text or '')[:200]}")

    @task(90)
    def similar_by_id(self) -> None:
        self._post("/similar by id", "/similar", {"id": random.choice(IDS), "k": 10})

    @task(8)
    def similar_by_text(self) -> None:
        self._post("/similar by text", "/similar", {"text": random.choice(TEXTS), "k": 10})

    @task(2)
    def index_batch(self) -> None:
        """Small upserts: half re-index a seeded item with new metadata, half add a new item."""
        items = []
        for _ in range(random.randint(1, 5)):
            if random.random() < 0.5:
                base = random.choice(ITEMS)
                items.append({**base, "metadata": {**base["metadata"], "stock": str(random.randint(0, 99))}})
            else:
                new_id = random.randrange(NEW_ID_POOL) if NEW_ID_POOL else uuid.uuid4().hex[:12]
                items.append({"id": f"lt-new-{new_id}", "title": random.choice(TEXTS)})
        self._post("/index", "/index", {"items": items}, _headers())
