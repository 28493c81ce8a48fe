"""Boosts a ranking adds to the rerank score from an item's metadata: a value boost (popularity, margin, rating) and a
recency decay (a date, or a number such as a year). Pure functions of the candidates' metadata, no I/O.

A value boost adds `weight * value` (or `weight * ln(1 + max(value, 0))` with transform log1p). A decay adds
`weight * f(distance)`, f falling from 1 at `origin` to `midpoint` at `scale` away (Elasticsearch's decay functions):
exp: midpoint ** (d / scale); gauss: midpoint ** ((d / scale)^2); linear: max(0, 1 - (1 - midpoint) * d / scale).
Distances are in days for a date decay (its origin a date-time, or now when left out; an item's date is an ISO-8601
string, or a number of seconds since 1970) and in the field's own units for a number decay (its origin a number).
An item without a usable value gets no boost (0)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any

import numpy as np

from metricsearch.core.schemas import DecayBoost, ValueBoost

SECONDS_PER_DAY = 86_400.0


def boost_values(
    boost: ValueBoost | DecayBoost, metadata: Sequence[Mapping[str, Any]], now: datetime | None = None
) -> np.ndarray:
    """(n,) what `boost` adds to each candidate's score."""
    if isinstance(boost, ValueBoost):
        values = np.array([_number(m.get(boost.field)) for m in metadata], dtype=np.float64)
        if boost.transform == "log1p":
            values = np.log1p(np.maximum(values, 0.0))
        return np.nan_to_num(boost.weight * values, nan=0.0)
    decay = boost.decay
    if isinstance(decay.origin, int | float):
        origin = float(decay.origin)
        values = np.array([_number(m.get(boost.field)) for m in metadata], dtype=np.float64)
        distance = np.abs(values - origin) / decay.scale
    else:
        origin = _seconds(decay.origin or now or datetime.now(UTC))
        values = np.array([_timestamp(m.get(boost.field)) for m in metadata], dtype=np.float64)
        distance = np.abs(values - origin) / (decay.scale * SECONDS_PER_DAY)
    if decay.function == "exp":
        factor = decay.midpoint**distance
    elif decay.function == "gauss":
        factor = decay.midpoint ** (distance**2)
    else:
        factor = np.maximum(0.0, 1.0 - (1.0 - decay.midpoint) * distance)
    return np.nan_to_num(boost.weight * factor, nan=0.0)


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return math.nan
    return float(value)


def _timestamp(value: object) -> float:
    """Seconds since 1970 of an ISO-8601 date or date-time string (UTC when it names no zone) or of a number."""
    if isinstance(value, str):
        try:
            return _seconds(datetime.fromisoformat(value))
        except ValueError:
            return math.nan
    return _number(value)


def _seconds(moment: datetime | date) -> float:
    if not isinstance(moment, datetime):
        moment = datetime(moment.year, moment.month, moment.day)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
