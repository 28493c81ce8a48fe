"""The `metricsearch` command: usage errors exit 2 and runtime failures 1, each naming what to fix; every option is
explained and its choices listed; `serve` and `index` never import torch; `index` loads catalogs in-process or over
HTTP."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import typer.main

from metricsearch import cli
from metricsearch.core.fusion import CATALOG_FUSION, CATALOG_FUSION_RULE


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # A wide terminal keeps typer's boxed usage errors on one line, so messages can be matched whole.
    return subprocess.run(
        [sys.executable, "-m", "metricsearch.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "400", **(env or {})},
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
    assert result.returncode == 1 and result.stderr.startswith("error: ")
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
    loaded = run_cli("index", "--catalog", str(catalog), "--bundle", str(tiny_bundle), "--data-dir", str(data))
    assert loaded.returncode == 0, loaded.stderr
    title_only = _variant(tiny_bundle, tmp_path, name="tiny-title-only", fields=[{"name": "title", "weight": 1.0}])
    result = run_cli("serve", "--bundle", str(title_only), "--data-dir", str(data), "--port", "1")
    assert result.returncode == 1
    assert "tiny-bert" in result.stderr and "tiny-title-only" in result.stderr, result.stderr


def test_index_in_process_then_through_http(tiny_bundle, tmp_path, start_service):
    data = tmp_path / "data"
    catalog = _write_catalog(tmp_path / "c.csv")
    first = run_cli("index", "--catalog", str(catalog), "--bundle", str(tiny_bundle), "--data-dir", str(data))
    assert first.returncode == 0, first.stderr
    assert "indexed 3, unchanged 0 of 3 items" in first.stdout

    service = start_service(tiny_bundle, data, MS_API_KEY="k")
    assert httpx.get(f"{service.url}/items/a").json()["metadata"] == {"brand": "acme"}
    again = run_cli("index", "--catalog", str(catalog), "--url", service.url, "--api-key", "k")
    assert again.returncode == 0, again.stderr
    assert "indexed 0, unchanged 3 of 3 items" in again.stdout
    refused = run_cli("index", "--catalog", str(catalog), "--url", service.url, "--api-key", "wrong")
    assert refused.returncode == 1 and "403" in refused.stderr


def test_index_names_the_bad_line(tiny_bundle, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "title": "ok"}\n{"id": "2"}\n')
    result = run_cli("index", "--catalog", str(bad), "--bundle", str(tiny_bundle), "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 1 and "error: " in result.stderr and "bad.jsonl:2: missing title" in result.stderr
    assert "Traceback" not in result.stderr


def test_export_refuses_to_overwrite(tiny_bundle):
    result = run_cli("export", "--bundle", str(tiny_bundle))
    assert result.returncode == 1 and "choose another --bundle or pass --overwrite" in result.stderr


def test_export_writes_the_named_fusion_weights(tiny_bundle, tmp_path):
    """`--fusion catalog` gives any model the weights a catalog-trained bundle starts from; unset, a model other than
    the packaged one gets none."""
    model = tiny_bundle.parent / "model"
    named = run_cli("export", "--model", str(model), "--bundle", str(tmp_path / "catalog"), "--fusion", "catalog")
    assert named.returncode == 0, named.stderr
    fusion = json.loads((tmp_path / "catalog" / "bundle.json").read_text())["fusion"]
    assert fusion == {"weights": CATALOG_FUSION, "chosen_by": CATALOG_FUSION_RULE}
    unset = run_cli("export", "--model", str(model), "--bundle", str(tmp_path / "unset"))
    assert unset.returncode == 0 and json.loads((tmp_path / "unset" / "bundle.json").read_text())["fusion"] is None
    wrong = run_cli("export", "--model", str(model), "--bundle", str(tmp_path / "x"), "--fusion", "lexical")
    assert wrong.returncode == 2 and "'lexical' is not one of 'default', 'catalog'" in wrong.stderr


def test_version_is_the_installed_distribution_s():
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout == f"metricsearch {importlib.metadata.version('metricsearch')}\n"


def test_usage_errors_exit_2_and_name_the_option(tmp_path):
    for args, message in [
        (["index", "some.csv"], "Missing option '--catalog'"),  # an option now, as in train and export
        (["export", "--bundle", str(tmp_path / "b"), "--precision", "fp64"], "'fp64' is not one of 'fp32'"),
        (["evaluate", "--task", "halves"], "--task and --data go together"),
        (
            ["evaluate", "--task", "pairs", "--data", "p.csv", "--baseline", "word2vec"],
            "'word2vec' is not one of 'tfidf'",
        ),
        (["serve", "--data-dir", str(tmp_path / "d"), "--workers", "2"], "2 workers need a Qdrant server"),
    ]:
        result = run_cli(*args, env={"MS_QDRANT_URL": ""})
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
    assert not (tmp_path / "b").exists() and not (tmp_path / "d").exists()
    bad_setting = run_cli("serve", env={"MS_PORT": "eighty"})
    assert bad_setting.returncode == 2 and "setting port" in bad_setting.stderr
    assert "Traceback" not in bad_setting.stderr


def test_every_option_is_explained_and_choice_options_list_their_choices():
    def commands(group):
        for command in group.commands.values():
            yield from commands(command) if hasattr(command, "commands") else [command]

    for command in commands(typer.main.get_command(cli.app)):
        assert command.help, command.name
        for param in command.params:
            assert param.help, f"{command.name} {param.name}"
    export_help = run_cli("export", "--help").stdout
    assert "fp32|fp16|bf16|int8" in export_help and "mean|cov|svd" in export_help
    assert "angular|frobenius|recobert" in export_help


def test_choices_are_those_of_the_modules_that_define_them():
    """Choices the CLI cannot import without torch or scipy at startup are restated there; they must not drift."""
    from metricsearch.core.bundle import METRICS_OF_POOLING
    from metricsearch.evaluation.datasets import TASKS
    from metricsearch.evaluation.scorers import BASELINES, INFERENCES
    from metricsearch.export import PRECISIONS

    assert [p.value for p in cli.Pooling] == list(METRICS_OF_POOLING)
    assert {p.value for p in cli.Precision} == set(PRECISIONS)
    assert [t.value for t in cli.Task] == list(TASKS)
    assert [i.value for i in cli.Inference] == list(INFERENCES)
    assert [b.value for b in cli.Baseline] == list(BASELINES)


def test_serve_and_index_never_import_torch(tiny_bundle, tmp_path):
    catalog = _write_catalog(tmp_path / "c.csv")
    code = f"""
import sys
from metricsearch.cli import app
index = ["index", "--catalog", {str(catalog)!r}, "--bundle", {str(tiny_bundle)!r}, "--data-dir", {str(tmp_path)!r}]
runs = [["--help"], ["serve", "--help"], ["index", "--help"], ["snapshot", "--help"], index]
for args in runs:
    try:
        app(args, prog_name="metricsearch")
    except SystemExit as exit:
        assert exit.code == 0, (args, exit.code)
print(sorted({{"torch", "transformers", "scipy", "metricsearch.trainer", "metricsearch.export"}} & set(sys.modules)))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "indexed 3, unchanged 0 of 3 items" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "[]"
