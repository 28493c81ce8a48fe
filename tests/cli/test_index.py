"""`metricsearch index` loads a catalog in-process or through a running service, reports what it wrote, and names
the bad line of a bad catalog (exit code 1)."""

from __future__ import annotations

import httpx


def test_index_in_process_then_through_http(run_cli, tiny_bundle, tmp_path, start_service, small_catalog):
    data = tmp_path / "data"
    first = run_cli("index", "--catalog", small_catalog, "--bundle", tiny_bundle, "--data-dir", data)
    assert first.returncode == 0, first.stderr
    assert "indexed 3, unchanged 0 of 3 items" in first.stdout

    service = start_service(tiny_bundle, data, MS_API_KEY="k")
    assert httpx.get(f"{service.url}/items/a").json()["metadata"] == {"brand": "acme"}
    again = run_cli("index", "--catalog", small_catalog, "--url", service.url, "--api-key", "k")
    assert again.returncode == 0, again.stderr
    assert "indexed 0, unchanged 3 of 3 items" in again.stdout
    refused = run_cli("index", "--catalog", small_catalog, "--url", service.url, "--api-key", "wrong")
    assert refused.returncode == 1 and "403" in refused.stderr


def test_index_names_the_bad_line(run_cli, tiny_bundle, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "title": "ok"}\n{"id": "2"}\n')
    result = run_cli("index", "--catalog", bad, "--bundle", tiny_bundle, "--data-dir", tmp_path / "d")
    assert result.returncode == 1 and "error: " in result.stderr and "bad.jsonl:2: missing title" in result.stderr
    assert "Traceback" not in result.stderr
