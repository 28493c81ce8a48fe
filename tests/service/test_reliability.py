"""Reliability over real HTTP on a subprocess service (tiny bundle, embedded store): acknowledged writes survive
`kill -9`, and concurrent writers and readers never see a torn item."""

from __future__ import annotations

import itertools
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.service_process import ServiceProcess


def versioned(item_id: str, text_version: int, meta_version: int | None = None) -> dict:
    """An item whose every field names the text version, so a mix of two versions is visible in any field."""
    return {
        "id": item_id,
        "title": f"{item_id} title v{text_version}",
        "description": f"description of {item_id}, version {text_version}",
        "metadata": {"t": text_version, "m": text_version if meta_version is None else meta_version},
    }


def assert_whole(item: dict) -> int:
    """The item's text version, after checking that title, description and metadata agree on it."""
    version = item["metadata"]["t"]
    assert item["title"] == f"{item['id']} title v{version}", item
    if "description" in item:
        assert item["description"] == f"description of {item['id']}, version {version}", item
    return version


# --- durability


class Writer(threading.Thread):
    """Posts /index batches (new ids and updates of acknowledged ones) until the service dies; remembers what
    was acknowledged and the one batch in flight when it died."""

    def __init__(self, url: str, acked: dict[str, int], versions: itertools.count, rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.url, self.acked, self.versions, self.rng = url, acked, versions, rng
        self.in_flight: dict[str, int] = {}
        self.batches = 0

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            for _ in range(10_000):  # bounded; the kill ends it long before
                version = next(self.versions)
                ids = [f"d{version}-{n}" for n in range(4)] + self.rng.sample(
                    sorted(self.acked), min(4, len(self.acked))
                )
                self.in_flight = dict.fromkeys(ids, version)
                try:
                    response = client.post("/index", json={"items": [versioned(i, version) for i in ids]})
                except httpx.HTTPError:
                    return
                assert response.status_code == 200, response.text
                self.acked.update(self.in_flight)
                self.in_flight = {}
                self.batches += 1


def check_durable(url: str, acked: dict[str, int], in_flight: dict[str, int]) -> None:
    """Every acknowledged id holds its acknowledged content, or the newer content of the batch in flight at the
    kill (which may or may not have landed); adopts what landed as acknowledged."""
    with httpx.Client(base_url=url, timeout=30) as client:
        for item_id in sorted(set(acked) | set(in_flight)):
            response = client.get(f"/items/{item_id}")
            if response.status_code == 404:
                assert item_id not in acked, f"acknowledged item {item_id} lost"
                continue
            assert response.status_code == 200, response.text
            version = assert_whole(response.json())
            allowed = {acked.get(item_id), in_flight.get(item_id)} - {None}
            assert version in allowed, f"{item_id}: version {version}, acknowledged {acked.get(item_id)}"
            acked[item_id] = version
        count = client.get("/readyz").json()["items"]
    assert count == len(acked)


@pytest.mark.slow
def test_acknowledged_writes_survive_kill_9_at_random_moments(tiny_bundle, tmp_path):
    rng = random.Random(8)
    data_dir = tmp_path / "data"
    acked: dict[str, int] = {}
    versions = itertools.count(1)
    in_flight: dict[str, int] = {}
    kills = 0
    for _ in range(3):
        service = ServiceProcess(tiny_bundle, data_dir, {})
        service.start()
        check_durable(service.url, acked, in_flight)
        writer = Writer(service.url, acked, versions, rng)
        writer.start()
        time.sleep(rng.uniform(0.2, 1.2))
        service.stop(kill=True)
        writer.join(timeout=30)
        assert not writer.is_alive()
        assert writer.batches > 0, service.log()
        in_flight = writer.in_flight
        kills += 1
    service = ServiceProcess(tiny_bundle, data_dir, {})
    service.start()
    try:
        check_durable(service.url, acked, in_flight)
    finally:
        service.stop()
    assert kills == 3 and len(acked) > 20


# --- concurrency


@pytest.mark.slow
def test_concurrent_writers_and_readers_see_whole_items_and_consistent_counts(tiny_bundle, tmp_path):
    service = ServiceProcess(tiny_bundle, tmp_path / "data", {})
    service.start()
    ids = [f"c{n}" for n in range(30)]
    versions = itertools.count(1)
    problems: list[str] = []
    written: set[str] = set()

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        with service.client() as client:
            for _ in range(25):
                chosen = rng.sample(ids, 6)
                version = next(versions)
                if rng.random() < 0.3 and written:
                    # Metadata-only update of a stored item: same texts, new metadata, so its vectors are reused.
                    current = client.get(f"/items/{chosen[0]}")
                    if current.status_code == 200:
                        t = current.json()["metadata"]["t"]
                        items = [versioned(chosen[0], t, version)]
                    else:
                        items = [versioned(chosen[0], version)]
                else:
                    items = [versioned(i, version) for i in chosen]
                response = client.post("/index", json={"items": items})
                if response.status_code != 200:
                    problems.append(f"/index {response.status_code}: {response.text}")
                written.update(i["id"] for i in items)

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        with service.client() as client:
            for _ in range(60):
                target = rng.choice(ids)
                kind = rng.random()
                if kind < 0.4:
                    response = client.get(f"/items/{target}")
                    if response.status_code == 404:
                        continue
                    found = [response.json()]
                elif kind < 0.8:
                    response = client.post("/similar", json={"id": target, "k": 10})
                    if response.status_code == 404:
                        continue
                    found = response.json()["results"]
                else:
                    response = client.post("/similar", json={"text": f"{target} title v3", "k": 10})
                    found = response.json()["results"]
                if response.status_code != 200:
                    problems.append(f"read {response.status_code}: {response.text}")
                    continue
                for item in found:
                    try:
                        assert_whole(item)
                    except AssertionError as e:
                        problems.append(f"torn read: {e}")

    try:
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(writer, s) for s in range(4)] + [pool.submit(reader, 100 + s) for s in range(4)]
            for future in futures:
                future.result(timeout=120)
        assert not problems, problems[:5]
        with service.client() as client:
            assert client.get("/readyz").json()["items"] == len(written)
            for item_id in sorted(written):
                assert_whole(client.get(f"/items/{item_id}").json())
    finally:
        service.stop()
