"""Reliability over real HTTP on a subprocess service (tiny bundle, embedded store): acknowledged writes survive
`kill -9`, and concurrent writers and readers never see a torn item."""

from __future__ import annotations

import itertools
import random
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest

from metricsearch.core import scoring
from metricsearch.core.bundle import load_bundle
from metricsearch.encoder import Encoder
from metricsearch.service.engine import ANN_VECTOR, vector_schema
from metricsearch.service.process import ServiceProcess
from metricsearch.service.store import EdgeStore
from metricsearch.service.store.base import StoredItem
from tests.tiny_model import CORPUS

WORDS = sorted({word for line in CORPUS for word in re.findall(r"[a-z]{3,}", line.lower())})
"""Words the tiny bundle's tokenizer knows: one per version makes versions encode apart (it reads `v37` as
[UNK], like `v38`)."""


def texts(item_id: str, version: int) -> tuple[str, str]:
    word = WORDS[version % len(WORDS)]
    return f"{item_id} title v{version} {word}", f"description of {item_id}, version {version}, {word}"


def versioned(item_id: str, text_version: int, meta_version: int | None = None) -> dict:
    """An item whose every field names the text version, so a mix of two versions is visible in any field."""
    title, description = texts(item_id, text_version)
    return {
        "id": item_id,
        "title": title,
        "description": description,
        "metadata": {"t": text_version, "m": text_version if meta_version is None else meta_version},
    }


def assert_whole(item: dict) -> int:
    """The item's text version, after checking that title, description and metadata agree on it."""
    version = item["metadata"]["t"]
    title, description = texts(item["id"], version)
    assert item["title"] == title, item
    if "description" in item:
        assert item["description"] == description, item
    return version


# --- durability


