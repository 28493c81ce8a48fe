"""The records every part passes around: a catalog item, a ranked match, and the training pairs and triplets."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

MetadataValue = str | int | float | bool | list[str]
ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://metricsearch/item")
"""Point ids derive from it: changing it orphans every stored point."""


def point_id(item_id: str) -> str:
    """An item's point id in a Qdrant server (the embedded store keys it by the upper half, edge/layout.point_key):
    Qdrant accepts only integer or UUID point ids (the external id stays in the payload); a hash, so the order of
    point ids is spread over any catalog."""
    return str(uuid.uuid5(ID_NAMESPACE, item_id))


@dataclass(frozen=True)
class Item:
    """A catalog entry: what `/index` stores, what the trainer learns from and what the evaluation ranks."""

    id: str
    title: str
    description: str = ""
    metadata: dict[str, MetadataValue] | None = None


@dataclass(frozen=True)
class Match:
    """One ranked result: `score` is higher for more similar; `field_scores` explains it per component (None where
    either side lacks the field)."""

    id: str
    score: float
    title: str
    metadata: dict[str, MetadataValue]
    field_scores: dict[str, float | None]


@dataclass(frozen=True)
class ScoredPair:
    """Two texts and their similarity on the file's own scale."""

    text_a: str
    text_b: str
    score: float


@dataclass(frozen=True)
class Triplet:
    """An anchor meant to be nearer its positive than its negative."""

    anchor: str
    positive: str
    negative: str
