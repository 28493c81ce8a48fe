"""Boosts against hand-computed values."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import pytest

from metricsearch.core.boost import boost_values
from metricsearch.core.schemas import DecayBoost, ValueBoost

NOW = datetime(2026, 1, 31, tzinfo=UTC)


def decay(**kwargs) -> DecayBoost:
    field = kwargs.pop("field", "released")
    return DecayBoost(field=field, weight=2.0, decay=kwargs)


def test_value_boost_adds_weight_times_value_and_nothing_without_one():
    metadata = [{"pop": 10}, {"pop": 2.5}, {}, {"pop": "high"}, {"pop": True}, {"pop": -3}]
    values = boost_values(ValueBoost(field="pop", weight=0.1), metadata)
    np.testing.assert_allclose(values, [1.0, 0.25, 0, 0, 0, -0.3])
    logged = boost_values(ValueBoost(field="pop", weight=1.0, transform="log1p"), metadata)
    np.testing.assert_allclose(logged, [math.log(11), math.log(3.5), 0, 0, 0, 0])


@pytest.mark.parametrize(
    ("function", "at_scale", "at_twice"), [("exp", 1.0, 0.5), ("gauss", 1.0, 2.0 * 0.5**4), ("linear", 1.0, 0.0)]
)
def test_date_decay_is_weight_at_origin_and_midpoint_share_at_scale(function, at_scale, at_twice):
    metadata = [
        {"released": "2026-01-31"},
        {"released": "2026-01-01T00:00:00+00:00"},  # 30 days before
        {"released": "2025-12-02"},  # 60 days before
        {"released": "not a date"},
        {},
    ]
    values = boost_values(decay(scale=30, function=function), metadata, now=NOW)
    np.testing.assert_allclose(values, [2.0, at_scale, at_twice, 0.0, 0.0], atol=1e-9)


def test_date_decay_reads_unix_seconds_and_a_given_origin():
    metadata = [{"released": NOW.timestamp()}, {"released": "2026-02-10"}]
    values = boost_values(decay(scale=10, origin="2026-02-10T00:00:00Z"), metadata, now=NOW)
    np.testing.assert_allclose(values, [2.0 * 0.5**1, 2.0])


def test_number_decay_uses_the_fields_own_units():
    values = boost_values(decay(field="year", scale=2, origin=2026, midpoint=0.25), [{"year": 2026}, {"year": 2022}])
    np.testing.assert_allclose(values, [2.0, 2.0 * 0.25**2])
