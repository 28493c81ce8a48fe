"""`metricsearch serve` refuses, before it binds, what it cannot serve, with exit code 1 and a message naming the
fix: a bundle of another schema version, a store built by another bundle; several workers on the embedded store are
a usage error (2)."""

from __future__ import annotations

from tests.bundles import bundle_variant


def test_serve_refuses_a_bundle_of_another_schema_version(run_cli, tiny_bundle, tmp_path):
    bad = bundle_variant(tiny_bundle, tmp_path / "variant", schema_version=99)
    result = run_cli("serve", "--bundle", bad, "--data-dir", tmp_path / "data", "--port", "1")
    assert result.returncode == 1 and result.stderr.startswith("error: ")
    assert "schema_version 99" in result.stderr and "re-export the bundle" in result.stderr


def test_serve_refuses_several_workers_on_the_embedded_store(run_cli, tiny_bundle, tmp_path):
    args = ["serve", "--bundle", tiny_bundle, "--data-dir", tmp_path / "data", "--port", "1"]
    result = run_cli(*args, "--workers", "2")
    assert result.returncode == 2
    assert "2 workers need a Qdrant server" in result.stderr and "MS_QDRANT_URL" in result.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was opened
    assert run_cli(*args, env={"MS_WORKERS": "3"}).returncode == 2


def test_serve_refuses_a_store_built_by_a_bundle_of_other_dimensions(run_cli, tiny_bundle, tmp_path, small_catalog):
    data = tmp_path / "data"
    loaded = run_cli("index", "--catalog", small_catalog, "--bundle", tiny_bundle, "--data-dir", data)
    assert loaded.returncode == 0, loaded.stderr
    title_only = bundle_variant(
        tiny_bundle, tmp_path / "variant", name="tiny-title-only", fields=[{"name": "title", "weight": 1.0}]
    )
    result = run_cli("serve", "--bundle", title_only, "--data-dir", data, "--port", "1")
    assert result.returncode == 1
    assert "tiny-bert" in result.stderr and "tiny-title-only" in result.stderr, result.stderr
