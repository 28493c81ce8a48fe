"""The store interface's own logic (store/base.py): how many lexical matches a hybrid search adds to its nearest, and
the warning that a model rollout's record serves another bundle than MS_BUNDLE_DIR. The Store protocol itself is
held by the congruence tests (test_congruence.py), which run the same operations on both stores."""

from __future__ import annotations

import logging

from metricsearch.service.config import Settings
from metricsearch.service.store.base import lexical_limit, warn_if_other_bundle


def test_a_hybrid_search_adds_a_quarter_as_many_lexical_matches_and_never_none():
    limits = (1, 2, 3, 4, 7, 8, 10, 11, 100, 1000)
    assert [lexical_limit(n) for n in limits] == [1, 1, 1, 1, 1, 2, 2, 2, 25, 250]
    assert all(1 <= lexical_limit(n) <= n for n in range(1, 300)), "a match by part number alone stays a candidate"


def test_serving_another_bundle_than_ms_bundle_dir_is_said_and_the_same_one_is_not(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    settings = Settings(bundle_dir="bundles/a")  # relative, as MS_BUNDLE_DIR usually is
    caplog.set_level(logging.WARNING, logger="metricsearch.service.store.base")

    warn_if_other_bundle(tmp_path / "bundles" / "a", settings, "collection 'items.r1'")
    assert caplog.records == [], "the record names MS_BUNDLE_DIR itself, only resolved"

    warn_if_other_bundle(tmp_path / "bundles" / "b", settings, "collection 'items.r1'")
    (record,) = caplog.records
    message = record.getMessage()
    assert record.levelno == logging.WARNING
    assert str(tmp_path / "bundles" / "b") in message and "collection 'items.r1'" in message
    assert "not MS_BUNDLE_DIR bundles/a" in message
