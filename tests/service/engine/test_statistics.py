"""The catalog statistics a fused or RecoBERT rerank normalises by: estimated before the first request, estimated
anew in the background once the catalog grew while requests rank with the previous ones, kept when an estimate
fails (tiny bundle, embedded store)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from metricsearch.core.bundle import FUSION_COMPONENTS
from metricsearch.core.errors import StoreUnavailableError
from metricsearch.service.config import Settings
from metricsearch.service.lifecycle import Service
from tests.service.catalogs import catalog_items


def test_statistics_are_estimated_anew_in_the_background_after_the_catalog_grows(hybrid):
    first = hybrid.statistics.current()
    assert hybrid.statistics.current() is first and hybrid.statistics._refresh is None
    hybrid.indexer.index(catalog_items(200, seed=1)[120:])
    generation = hybrid.answers.generation
    assert hybrid.statistics.current() is first  # the request that finds them stale does not wait for the estimate
    hybrid.statistics.wait()
    renewed = hybrid.statistics.current()
    assert renewed is not first and renewed.pairs == 200 * 199 and set(renewed.mean) == set(FUSION_COMPONENTS)
    assert hybrid.answers.generation > generation  # answers cached meanwhile were ranked with the previous ones
    assert hybrid.statistics.current() is renewed


def test_a_failed_refresh_keeps_the_previous_statistics_and_the_next_request_tries_again(hybrid, monkeypatch, caplog):
    first = hybrid.statistics.current()
    hybrid.indexer.index(catalog_items(200, seed=1)[120:])
    count = hybrid.store.count

    def unreachable() -> int:
        raise StoreUnavailableError("the store is out of reach")

    monkeypatch.setattr(hybrid.store, "count", unreachable)
    assert hybrid.statistics.current() is first
    hybrid.statistics.wait()
    assert hybrid.statistics._stats is first and "not estimated anew" in caplog.text
    monkeypatch.setattr(hybrid.store, "count", count)
    assert hybrid.statistics.current() is first  # past the threshold still: this request starts another refresh
    hybrid.statistics.wait()
    assert hybrid.statistics.current() is not first


def test_warming_estimates_stale_statistics_now(hybrid):
    """Before a rollout's swap: the new catalog's statistics are made fresh, not left to a request."""
    first = hybrid.statistics.current()
    hybrid.indexer.index(catalog_items(200, seed=1)[120:])
    warmed = hybrid.statistics.warm()
    assert warmed is not first and warmed.pairs == 200 * 199 and hybrid.statistics.current() is warmed
    assert hybrid.statistics.warm() is warmed


def test_a_restarted_service_estimates_the_statistics_before_its_first_request(normalised, tmp_path):
    normalised.store.close()
    settings = Settings(bundle_dir=tmp_path / "bundle", data_dir=tmp_path / "data", candidates_min=10)
    restarted = Service(settings).live
    try:
        statistics = restarted.engine.statistics
        before_any_request = statistics._stats
        assert before_any_request is not None and before_any_request.pairs == 120 * 119
        restarted.engine.similar_to_item("i3", 10)
        assert statistics.current() is before_any_request
    finally:
        restarted.close()


def test_requests_during_a_statistics_refresh_rank_with_the_previous_ones_and_start_no_other(hybrid):
    first = hybrid.statistics.current()
    hybrid.indexer.index(catalog_items(200, seed=1)[120:])
    with ThreadPoolExecutor(1) as pool:
        with hybrid.statistics._lock:  # a refresh is under way
            during = [pool.submit(hybrid.statistics.current).result(timeout=10) for _ in range(3)]
            assert hybrid.statistics._refresh is None
        pool.submit(hybrid.statistics.current).result(timeout=10)
    hybrid.statistics.wait()
    assert during == [first] * 3 and hybrid.statistics.current() is not first
