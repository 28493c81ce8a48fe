"""Latency and throughput of `/similar` through HTTP: by id, by text, filtered and with recommendation options, beside
the plain stack a user would otherwise write (bench/peers/plain_stack.py) and txtai (bench/peers/txtai_api.py, text
queries), each measured in this run on the same machine; then by id while a background HNSW build runs and after it.
Writes BENCHMARKS.md's "Latency, N items" section and its summary rows.

    nice -n 10 .venv/bin/python -m bench.latency [--items 100000] [--seconds 8] [--peers plain txtai] [--rebuild]

The catalog is bench/catalog.py's text catalog (real term statistics), indexed the way a user indexes it: POST /index
through metricsearch.client into `metricsearch serve` with default settings. Indexing 100k items takes 15-30 min on 2
cores, so the store is kept in --store-dir (default var/bench-indexed-<items>-seed<seed>-<bundle>) and reused by the
next run while its stamp names the same catalog and bundle; --rebuild indexes it again. Every figure of the scenarios
comes from wrk (one thread): c1 = one connection (latency), c8 = eight (throughput); text queries are real wine-review
titles. txtai holds the Buy catalog (its API encodes documents; indexing 100k items into it too would take as long
again), so its text row searches a smaller index: a text query's cost is mostly its encoding, on both sides. The plain
stack holds the catalog's titles with random vectors: brute force costs the same whatever the values.

During a build: a copy of the store gets --build-items new items through POST /index, the last write starts a build,
and one client asks by id, one request at a time, while the optimiser runs, then as many after it. --build-priority
runs it once per priority: `as-built` (what store/edge/build.py sets), `nice-10` or `normal` (nice 0), set by this
bench on the optimiser's threads (raising a priority back needs root or CAP_SYS_NICE).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import httpx
import numpy as np
import orjson
import psutil
from tqdm import tqdm

from bench.catalog import INDEX_BATCH, indexed_store, text_catalog
from bench.data import abt_buy, wine_items
from bench.load import build_child, has_wrk, percentile, serving, timed, wait_for_builds, wrk
from bench.peers import plain_stack
from bench.peers.txtai_api import TxtaiProcess, ensure_venv, txtai_version
from bench.report import BENCHMARKS, ROOT, command, table, write_section, write_summary
from metricsearch.client import Client
from metricsearch.core.bundle import load_bundle
from metricsearch.service import free_port

UNIFORM, ZIPF = "by id, uniform over the catalog", "by id, Zipf popularity (storefront)"
TEXT_NEW, TEXT_POPULAR = "by text, every text new", "by text, 200 popular texts (Zipf)"
FILTERED = "by id, filter keeping 10%, no index (`MS_AUTO_INDEX=0`)"
LEARNED = "by id, same filter, index learned from the first filter (default)"
Bodies = tuple[list[bytes], list[bytes], list[bytes]]
"""A scenario's request bodies: warm-up, one connection, eight connections."""


def zipf_ids(ids: list[str], count: int, rng: np.random.Generator) -> list[str]:
    """Storefront popularity: a few items get most views (Zipf over a random ranking of the catalog)."""
    ranking = rng.permutation(len(ids))
    return [ids[ranking[r]] for r in np.minimum(rng.zipf(1.1, count), len(ids)) - 1]


