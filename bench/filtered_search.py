"""Filtered searches on the embedded store, their time and how many of their exact nearest they find, four ways in
one run: without a payload index, as the engine answered them (it reads each point's payload as it meets it) and as
the census answers them now (store/census.py: the items kept found from in-RAM columns, then searched exactly,
store/exact.py); with an index on every key, by the engine's HNSW walk as before, and as now (a filter keeping at
most EdgeStore.exhaustive_max points compares each of them, one keeping more walks with a beam widened by the
share it keeps). A storefront filters on many attributes: more than
MS_AUTO_INDEX_MAX of them, or a key's first filters before its index is learned, run without an index.

    .venv/bin/python -m bench.filtered_search [--items 100000] [--repeats 5]

Items are service_bench's synthetic ones (with their lexical vectors) carrying 40 numeric keys k0..k39 (k_j = i * (j
+ 7) mod 100, each value held by 1% of the items) and a string key brand (200 values); the store is kept under var/
and reused. Each search is a by-id one: an item's vector and lexical query, limit 100, the item excluded. Writes the
"Filtered search" section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench.report import machine, write_section
from bench.service_bench import ROOT, reused_synthetic_store, synthetic_texts
from metricsearch.core.bundle import load_bundle
from metricsearch.core.lexical import WHOLE_TEXT, lexical_fields
from metricsearch.core.schemas import SimilarRequest, conditions_of
from metricsearch.service import ANN_VECTOR, EdgeStore, Settings, vector_schema

SECTION = "Filtered search"
KEYS = 40
FILTERS = {
    "one key, 1% of the items": {"k0": 3},
    "one key, `in` 3 numbers (3%)": {"k0": {"in": [0, 1, 2]}},
    "one key, a range keeping 10%": {"k0": {"lte": 9}},
    "one key, a range keeping 20%": {"k0": {"lte": 19}},
    "one key, a range keeping 50%": {"k0": {"lte": 49}},
    "one key, a range keeping 99%": {"k0": {"lte": 98}},
    "brand `in` 20 of 200 strings (10%)": {"brand": {"in": [f"b{i}" for i in range(20)]}},
    "40 keys x 25 numbers": {f"k{j}": {"in": list(range(25))} for j in range(KEYS)},
    "40 keys x 25 numbers, every 4th": {f"k{j}": {"in": list(range(0, 100, 4))} for j in range(KEYS)},
    "40 keys, ranges keeping 99% each": {f"k{j}": {"lte": 98} for j in range(KEYS)},
}
COLLECTION = Settings.model_fields["collection"].default
INDEXES = {**{f"k{j}": "float" for j in range(KEYS)}, "brand": "keyword"}


def metadata(i: int) -> dict:
    return {**{f"k{j}": (i * (j + 7)) % 100 for j in range(KEYS)}, "brand": f"b{i % 200}"}


def matching_ids(n: int, body: dict) -> np.ndarray:
    """The items a filter of FILTERS keeps, from `metadata`'s formulas (not from the store): the reference."""
    i = np.arange(n)
    kept = np.ones(n, dtype=bool)
    for key, wanted in body.items():
        values = i % 200 if key == "brand" else (i * (int(key[1:]) + 7)) % 100
        if key == "brand":
            wanted = {"in": [int(b[1:]) for b in wanted["in"]]}
        if isinstance(wanted, int):
            kept &= values == wanted
        elif "in" in wanted:
            kept &= np.isin(values, wanted["in"])
        else:
            kept &= values <= wanted["lte"]
    return np.flatnonzero(kept)


def stored_vectors(store: EdgeStore, n: int) -> np.ndarray:
    """Every item's ANN vector, row i for item s{i}, read once through the store's public API."""
    rows = []
    for start in tqdm(range(0, n, 5000), desc="vectors"):
        ids = [f"s{i}" for i in range(start, min(start + 5000, n))]
        stored = store.get(ids, with_vectors=True)
        rows.append(np.stack([stored[i].vectors[ANN_VECTOR] for i in ids]))
    return np.concatenate(rows)


def exact_nearest(vectors: np.ndarray, vector: np.ndarray, kept: np.ndarray, item: str) -> set[str]:
    """The 100 nearest of the kept items by brute force over their stored vectors, the query's item left out."""
    kept = kept[kept != int(item[1:])]
    cosines = vectors[kept] @ (vector / np.linalg.norm(vector))
    return {f"s{i}" for i in kept[np.argsort(-cosines)[:100]].tolist()}