class Writer(threading.Thread):
    """Posts /index batches (new ids and updates of acknowledged ones) until the service dies; remembers what
    was acknowledged, the one batch in flight when it died, and any answer other than 200 (an assert here would
    only warn: pytest does not see a thread's exception)."""

    def __init__(self, url: str, acked: dict[str, int], versions: itertools.count, rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.url, self.acked, self.versions, self.rng = url, acked, versions, rng
        self.in_flight: dict[str, int] = {}
        self.batches = 0
        self.refused: list[str] = []

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
                if response.status_code != 200:
                    self.refused.append(f"{response.status_code}: {response.text}")
                    return
                self.acked.update(self.in_flight)
                self.in_flight = {}
                self.batches += 1


def check_durable(url: str, acked: dict[str, int], in_flight: dict[str, int], preloaded: int = 0) -> None:
    """Every acknowledged id holds its acknowledged content, or the newer content of the batch in flight at the
    kill (which may or may not have landed); adopts what landed as acknowledged. `preloaded` items were there
    before the first start."""
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
    assert count == len(acked) + preloaded


def kill_repeatedly(
    bundle: Path,
    data_dir: Path,
    env: dict[str, str],
    rounds: int,
    kill: Callable[[int, ServiceProcess], str],
    preloaded: int = 0,
) -> list[str]:
    """`rounds` times: start the service, check every acknowledged write, write until `kill(round, service)`
    returns, kill -9; then restart and check once more. Returns what each `kill` returned."""
    rng = random.Random(8)
    acked: dict[str, int] = {}
    versions = itertools.count(1)
    in_flight: dict[str, int] = {}
    returned = []
    for round_ in range(rounds):
        service = ServiceProcess(bundle, data_dir, env)
        service.start()
        check_durable(service.url, acked, in_flight, preloaded)
        writer = Writer(service.url, acked, versions, rng)
        writer.start()
        returned.append(kill(round_, service))
        service.stop(kill=True)
        writer.join(timeout=30)
        assert not writer.is_alive()
        assert not writer.refused, (writer.refused, service.log())
        assert writer.batches > 0, service.log()
        in_flight = writer.in_flight
    service = ServiceProcess(bundle, data_dir, env)
    service.start()
    try:
        check_durable(service.url, acked, in_flight, preloaded)
    finally:
        service.stop()
    assert len(acked) > 20
    return returned


@pytest.mark.slow
def test_acknowledged_writes_survive_kill_9_at_random_moments(tiny_bundle, tmp_path):
    rng = random.Random(9)

    def at_random(round_: int, service: ServiceProcess) -> str:
        time.sleep(rng.uniform(0.2, 1.2))
        return "writing"

    kill_repeatedly(tiny_bundle, tmp_path / "data", {}, 3, at_random)


def preload(bundle_dir: Path, store_dir: Path, n: int, indexing_threshold_kb: int | None = None) -> None:
    """`n` items with random vectors written straight into an embedded store (no encoder: fast)."""
    bundle = load_bundle(bundle_dir)
    schema = vector_schema(bundle)
    rng = np.random.default_rng(0)
    store = EdgeStore(store_dir, schema, optimize_after_writes=0, indexing_threshold_kb=indexing_threshold_kb)
    try:
        for start in range(0, n, 2000):
            vectors = rng.normal(size=(min(2000, n - start), schema.sizes[ANN_VECTOR])).astype(np.float32)
            store.upsert(
                [
                    StoredItem(f"pre{start + row}", "t", "", {}, "-", {ANN_VECTOR: vector})
                    for row, vector in enumerate(vectors)
                ]
            )
    finally:
        store.close()


@pytest.mark.slow
def test_acknowledged_writes_survive_kill_9_during_hnsw_builds(tiny_bundle, tmp_path):
    """Kills land while a background HNSW build copies and optimises the shard (in a child process), and, in the
    last round, just after the child finished: while the service loads the copy, replays and swaps it in."""
    store_dir = tmp_path / "data" / "items"
    # Enough unindexed points for the engine to index (above MS_INDEXING_THRESHOLD_KB of the ANN vector, lowered
    # from its 10 MB to build in a fifth of the time), so that a few writes (MS_OPTIMIZE_AFTER_WRITES) start a build.
    threshold_kb = 2_000
    preloaded = threshold_kb * 1024 // (4 * vector_schema(load_bundle(tiny_bundle)).sizes[ANN_VECTOR]) + 1000
    preload(tiny_bundle, store_dir, preloaded, threshold_kb)
    rng = random.Random(10)
    rounds = 4

    def during_build(round_: int, service: ServiceProcess) -> str:
        """Wait for a build's shard copy, then kill at a random moment; says where the build was."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(list(store_dir.glob("shard-*"))) < 2:
            time.sleep(0.01)
        if round_ < rounds - 1:
            time.sleep(rng.uniform(0.0, 2.0))
            return "building" if len(list(store_dir.glob("shard-*"))) > 1 else "not started"
        optimiser: list[psutil.Process] = []
        while time.monotonic() < deadline and not optimiser:  # started once the copy is made
            optimiser = psutil.Process(service.process.pid).children()
            time.sleep(0.01)
        if not optimiser:
            return "no build child"
        _, still_running = psutil.wait_procs(optimiser, timeout=240)
        if still_running:
            return "build child still running"
        time.sleep(rng.uniform(0.0, 0.3))  # swap: load ~0.1 s, replay ~0.5 s, close ~0.2 s (measured)
        # The build child is done: the kill lands while the service swaps the copy in, or just after it did.
        return "swapped" if len(list(store_dir.glob("shard-*"))) == 1 else "swapping"

    phases = kill_repeatedly(
        tiny_bundle,
        tmp_path / "data",
        {"MS_OPTIMIZE_AFTER_WRITES": "40", "MS_INDEXING_THRESHOLD_KB": str(threshold_kb)},
        rounds,
        during_build,
        preloaded,
    )
    assert phases[:-1].count("building") >= 2, phases
    assert phases[-1] in ("swapping", "swapped"), phases


# --- concurrency


class ExpectedScores:
    """The score each (query, item version) must get, computed in-process with the bundle's encoder and the
    service's scoring functions, for every version a test can write: a result's score must be the one of the
    version it shows."""

    def __init__(self, bundle_dir: Path, items: list[dict], text_queries: list[str]) -> None:
        bundle = load_bundle(bundle_dir)
        self.encoder = Encoder(bundle, intra_op_threads=1)
        self.weights = [f.weight for f in bundle.manifest.fields if f.weight > 0]
        assert [f.name for f in bundle.manifest.fields if f.weight > 0] == ["title", "description"]
        texts = [text for item in items for text in (item["title"], item["description"])]
        encoded = self.encoder.encode(texts).reshape(len(items), 2, -1)
        self.fields = {(item["id"], assert_whole(item)): vectors for item, vectors in zip(items, encoded, strict=True)}
        self.queries = dict(zip(text_queries, self.encoder.encode(text_queries), strict=True))

    def check(self, query: str | tuple[str, int], results: list[dict]) -> None:
        """`query` is a free text, or the (id, version) of the stored item queried by id."""
        query_fields = np.stack([self.queries[query]] * 2) if isinstance(query, str) else self.fields[query]
        both = np.ones(2, dtype=bool)
        for result in results:
            candidate = self.fields[(result["id"], assert_whole(result))][None]
            distances = scoring.per_field_distances(query_fields, both, candidate, both[None])
            expected = scoring.per_field_score(distances, self.weights)[0]
            assert abs(result["score"] - expected) < SCORE_TOLERANCE, (query, result, expected)
        scores = [r["score"] for r in results]
        assert scores == sorted(scores, reverse=True), (query, scores)


SCORE_TOLERANCE = 1e-4
"""Well above float error (encoder batches, float32 storage; no query equals an item text, where arccos is steep)
and below the score change between two versions of an item (for over 99% of the version pairs written here)."""


@pytest.mark.slow
def test_concurrent_writers_and_readers_see_whole_items_and_consistent_counts(tiny_bundle, tmp_path):
    ids = [f"c{n}" for n in range(30)]
    writers, writes_each = 4, 25
    # Never rewritten, so their by-id queries are known. Each has a word of its own: two texts that encode alike
    # (the tiny tokenizer reads the ids, and most version numbers, as [UNK]) score 0, where arccos is too steep.
    anchor_versions = range(writers * writes_each + 1, writers * writes_each + 4)
    assert anchor_versions[-1] < len(WORDS)
    anchors = [versioned(f"anchor{v}", v) for v in anchor_versions]
    text_queries = [f"title v3 of {i}" for i in ids]
    every_version = [versioned(i, v) for i in ids for v in range(1, writers * writes_each + 1)]
    expected = ExpectedScores(tiny_bundle, every_version + anchors, text_queries)
    service = ServiceProcess(tiny_bundle, tmp_path / "data", {})
    service.start()
    versions = itertools.count(1)
    problems: list[str] = []
    written: set[str] = set()
    checked = itertools.count()

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        with service.client() as client:
            for _ in range(writes_each):
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
                query: str | tuple[str, int] | None = None
                if kind < 0.3:
                    response = client.get(f"/items/{target}")
                    if response.status_code == 404:
                        continue
                    found = [response.json()]
                elif kind < 0.5:
                    response = client.post("/similar", json={"id": target, "k": 10})
                    if response.status_code == 404:
                        continue
                    found = response.json()["results"]
                elif kind < 0.75:
                    anchor = rng.choice(anchors)
                    response = client.post("/similar", json={"id": anchor["id"], "k": 10})
                    found, query = response.json()["results"], (anchor["id"], anchor["metadata"]["t"])
                else:
                    query = rng.choice(text_queries)
                    response = client.post("/similar", json={"text": query, "k": 10})
                    found = response.json()["results"]
                if response.status_code != 200:
                    problems.append(f"read {response.status_code}: {response.text}")
                    continue
                try:
                    for item in found:
                        assert_whole(item)
                    if query is not None:
                        expected.check(query, found)
                        next(checked)
                except AssertionError as e:
                    problems.append(f"torn read: {e}")

    try:
        with service.client() as client:
            assert client.post("/index", json={"items": anchors}).status_code == 200
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(writer, s) for s in range(writers)]
            futures += [pool.submit(reader, 100 + s) for s in range(4)]
            for future in futures:
                future.result(timeout=120)
        assert not problems, (len(problems), problems[:3])
        assert next(checked) > 50  # the score checks ran
        with service.client() as client:
            assert client.get("/readyz").json()["items"] == len(written) + len(anchors)
            for item_id in sorted(written):
                assert_whole(client.get(f"/items/{item_id}").json())
            for anchor in anchors:  # the check itself, on a quiet store: every score as computed here
                results = client.post("/similar", json={"id": anchor["id"]}).json()["results"]
                expected.check((anchor["id"], anchor["metadata"]["t"]), results)
    finally:
        service.stop()