def thirds(values: list, rng: np.random.Generator | None = None) -> tuple[list, list, list]:
    """Warm-up, one-connection and eight-connection shares that never repeat (a repeat would be a cache hit)."""
    values = [values[i] for i in rng.permutation(len(values))] if rng is not None else values
    a, b = max(len(values) // 50, 1), max(len(values) // 3, 2)
    return values[:a], values[a:b], values[b:]


def bodies(key: str, values: list, **extra: object) -> list[bytes]:
    return [orjson.dumps({key: v, "k": 10, **extra}) for v in values]


def shared_scenarios(ids: list[str], texts: list[str], rng: np.random.Generator) -> dict[str, Bodies]:
    """What every stack answers."""
    pool = texts[:200]
    popular = [pool[min(r, len(pool)) - 1] for r in rng.zipf(1.1, 20000)]
    return {
        UNIFORM: tuple(bodies("id", share) for share in thirds(ids, rng)),
        ZIPF: (bodies("id", zipf_ids(ids, 2000, rng)), *[bodies("id", zipf_ids(ids, 50000, rng))] * 2),
        TEXT_NEW: tuple(bodies("text", share) for share in thirds(texts)),
        TEXT_POPULAR: (bodies("text", texts[:20]), *[bodies("text", popular)] * 2),
    }


def own_scenarios(ids: list[str], rng: np.random.Generator) -> dict[str, Bodies]:
    """What only metricsearch answers here (the peers have no metadata or recommendation options)."""
    options = {
        "by id, k=100": {"k": 100},
        FILTERED: {"filter": {"bucket": 3}},
        "positive_ids (5)": {},
        "diversity 0.3": {"diversity": 0.3},
        "group_by `bucket`": {"group_by": "bucket"},
    }
    scenarios: dict[str, Bodies] = {}
    for name, extra in options.items():
        shares = thirds(ids, rng)
        if name.startswith("positive_ids"):
            scenarios[name] = tuple(
                [
                    orjson.dumps({"positive_ids": [ids[i] for i in rng.integers(len(ids), size=5)], "k": 10})
                    for _ in share
                ]
                for share in shares
            )
        else:
            scenarios[name] = tuple(bodies("id", share, **extra) for share in shares)
    return scenarios


def run_stack(name: str, url: str, scenarios: dict[str, Bodies], seconds: float, workdir: Path, get=False) -> dict:
    results = {}
    for case, (warm, latency, load) in tqdm(scenarios.items(), desc=name, disable=None):
        wrk(url, warm, 1, min(2, seconds), workdir, get)
        results[case] = {
            "c1": wrk(url, latency, 1, seconds, workdir, get),
            "c8": wrk(url, load, 8, seconds, workdir, get),
        }
    return results


def learn_index(url: str, body: bytes, timeout_s: float = 120) -> float:
    """One filtered request, then the seconds until the service's automatic index on its key is built (its metric)."""
    started = time.monotonic()
    with httpx.Client(base_url=url, timeout=60) as client:
        client.post("/similar", content=body, headers={"content-type": "application/json"}).raise_for_status()
        while time.monotonic() - started < timeout_s:
            metrics = client.get("/metrics").text
            if 'metricsearch_auto_indexes_total{outcome="built"}' in metrics:
                return time.monotonic() - started
            time.sleep(0.1)
    raise RuntimeError(f"no automatic index within {timeout_s:.0f} s")


def plain_vectors(items: list[dict], dim: int, path: Path) -> Path:
    """The plain stack's catalog: the items' ids and titles, one random unit title vector an item (its brute force
    costs the same whatever the values, and encoding 100k titles again would take minutes)."""
    vectors = np.random.default_rng(0).standard_normal((len(items), dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids, titles = np.array([i["id"] for i in items]), np.array([i["title"] for i in items])
    np.savez(path, ids=ids, titles=titles, vectors=vectors)
    return path


PRIORITIES = {"as-built": None, "nice-10": 10, "normal": 0}
"""--build-priority: the optimiser's nice value this bench sets on each of its threads (None: as the service set it)."""


def set_nice(child, nice: int) -> None:
    """`nice` on every thread of the optimiser (a nice value belongs to a thread on Linux)."""
    for thread in child.threads():
        try:
            os.setpriority(os.PRIO_PROCESS, thread.id, nice)
        except ProcessLookupError:
            continue


def during_build(args: argparse.Namespace, ids: list[str], priority: str) -> dict:
    """By id, one request at a time, while a background build runs on a copy of the store, then as many after it."""
    copy = args.store_dir.with_name(args.store_dir.name + "-build")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(args.store_dir, copy)
    new = text_catalog(args.build_items, args.seed + 1, prefix="b")
    order = itertools.cycle(np.random.default_rng(2).permutation(len(ids)).tolist())  # no repeats below len(ids)
    try:
        env = {"MS_OPTIMIZE_AFTER_WRITES": str(args.build_items)}
        with serving(args.bundle, copy, env) as service, Client(service.url, timeout_s=120) as client:
            for start in range(0, len(new), INDEX_BATCH):
                client.index(new[start : start + INDEX_BATCH])
            waited = time.monotonic()
            while (child := build_child(service)) is None and time.monotonic() - waited < 120:
                time.sleep(0.05)
            if child is None:
                raise RuntimeError(
                    f"no HNSW build started after {args.build_items} new items: a build also waits for "
                    "MS_INDEXING_THRESHOLD_KB of unindexed ANN vectors (about 3,300 items of the default bundle's "
                    "768 floats); raise --build-items"
                )
            started, during, cpu_s = time.monotonic(), [], 0.0
            while time.monotonic() - started < args.during_s:
                try:
                    if PRIORITIES[priority] is not None:
                        set_nice(child, PRIORITIES[priority])
                    cpu_s = sum(child.cpu_times()[:2])
                except psutil.NoSuchProcess:
                    break
                if build_child(service) is None:
                    break
                during += timed(client, [{"id": ids[next(order)], "k": 10} for _ in range(10)])[0]
            build_s = time.monotonic() - started + wait_for_builds(service, timeout_s=3600, quiet_s=3)
            after = timed(client, [{"id": ids[next(order)], "k": 10} for _ in range(len(during))], args.during_s)[0]
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    return {"build_s": build_s, "cpu_s": cpu_s, "during": during, "after": after}


def txtai_run(texts: list[str], seconds: float, workdir: Path) -> tuple[str, dict]:
    """txtai's API holding the Buy catalog (added and indexed, not timed), searched by the new texts."""
    peer = TxtaiProcess(free_port(), workdir)
    peer.start()
    try:
        _, buy, _ = abt_buy()
        with httpx.Client(base_url=peer.url, timeout=900) as client:
            client.post("/add", json=[{"id": p.id, "text": f"{p.title} {p.description}"} for p in buy])
            client.get("/index").raise_for_status()
        paths = tuple(
            [f"/search?{urlencode({'query': t, 'limit': 10})}".encode() for t in share] for share in thirds(texts)
        )
        return f"txtai {txtai_version()} (Buy catalog)", run_stack(
            "txtai", peer.url, {TEXT_NEW: paths}, seconds, workdir, get=True
        )
    finally:
        peer.stop()


def measure(args: argparse.Namespace, workdir: Path) -> dict:
    made = indexed_store(args.bundle, args.items, args.seed, args.store_dir, args.rebuild)
    catalog = text_catalog(args.items, args.seed)
    ids = [item["id"] for item in catalog]
    texts = list(dict.fromkeys(i["title"] for i in wine_items(args.texts)))
    rng = np.random.default_rng(1)
    shared, own = (shared_scenarios(ids, texts, rng), own_scenarios(ids, rng)) if args.seconds > 0 else ({}, {})
    stacks: dict[str, dict] = {}
    if args.seconds > 0:
        with serving(args.bundle, args.store_dir, {"MS_AUTO_INDEX": "0"}) as service:
            stacks["metricsearch"] = run_stack("metricsearch", service.url, {**shared, **own}, args.seconds, workdir)
        with serving(args.bundle, args.store_dir) as service:
            learned_s = learn_index(service.url, own[FILTERED][0][0])
            stacks["metricsearch"] |= run_stack("learned", service.url, {LEARNED: own[FILTERED]}, args.seconds, workdir)
    if "plain" in args.peers and args.seconds > 0:
        port = free_port()
        vectors = plain_vectors(catalog, load_bundle(args.bundle).manifest.encoder.dim, workdir / "plain.npz")
        process = plain_stack.start(vectors, port, workdir / "plain.log")
        try:
            stacks["plain stack"] = run_stack("plain", f"http://127.0.0.1:{port}", shared, args.seconds, workdir)
        finally:
            process.terminate()
            process.wait(timeout=30)
    if "txtai" in args.peers and args.seconds > 0:
        ensure_venv()
        name, results = txtai_run(texts, args.seconds, workdir)
        stacks[name] = results
    builds = {p: during_build(args, ids, p) for p in tqdm(args.build_priority, desc="during a build", disable=None)}
    return {
        "stacks": stacks,
        "learned_s": learned_s if stacks else None,
        "shared": list(shared),
        "own": [*own, LEARNED],
        "made": made,
        "builds": builds,
    }


def cells(r: dict) -> list:
    errors = sum(r[c]["errors"] + r[c]["non2xx"] for c in ("c1", "c8"))
    c1, c8 = r["c1"], r["c8"]
    return [f"{c1['p50']:.2f}", f"{c1['p99']:.2f}", f"{c8['rps']:.0f}", f"{c8['p50']:.2f}", f"{c8['p99']:.2f}", errors]


def report(args: argparse.Namespace, argv: list[str], measured: dict) -> tuple[str, list[tuple[str, str, str]]]:
    made, builds = measured["made"], measured["builds"]
    body = f"""Command: {command("bench.latency", argv)}. {args.items:,} items of bench/catalog.py's text catalog (seed
{args.seed}: titles of brand, words, noun and model number, 8-30 word descriptions from a Zipf vocabulary of 30,000
words) indexed through POST /index in batches of {INDEX_BATCH} (metricsearch.client) into `metricsearch serve` with
default settings: {made["items_s"]:.0f} items/s, HNSW built in the background meanwhile, the last build done
{made["builds_after_s"]:.0f} s after the last write.
"""
    summary = []
    if measured["stacks"]:
        scenarios, summary = scenario_tables(args, measured)
        body += scenarios
    if builds:
        rows = [
            [
                priority,
                f"{b['build_s']:.1f}",
                f"{b['cpu_s']:.1f}",
                len(b["during"]),
                f"{percentile(b['during'], 50):.2f} / {percentile(b['during'], 99):.2f}",
                f"{percentile(b['after'], 50):.2f} / {percentile(b['after'], 99):.2f}",
                f"{percentile(b['during'], 50) / percentile(b['after'], 50):.2f}",
            ]
            for priority, b in builds.items()
        ]
        header = [
            "optimiser priority",
            "build s",
            "its CPU s while measured",
            "requests",
            "during: p50 / p99 ms",
            "after: p50 / p99 ms",
            "p50 during / after",
        ]
        body += f"""
By id during a background HNSW build: a copy of the store took {args.build_items:,} new items through POST /index;
the last write started a build; one client (metricsearch.client) asked by id, k 10, one request at a time, a new
id each, while the optimiser ran (at most {args.during_s:g} s), then as many requests after the build. `as-built`:
the priority store/edge/build.py gives the optimiser; the others are set by this bench on its threads.

{table(header, rows)}
"""
        first = next(iter(builds.values()))
        summary.append(
            (
                f"`/similar` by id during a background HNSW build / after it, {args.items // 1000}k items: p50 ms",
                f"{percentile(first['during'], 50):.2f} / {percentile(first['after'], 50):.2f}",
                "-",
            )
        )
    return body, summary


def scenario_tables(args: argparse.Namespace, measured: dict) -> tuple[str, list[tuple[str, str, str]]]:
    stacks, ours = measured["stacks"], measured["stacks"]["metricsearch"]
    rows = []
    for case in measured["shared"]:
        rows += [[case, stack, *cells(results[case])] for stack, results in stacks.items() if case in results]
    rows += [[case, "metricsearch", *cells(ours[case])] for case in measured["own"]]
    header = ["scenario", "stack", "p50 ms (c1)", "p99 ms (c1)", "req/s (c8)", "p50 ms (c8)", "p99 ms (c8)", "errors"]
    ratios = [
        [f"{case}, {stack}", *ratio(ours[case], results[case])]
        for stack, results in stacks.items()
        if stack != "metricsearch"
        for case in results
    ]
    body = f"""
Text queries from wine-review titles; wrk with one thread on the same cores as the server, {args.seconds:g} s a run
after a warm-up. metricsearch: `metricsearch serve` with default settings (caches on), no build running. Plain stack:
sentence-transformers + numpy brute force over one 384-d vector an item in FastAPI, BLAS pinned to one thread. txtai:
its own API in its own venv, the same packaged model. Filter rows: `bucket` keeps 10% of the items; the learned index
was live {measured["learned_s"]:.1f} s after the first filtered request.

{table(header, rows)}
"""
    if ratios:
        body += f"""
{table(["scenario, peer", "p50 (c1): peer / ours", "p99 (c1): peer / ours", "req/s (c8): ours / peer"], ratios)}
"""
    at = f"{args.items // 1000}k items: p50 / p99 ms (1 connection); req/s (8)"
    summary = [
        (f"`/similar` {case}, {at}", figures(ours[case]), peers(stacks, case)) for case in (UNIFORM, ZIPF, TEXT_NEW)
    ]
    filtered = figures(ours[LEARNED]), "no index: " + figures(ours[FILTERED])
    summary.append((f"`/similar` by id, filter keeping 10%, {at}", *filtered))
    return body, summary


def ratio(ours: dict, peer: dict) -> list[str]:
    return [
        f"{peer['c1']['p50'] / ours['c1']['p50']:.1f}x",
        f"{peer['c1']['p99'] / ours['c1']['p99']:.1f}x",
        f"{ours['c8']['rps'] / peer['c8']['rps']:.1f}x",
    ]


def figures(r: dict) -> str:
    return f"{r['c1']['p50']:.2f} / {r['c1']['p99']:.2f}; {r['c8']['rps']:.0f}"


def peers(stacks: dict, case: str) -> str:
    return "; ".join(f"{s}: {figures(r[case])}" for s, r in stacks.items() if s != "metricsearch" and case in r) or "-"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=ROOT / "bundles/all-minilm-l6-v2")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=8, help="seconds of each wrk run; 0: no wrk scenarios")
    parser.add_argument("--texts", type=int, default=10_000, help="wine titles read for text queries")
    parser.add_argument("--peers", nargs="*", default=["plain", "txtai"], choices=["plain", "txtai"])
    parser.add_argument("--seed", type=int, default=0, help="the text catalog's seed")
    parser.add_argument(
        "--store-dir",
        type=Path,
        default=None,
        help="where the indexed catalog is kept and reused (default: var/bench-indexed-<items>-seed<seed>-<bundle>)",
    )
    parser.add_argument("--rebuild", action="store_true", help="index the catalog again even if --store-dir holds it")
    parser.add_argument("--build-items", type=int, default=5000, help="new items whose last write starts a build")
    parser.add_argument("--build-priority", nargs="*", default=["as-built", "normal"], choices=list(PRIORITIES))
    parser.add_argument("--during-s", type=float, default=300, help="longest a by-id run during a build lasts")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    identity = hashlib.sha256(load_bundle(args.bundle).identity.encode()).hexdigest()[:8]
    args.store_dir = args.store_dir or ROOT / f"var/bench-indexed-{args.items}-seed{args.seed}-{identity}"
    if args.seconds > 0 and not has_wrk():
        sys.exit("wrk is not installed: apt-get install -y wrk")
    with tempfile.TemporaryDirectory(prefix="ms-latency-") as tmp:
        measured = measure(args, Path(tmp))
    body, summary = report(args, argv, measured)
    print(body)
    title = f"Latency, {args.items:,} items"
    write_section(BENCHMARKS, title, body)
    if summary:
        write_summary(BENCHMARKS, title, summary)


if __name__ == "__main__":
    main()
