"""A synthetic catalog at any size, written straight into an embedded store as `POST /index` writes it: encoding
100k items with the real model takes ~20 min on 2 cores, and what a search or a stored item costs does not depend on
the vectors' values. Built once into a folder and reused while its stamp says it holds this catalog."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from tqdm import tqdm

from metricsearch.core import scoring
from metricsearch.core.bundle import load_bundle
from metricsearch.core.lexical import lexical_fields
from metricsearch.service import (
    ANN_VECTOR,
    FACTORS_VECTOR,
    Settings,
    StoredItem,
    content_hash,
    open_store,
    vector_schema,
)

VOCABULARY = 30_000
CLUSTER = 20
"""Items a cluster of near-duplicates holds on average (listings of one product)."""
BUCKETS = 10
"""Values of the metadata key `bucket`: a filter on one keeps 10% of the items."""
BATCH = 2000


def spelled(n: int) -> str:
    """Word number n in letters ("wa", "wb", ..., "wba"): a word, where "w12" would be a model number to the
    analyzer, making nearly every term a code; real catalogs hold about 2-3 codes an item."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    word = letters[n % 26]
    while n >= 26:
        n //= 26
        word = letters[n % 26] + word
    return "w" + word


def synthetic_catalog(n: int, dim: int, seed: int = 0) -> tuple[list[dict], np.ndarray]:
    """n /index items in clusters of about CLUSTER, and their (n, 2, dim) title and description unit vectors (low
    rank, as real embeddings concentrate in few directions). Most titles hold a part number whose suffix letter
    varies within the cluster ("PN-00042b"), as a model number does between shops."""
    rng = np.random.default_rng(seed)
    rank = 48
    basis = rng.standard_normal((rank, dim)).astype(np.float32)
    clusters = max(n // CLUSTER, 1)
    centres = rng.standard_normal((clusters, rank)).astype(np.float32)
    own_words = rng.integers(0, VOCABULARY, (clusters, 6))
    of = rng.integers(0, clusters, n)
    noise = rng.standard_normal((n, 2, rank)).astype(np.float32) * 0.6
    fields = (centres[of][:, None, :] + noise) @ basis
    fields /= np.linalg.norm(fields, axis=2, keepdims=True)

    def words(count: int) -> list[str]:
        return [spelled(w % VOCABULARY) for w in rng.zipf(1.4, count)]

    items = []
    for i, c in enumerate(of):
        shared = [spelled(w) for w in own_words[c]]
        part = f"PN-{c:05d}{'abc'[rng.integers(0, 3)]}" if rng.random() < 0.7 else ""
        items.append(
            {
                "id": f"s{i}",
                "title": " ".join([*shared[:3], *words(3), part]).strip(),
                "description": " ".join([*shared[3:], *words(14)]),
                "metadata": {"bucket": i % BUCKETS},
            }
        )
    return items, fields


def build_store(bundle: Path, n: int, data_dir: Path) -> list[str]:
    """The catalog of n items in a new embedded store at data_dir, HNSW built once past the service's indexing
    threshold (as it is served); their ids. A second-order bundle's
    factors are random: what they cost is their size."""
    loaded = load_bundle(bundle)
    manifest = loaded.manifest
    schema = vector_schema(loaded)
    lexical = lexical_fields(manifest)
    items, fields = synthetic_catalog(n, manifest.encoder.dim)
    weights = [f.weight for f in manifest.fields if f.weight > 0]
    packed = scoring.pack(fields[:, : len(weights)], weights)
    rng = np.random.default_rng(1)
    settings = Settings(data_dir=data_dir, optimize_after_writes=0)
    store = open_store(settings, schema)
    for start in tqdm(range(0, n, BATCH), desc=f"catalog of {n:,}", disable=None):
        batch = []
        for j, item in enumerate(items[start : start + BATCH]):
            vectors = {ANN_VECTOR: packed[start + j]}
            if FACTORS_VECTOR in schema.sizes:
                vectors[FACTORS_VECTOR] = rng.standard_normal(schema.sizes[FACTORS_VECTOR], dtype=np.float32)
            title, description = item["title"], item["description"]
            batch.append(
                StoredItem(
                    id=item["id"],
                    title=title,
                    description=description,
                    metadata=item["metadata"],
                    content_hash=content_hash(title, description),
                    vectors=vectors,
                    sparse=lexical.documents(title, description) if lexical else {},
                )
            )
        store.upsert(batch)
    store.optimize_now()
    store.wait_for_maintenance()
    if not store.has_hnsw and n * schema.sizes[ANN_VECTOR] * 4 > settings.indexing_threshold_kb * 1024:
        raise RuntimeError(f"no HNSW index was built for {n} synthetic items")
    store.close()
    return [item["id"] for item in items]


def reused_store(bundle: Path, n: int, data_dir: Path) -> list[str]:
    """build_store's catalog at data_dir, built only when the folder's stamp names another catalog or bundle."""
    stamp = data_dir / "bench-catalog.json"
    wanted = {"items": n, "bundle": load_bundle(bundle).identity, "version": 1}
    if stamp.exists() and json.loads(stamp.read_text()) == wanted:
        return [f"s{i}" for i in range(n)]
    shutil.rmtree(data_dir, ignore_errors=True)
    ids = build_store(bundle, n, data_dir)
    stamp.write_text(json.dumps(wanted))
    return ids