def timed(store: EdgeStore, queries: list[tuple], conditions: list, before: bool, exact: list[set]) -> tuple:
    """p50 ms of the searches and the mean share of each one's exact 100 nearest among its hits; `before`: as the
    engine answered every filter before 2026-11-28, by its HNSW walk, whether an index served the filter or not."""
    store.census_filters = not before
    store.exhaustive_max = -1 if before else EdgeStore.exhaustive_max
    store.filtered_ef_max = 1 if before else EdgeStore.filtered_ef_max
    try:
        times, recalls = [], []
        for (vector, lexical, item), nearest in zip(queries, exact, strict=True):
            started = time.perf_counter()
            found = store.search(vector, 100, conditions, [item], lexical)
            times.append((time.perf_counter() - started) * 1000)
            recalls.append(len(nearest & set(found.ids)) / max(len(nearest), 1))
        return statistics.median(times), statistics.mean(recalls)
    finally:
        store.census_filters, store.exhaustive_max = EdgeStore.census_filters, EdgeStore.exhaustive_max
        store.filtered_ef_max = EdgeStore.filtered_ef_max


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles/all-minilm-l6-v2")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5, help="searches of each filter and way (random items)")
    parser.add_argument("--print-only", action="store_true", help="print the table, leave BENCHMARKS.md as it is")
    args = parser.parse_args()
    started = time.time()
    path = ROOT / f"var/unindexed-{args.items}"
    reused_synthetic_store(args.bundle, args.items, path, metadata)
    loaded = load_bundle(args.bundle)
    whole = lexical_fields(loaded.manifest).names[WHOLE_TEXT]
    documents = lexical_fields(loaded.manifest).documents
    store = EdgeStore(path / COLLECTION, vector_schema(loaded), optimize_after_writes=0, indexed_fields={})  # no index
    rng = np.random.default_rng(3)
    picks = [f"s{i}" for i in rng.integers(0, args.items, args.repeats)]
    stored = store.get(picks, with_vectors=True)
    queries = [
        (stored[i].vectors[ANN_VECTOR], {whole: documents(*synthetic_texts(int(i[1:])))[whole]}, i) for i in picks
    ]
    conditions = {
        name: conditions_of(SimilarRequest.model_validate({"id": "x", "filter": body}).filter)
        for name, body in FILTERS.items()
    }
    kept = {name: matching_ids(args.items, body) for name, body in FILTERS.items()}
    try:
        vectors = stored_vectors(store, args.items)
        exact = {name: [exact_nearest(vectors, q[0], kept[name], q[2]) for q in queries] for name in FILTERS}
        unfiltered = [set() for _ in queries]
        timed(store, queries, [], True, unfiltered)  # page the index in
        plain = timed(store, queries, [], True, unfiltered)[0]
        results = {}
        for name, wanted in tqdm(conditions.items(), desc="filters"):
            results[name] = {
                "census": timed(store, queries, wanted, False, exact[name]),
                "engine": timed(store, queries, wanted, True, exact[name]),
            }
        build_started = time.perf_counter()
        for key, kind in INDEXES.items():
            store.create_index(key, kind)
        build_s = time.perf_counter() - build_started
        for name, wanted in tqdm(conditions.items(), desc="indexed"):
            results[name]["hnsw"] = timed(store, queries, wanted, True, exact[name])
            results[name]["indexed"] = timed(store, queries, wanted, False, exact[name])
    finally:
        store.close()

    rows = []
    for name, got in results.items():
        ways = [got[way] for way in ("engine", "census", "hnsw", "indexed")]
        rows.append(
            f"| {name} | {len(kept[name]):,} | "
            + " | ".join(f"{ms:,.1f} ms, {recall:.2f}" for ms, recall in ways)
            + f" | {ways[0][0] / ways[1][0]:,.0f}x |"
        )
    body = f"""Command: `.venv/bin/python -m bench.filtered_search --items {args.items} --repeats {args.repeats}`
({(time.time() - started) / 60:.0f} min on {machine()}, CPU only, shared). Bundle `{args.bundle.name}`; {args.items:,}
synthetic items with 40 numeric keys and a string key, embedded store, HNSW; store-level by-id searches (the item's
vector and lexical query, limit 100), p50 of {args.repeats}, the same searches each way in one run. Before
2026-11-28 the engine answered every filter by its HNSW walk; now a filter no index serves is answered from the
census (store/census.py, store/exact.py), and one an index serves that keeps at most {EdgeStore.exhaustive_max:,}
points compares each of them, one keeping more walks with a beam as many times wider as it keeps fewer than all
the items (up to {EdgeStore.filtered_ef_max}x). The indexes: one on every key ({len(INDEXES)}, built in
{build_s:.0f} s). Each cell: p50 ms, and recall, the mean share of the 100 nearest items meeting the filter (brute
force over the items the filter keeps, found from the catalog's formulas, not the store) among a search's
candidates. An unfiltered search took {plain:.1f} ms.

| filter | kept | no index, before | no index, now (census) | indexed, before (HNSW) | indexed, now | no index, gain |
|---|---:|---|---|---|---|---:|
{chr(10).join(rows)}"""
    print(body)
    if not args.print_only:
        write_section(ROOT / "BENCHMARKS.md", SECTION, body)


if __name__ == "__main__":
    main()
