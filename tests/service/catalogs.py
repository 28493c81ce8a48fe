"""Small synthetic catalogs the service's tests index: words from a short list, part-number-like model names, two
shops, and the service around a copy of the tiny bundle with its manifest changed."""

from __future__ import annotations

import numpy as np

from metricsearch.core.records import Item
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service
from metricsearch.service.runtime import Runtime
from tests.bundles import bundle_variant

WORDS = [
    "red",
    "blue",
    "green",
    "cotton",
    "linen",
    "wool",
    "shirt",
    "hat",
    "scarf",
    "sock",
    "boot",
    "lamp",
    "kettle",
    "mug",
    "chair",
    "desk",
]


def catalog_items(n: int, seed: int = 0) -> list[Item]:
    rng = np.random.default_rng(seed)
    items = []
    for i in range(n):
        title = " ".join(rng.choice(WORDS, size=4)) + f" model{i % 7}"
        description = " ".join(rng.choice(WORDS, size=10)) if i % 5 else ""
        items.append(Item(f"i{i}", title, description, {"shop": "a" if i % 2 else "b"}))
    return items


def served_catalog(tiny_bundle, folder, candidates_min: int = 10, **manifest_changes) -> Runtime:
    """The live runtime of a service on a copy of the tiny bundle with `manifest_changes`, 120 items indexed;
    `candidates_min` of 1000 makes every item a candidate of every query."""
    bundle = bundle_variant(tiny_bundle, folder / "bundle", **manifest_changes)
    runtime = Service(Settings(bundle_dir=bundle, data_dir=folder / "data", candidates_min=candidates_min)).live
    runtime.engine.indexer.index(catalog_items(120))
    return runtime
