"""The metadata conditions a search or a delete is restricted by, as every part passes them (the HTTP schemas build
them, the stores translate them for their engine)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Equals:
    """metadata[key] == value (for a list value: any element equals it)."""

    key: str
    value: str | int | float | bool


@dataclass(frozen=True)
class AnyOf:
    """metadata[key] is one of values (for a list value: any element is)."""

    key: str
    values: tuple[str | int, ...]


@dataclass(frozen=True)
class Range:
    """gte <= metadata[key] <= lte, either bound optional."""

    key: str
    gte: float | None = None
    lte: float | None = None


Condition = Equals | AnyOf | Range
