"""The costliest requests the service accepts: each /similar option at its documented limit (docs/api.md, "Limits"),
alone and all together, and a /similar/batch of 100 of the worst, timed through HTTP on 100k stored items next to a
plain by-id query in the same run. An SRE reads what one request within the limits can cost; a figure far above the
plain query's is a request a client (reads are open by default) can repeat to take the service's cores.

    .venv/bin/python -m bench.costly_requests [--items 100000] [--repeats 7]

Items are service_bench's synthetic ones (metadata {"bucket": i % 10}), written straight into the embedded store and
HNSW-indexed; the store is kept under var/ and reused (bench.profile_hot_path shares it). Writes the "Costly
requests" section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import orjson
from tqdm import tqdm

from bench.report import machine, write_section
from bench.service_bench import ROOT, Client, reused_synthetic_store
from metricsearch.core.schemas import MAX_BATCH_QUERIES, MAX_FILTER_KEYS, MAX_IN_VALUES, MAX_RECOMMEND_IDS
from metricsearch.service import ServiceProcess, Settings

SECTION = "Costly requests"
LONG_TEXT = Settings.model_fields["max_description_chars"].default


def unique_words(rng: random.Random, chars: int) -> str:
    """A text of `chars` characters, every word new to the catalog: the most terms a query of that length holds."""
    words, size = [], 0
    while size < chars:
        word = f"w{rng.randrange(16**8):x}{rng.randrange(10**6)}"
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:chars]


def kinds(n_items: int, rng: random.Random) -> dict[str, dict]:
    """Name: a /similar body, each with fresh random ids."""

    def ids(count: int) -> list[str]:
        return [f"s{rng.randrange(n_items)}" for _ in range(count)]

    one = ids(1)[0]
    per_key = MAX_IN_VALUES // MAX_FILTER_KEYS  # the `in` values are capped over the whole filter
    made_up = {f"k{j}": {"in": list(range(j * per_key, (j + 1) * per_key))} for j in range(MAX_FILTER_KEYS)}
    recommend = {"positive_ids": ids(MAX_RECOMMEND_IDS), "negative_ids": ids(MAX_RECOMMEND_IDS)}
    return {
        "by id, k 10 (the plain query)": {"id": one, "k": 10},
        "k 100, offset 100": {"id": one, "k": 100, "offset": 100},
        "filter: one key, 1,000 numbers": {"id": one, "k": 100, "filter": {"bucket": {"in": list(range(1000))}}},
        f"filter: 64 made-up keys x {per_key} numbers": {"id": one, "k": 100, "filter": made_up},
        "filter: a string of a number key": {"id": one, "k": 100, "filter": {"bucket": "x"}},
        "exclude_ids: 1,000": {"id": one, "k": 100, "exclude_ids": ids(1000)},
        "32 positive + 32 negative ids": {**recommend, "k": 100},
        "group_by a key of 10 values, k 100": {"id": one, "k": 100, "group_by": "bucket"},
        "diversity 1, k 100": {"id": one, "k": 100, "diversity": 1.0},
        "boost: 8": {"id": one, "k": 100, "boost": [{"field": "bucket", "weight": 0.1}] * 8},
        "text: 20,000 characters, every word new": {"text": unique_words(rng, LONG_TEXT), "k": 100},
        "all of them at once (no text)": {
            **recommend,
            "k": 100,
            "offset": 100,
            "diversity": 1.0,
            "group_by": "bucket",
            "exclude_ids": ids(900),
            "filter": {"bucket": {"in": list(range(1000))}},
            "boost": [{"field": "bucket", "weight": 0.1}] * 8,
        },
    }


def timed(client: Client, path: str, body: dict) -> tuple[float, dict]:
    started = time.perf_counter()
    answer = client.post(path, body)
    return (time.perf_counter() - started) * 1000, answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles/all-minilm-l6-v2")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7, help="requests of each kind (fresh random ids each)")
    parser.add_argument("--store-dir", type=Path, default=None, help="default: var/profile-<items>")
    parser.add_argument("--print-only", action="store_true", help="print the table, leave BENCHMARKS.md as it is")
    args = parser.parse_args()
    started = time.time()
    store_dir = args.store_dir or ROOT / f"var/profile-{args.items}"
    reused_synthetic_store(args.bundle, args.items, store_dir)
    rng = random.Random(7)
    service = ServiceProcess(args.bundle, store_dir, {"MS_OPTIMIZE_AFTER_WRITES": "0", "MS_ANSWER_CACHE_SIZE": "0"})
    service.start(timeout_s=600)
    client = Client(service.port)
    try:
        for _ in range(30):  # page the index in
            client.post("/similar", {"id": f"s{rng.randrange(args.items)}", "k": 10})
        names = list(kinds(args.items, rng))
        latencies: dict[str, list[float]] = {name: [] for name in names}
        sizes = {}
        for _ in tqdm(range(args.repeats), desc="rounds"):
            for name, body in kinds(args.items, rng).items():  # interleaved: the machine's drift falls on all alike
                latencies[name].append(timed(client, "/similar", body)[0])
                sizes[name] = len(orjson.dumps(body))
        worst = kinds(args.items, rng)["all of them at once (no text)"]
        batch = {"queries": [worst] * MAX_BATCH_QUERIES}
        batch_ms, answer = timed(client, "/similar/batch", batch)
        late = sum("error" in a and a["error"]["code"] == "timed_out" for a in answer["answers"])
    finally:
        client.close()
        service.stop()

    plain = statistics.median(latencies[names[0]])
    rows = [
        f"| {name} | {sizes[name]:,} | {statistics.median(lat):,.1f} | {max(lat):,.1f} | "
        f"{statistics.median(lat) / plain:,.1f}x |"
        for name, lat in latencies.items()
    ]
    timeout_s = Settings.model_fields["request_timeout_s"].default
    body = f"""Command: `.venv/bin/python -m bench.costly_requests --items {args.items} --repeats {args.repeats}`
({(time.time() - started) / 60:.0f} min on {machine()}, CPU only, shared). Bundle `{args.bundle.name}`; {args.items:,}
synthetic items (metadata `bucket`: 10 values), embedded store, HNSW; answer cache off; one request at a time, the
kinds interleaved. Each body holds one option at its documented limit (docs/api.md, "Limits"); the made-up keys are
held by no item. `bucket` has a payload index (learned from its first filter): a filter on held keys without one
costs the engine a check of every point, up to seconds at 100k items (docs/operations.md, "Indexed filters").

| request | body bytes | p50 ms | max ms | p50 / plain |
|---|---:|---:|---:|---:|
{chr(10).join(rows)}

A `/similar/batch` of {MAX_BATCH_QUERIES} of "all of them at once": {batch_ms / 1000:,.1f} s, {MAX_BATCH_QUERIES - late}
answered and {late} refused with `timed_out` (a batch answers until `MS_REQUEST_TIMEOUT_S`, {timeout_s:g} s, after it
arrived)."""
    print(body)
    if not args.print_only:
        write_section(ROOT / "BENCHMARKS.md", SECTION, body)


if __name__ == "__main__":
    main()
