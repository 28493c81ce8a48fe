"""The records every part passes around: a catalog item, a ranked match, and the training pairs and triplets."""

from __future__ import annotations

from dataclasses import dataclass

MetadataValue = str | int | float | bool | list[str]


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
