"""The `metricsearch` command: startup errors name what to fix; `index` loads catalogs in-process or over HTTP."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "metricsearch.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _variant(bundle: Path, tmp_path: Path, **changes) -> Path:
    target = tmp_path / "variant"
    shutil.copytree(bundle, target)
    manifest = json.loads((target / "bundle.json").read_text())
    manifest.update(changes)
    (target / "bundle.json").write_text(json.dumps(manifest))
    return target


def _write_catalog(path: Path) -> Path:
    path.write_text(
        "id,title,description,brand\n"
        "a,red cotton shirt,a soft red shirt,acme\n"
        "b,blue cotton shirt,a soft blue shirt,acme\n"
        "c,leather boots,brown boots for winter,boota\n"
    )
    return path


def test_serve_refuses_a_bundle_of_another_schema_version(tiny_bundle, tmp_path):
    bad = _variant(tiny_bundle, tmp_path, schema_version=2)
    result = run_cli("serve", "--bundle", str(bad), "--data-dir", str(tmp_path / "data"), "--port", "1")
    assert result.returncode == 2
    assert "schema_version 2" in result.stderr and "reads version 1" in result.stderr


def test_serve_refuses_several_workers_on_the_embedded_store(tiny_bundle, tmp_path):
    args = ["serve", "--bundle", str(tiny_bundle), "--data-dir", str(tmp_path / "data"), "--port", "1"]
    result = run_cli(*args, "--workers", "2")
    assert result.returncode == 2
    assert "2 workers need a Qdrant server" in result.stderr and "MS_QDRANT_URL" in result.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was opened
    assert run_cli(*args, env={"MS_WORKERS": "3"}).returncode == 2


def test_serve_refuses_a_store_built_by_a_bundle_of_other_dimensions(tiny_bundle, tmp_path):
    data = tmp_path / "data"
    catalog = _write_catalog(tmp_path / "c.csv")
    loaded = run_cli("index", str(catalog), "--bundle", str(tiny_bundle), "--data-dir", str(data))
    assert loaded.returncode == 0, loaded.stderr
    title_only = _variant(tiny_bundle, tmp_path, name="tiny-title-only", fields=[{"name": "title", "weight": 1.0}])
    result = run_cli("serve", "--bundle", str(title_only), "--data-dir", str(data), "--port", "1")
    assert result.returncode == 2
    assert "tiny-bert" in result.stderr and "tiny-title-only" in result.stderr, result.stderr


def test_index_in_process_then_through_http(tiny_bundle, tmp_path, start_service):
    data = tmp_path / "data"
    catalog = _write_catalog(tmp_path / "c.csv")
    first = run_cli("index", str(catalog), "--bundle", str(tiny_bundle), "--data-dir", str(data))
    assert first.returncode == 0, first.stderr
    assert "indexed 3, unchanged 0 of 3 items" in first.stdout

    service = start_service(tiny_bundle, data, MS_API_KEY="k")
    assert httpx.get(f"{service.url}/items/a").json()["metadata"] == {"brand": "acme"}
    again = run_cli("index", str(catalog), "--url", service.url, "--api-key", "k")
    assert again.returncode == 0, again.stderr
    assert "indexed 0, unchanged 3 of 3 items" in again.stdout
    refused = run_cli("index", str(catalog), "--url", service.url, "--api-key", "wrong")
    assert refused.returncode == 2 and "403" in refused.stderr


def test_index_names_the_bad_line(tiny_bundle, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "title": "ok"}\n{"id": "2"}\n')
    result = run_cli("index", str(bad), "--bundle", str(tiny_bundle), "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 2 and "bad.jsonl:2: missing title" in result.stderr


def test_export_refuses_to_overwrite(tiny_bundle):
    result = run_cli("export", "--out", str(tiny_bundle))
    assert result.returncode == 2 and "overwrite" in result.stderr
