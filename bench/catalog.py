"""Synthetic catalogs at any size. `text_catalog`: items whose texts have a real catalog's term statistics, for benches
that index through `POST /index` as a user does (bench/latency.py). `synthetic_catalog`: items with made-up vectors,
written straight into an embedded store as `POST /index` writes it (encoding 100k items takes ~20 min on 2 cores, and
what a search or a stored item costs does not depend on the vectors' values); built once into a folder and reused
while its stamp says it holds this catalog."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench.load import serving, wait_for_builds
from metricsearch.client import Client
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
ONSETS = ("", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "br", "st", "tr")
NUCLEI = ("a", "e", "i", "o", "u")
SYLLABLES = tuple(o + n for o in ONSETS for n in NUCLEI)
NOUNS = (
    "speaker", "headphones", "camera", "lens", "monitor", "keyboard", "mouse", "router", "charger", "cable",
    "laptop", "tablet", "printer", "drive", "blender", "toaster", "kettle", "vacuum", "lamp", "fan", "heater",
    "watch", "jacket", "shoes", "backpack", "tent", "drill", "saw", "mixer", "microwave", "television", "projector",
    "phone", "case", "adapter", "battery", "microphone", "amplifier", "turntable", "refrigerator",
)  # fmt: skip
"""What a product is: the noun of its title, few and frequent, as in a real catalog."""


def word(rank: int) -> str:
    """The pseudo-word of frequency rank `rank` (0 = most frequent): frequent words are short, as in a language, and
    rare ones split into several word pieces as rare words do. Each syllable ends at its one vowel, so no two ranks
    spell the same word."""
    pieces = [SYLLABLES[rank % len(SYLLABLES)]]
    rank //= len(SYLLABLES)
    while rank:
        pieces.append(SYLLABLES[rank % len(SYLLABLES)])
        rank //= len(SYLLABLES)
    return "".join(pieces)


def zipf_ranks(rng: np.random.Generator, size: int, count: int, exponent: float = 1.0) -> np.ndarray:
    """`count` ranks of a finite Zipf law over `size` ranks (numpy's `zipf` has no upper bound and needs an exponent
    above 1; word frequencies follow about 1)."""
    weights = 1.0 / np.arange(1, size + 1) ** exponent
    return np.searchsorted(np.cumsum(weights / weights.sum()), rng.random(count), side="right").clip(0, size - 1)


def text_catalog(n: int, seed: int = 0, prefix: str = "s") -> list[dict]:
    """n /index items with a real catalog's term statistics: a title of brand, one to three words, noun and model
    number ("Truka fobe lai speaker TR-4410b"); a description of 8-30 words from a Zipf vocabulary of VOCABULARY
    words. Items come in product families of about five listings that share brand, noun, model stem and words, as
    listings of one product do between shops. Deterministic in (n, seed); 100k items in a few seconds."""
    rng = np.random.default_rng(seed)
    families = max(n // 5, 1)
    brands = [word(r + 200).capitalize() for r in rng.permutation(3000)[:600]]
    family_brand = zipf_ranks(rng, len(brands), families)
    family_noun = zipf_ranks(rng, len(NOUNS), families)
    family_stem = rng.integers(100, 10_000, families)
    family_words = zipf_ranks(rng, VOCABULARY, families * 6).reshape(families, 6)
    of = rng.integers(0, families, n)
    lengths = rng.integers(8, 31, n)
    vocabulary = [word(r) for r in range(VOCABULARY)]
    words = [vocabulary[r] for r in zipf_ranks(rng, VOCABULARY, int(lengths.sum() - 3 * n)).tolist()]
    ends = np.cumsum(lengths - 3).tolist()
    extra, suffix, cut = rng.integers(0, 3, n).tolist(), rng.integers(0, 4, n).tolist(), rng.integers(0, 5, n).tolist()
    items = []
    for i, f in enumerate(of.tolist()):
        brand = brands[family_brand[f]]
        shared = [vocabulary[r] for r in family_words[f]]
        own = words[ends[i] - lengths[i] + 3 : ends[i]]
        model = f"{brand[:2].upper()}-{family_stem[f]}{' abcd'[suffix[i]].strip()}"
        items.append(
            {
                "id": f"{prefix}{i}",
                "title": " ".join([brand, *shared[: 1 + extra[i]], NOUNS[family_noun[f]], model]),
                "description": " ".join([*own[: cut[i]], *shared[3:], *own[cut[i] :]]),
                "metadata": {"bucket": i % BUCKETS, "brand": brand},
            }
        )
    return items


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


INDEX_BATCH = 256
"""Items per POST /index request, `metricsearch index`'s default."""
AS_SERVED = {"MS_OPTIMIZE_AFTER_WRITES": str(Settings().optimize_after_writes)}
"""The service's own build schedule (bench.load's services build nothing behind a timed run)."""


def indexed_store(bundle: Path, n: int, seed: int, data_dir: Path, rebuild: bool = False) -> dict:
    """text_catalog(n, seed) indexed the way a user indexes it: `metricsearch serve` on data_dir with its default
    settings, POST /index in batches of INDEX_BATCH through metricsearch.client, HNSW built in the background as
    writes arrive; then the service waits until no build runs. Kept in data_dir and reused while its stamp names
    this catalog and bundle (indexing 100k items takes 15-30 min on 2 quiet cores, hours on busy ones); an
    interrupted load resumes after the last acknowledged batch; `rebuild` indexes it again. Returns the stamp: the
    catalog, the bundle, and how long indexing took."""
    stamp = data_dir / "bench-indexed.json"
    wanted = {"items": n, "seed": seed, "bundle": load_bundle(bundle).identity, "catalog": 1}
    made = json.loads(stamp.read_text()) if stamp.exists() and not rebuild else {}
    if {key: made.get(key) for key in wanted} != wanted:
        shutil.rmtree(data_dir, ignore_errors=True)
        made = {**wanted, "complete": False, "indexed": 0, "index_s": 0.0}
    if made["complete"]:
        print(f"reusing the {n:,} items indexed in {data_dir} (--rebuild indexes them again)", flush=True)
        return made
    items = text_catalog(n, seed)
    with serving(bundle, data_dir, AS_SERVED) as service, Client(service.url, timeout_s=300) as client:
        for start in tqdm(range(made["indexed"], n, INDEX_BATCH), desc=f"POST /index {n:,} items", disable=None):
            started = time.perf_counter()
            client.index(items[start : start + INDEX_BATCH])
            made["index_s"] += time.perf_counter() - started
            made["indexed"] = min(start + INDEX_BATCH, n)
            stamp.write_text(json.dumps(made))
        made["builds_after_s"] = wait_for_builds(service, timeout_s=3600)
    made.update(complete=True, items_s=round(n / made["index_s"], 1), index_s=round(made["index_s"], 1))
    stamp.write_text(json.dumps(made))
    return made
