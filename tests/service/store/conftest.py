"""Store fixtures: a small two-vector schema, random items, both store implementations, and a brute-force
reference that the stores' answers are checked against."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
from qdrant_client import QdrantClient

from metricsearch.service.store import EdgeStore, RemoteStore
from metricsearch.service.store.base import AnyOf, Condition, Equals, Range, StoredItem, VectorSchema

SCHEMA = VectorSchema(sizes={"title": 8, "description": 12}, ann="title", identity="test-bundle@1")
COLORS = ("red", "green", "blue")


def make_item(i: int, rng: np.random.Generator, version: int = 0) -> StoredItem:
    """Item i with metadata of every kind filters meet: str, int, float, bool, list of str, and missing keys."""
    metadata: dict = {
        "color": COLORS[(i + version) % 3],
        "year": 2000 + i % 7,
        "price": i * 0.25,
        "new": i % 2 == 0,
        "tags": ["all", f"t{i % 4}"],
        "size": i % 3 if i % 2 else float(i % 3),  # the same numbers stored as int and as float
    }
    if i % 5 == 0:
        del metadata["price"]
    return StoredItem(
        id=f"item-{i}",
        title=f"title {i} v{version}",
        description=f"description {i} v{version}",
        metadata=metadata,
        content_hash=f"hash-{i}-{version}",
        vectors={name: rng.normal(size=size).astype(np.float32) for name, size in SCHEMA.sizes.items()},
    )


def _values(metadata: dict, key: str) -> list:
    value = metadata.get(key)
    return [] if value is None else value if isinstance(value, list) else [value]


def _same(stored: object, wanted: object) -> bool:
    return type(stored) is type(wanted) and stored == wanted


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal(stored: object, wanted: object) -> bool:
    """Numbers compare by value (2 equals 2.0, true is not 1); anything else by type and value."""
    if _is_number(wanted):
        return _is_number(stored) and stored == wanted
    return _same(stored, wanted)


def matches(metadata: dict, condition: Condition) -> bool:
    values = _values(metadata, condition.key)
    if isinstance(condition, Equals):
        return any(_equal(v, condition.value) for v in values)
    if isinstance(condition, AnyOf):
        return any(_equal(v, w) for v in values for w in condition.values)
    assert isinstance(condition, Range)
    return any(
        _is_number(v)
        and (condition.gte is None or v >= condition.gte)
        and (condition.lte is None or v <= condition.lte)
        for v in values
    )


def unit(v: np.ndarray) -> np.ndarray:
    return np.asarray(v, dtype=np.float64) / np.linalg.norm(v)


class Reference:
    """What a store should hold and answer, by brute force over plain dicts."""

    def __init__(self) -> None:
        self.items: dict[str, StoredItem] = {}

    def upsert(self, items: Sequence[StoredItem]) -> None:
        self.items.update((item.id, item) for item in items)

    def delete(self, ids: Sequence[str]) -> int:
        return sum(self.items.pop(i, None) is not None for i in set(ids))

    def search(
        self, vector: np.ndarray, limit: int, conditions: Sequence[Condition] = (), exclude_ids: Sequence[str] = ()
    ) -> tuple[list[str], np.ndarray]:
        query = unit(vector)
        scored = [
            (float(unit(item.vectors[SCHEMA.ann]) @ query), item.id)
            for item in self.items.values()
            if item.id not in exclude_ids and all(matches(item.metadata, c) for c in conditions)
        ]
        scored.sort(reverse=True)
        top = scored[:limit]
        return [i for _, i in top], np.array([s for s, _ in top])


@pytest.fixture
def schema() -> VectorSchema:
    return SCHEMA


@pytest.fixture
def items() -> Callable[..., list[StoredItem]]:
    """items(range, seed=0, version=0): deterministic random items."""

    def build(ids: range, seed: int = 0, version: int = 0) -> list[StoredItem]:
        rng = np.random.default_rng(seed)
        return [make_item(i, rng, version) for i in ids]

    return build


@pytest.fixture
def edge_store(tmp_path):
    store = EdgeStore(tmp_path / "edge", SCHEMA, optimize_after_writes=0)
    yield store
    store.close()


@pytest.fixture
def local_store(tmp_path):
    store = RemoteStore(QdrantClient(path=str(tmp_path / "local")), "items", SCHEMA)
    yield store
    store.close()


@pytest.fixture(params=["edge", "remote-local"])
def store(request):
    return request.getfixturevalue("edge_store" if request.param == "edge" else "local_store")
