"""The `metricsearch` command as a whole: usage errors exit 2 and runtime failures 1, each naming what to fix; every
option is explained; `metricsearch --help`, `serve` and `index` never import torch."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import typer.main
from typer.testing import CliRunner

from metricsearch import cli
from metricsearch.cli.train import full_command


def test_version_is_the_installed_distribution_s(run_cli):
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout == f"metricsearch {importlib.metadata.version('metricsearch')}\n"


def test_usage_errors_exit_2_and_name_the_option(run_cli, tmp_path):
    for args, message in [
        (["index", "some.csv"], "Missing option '--catalog'"),  # an option, as in train and export
        (["export", "--bundle", str(tmp_path / "b"), "--precision", "fp64"], "'fp64' is not one of 'fp32'"),
        (["evaluate", "--task", "halves"], "--task and --data go together"),
        (
            ["evaluate", "--task", "pairs", "--data", "p.csv", "--baseline", "word2vec"],
            "'word2vec' is not one of 'tfidf'",
        ),
        (["serve", "--data-dir", str(tmp_path / "d"), "--workers", "2"], "2 workers need a Qdrant server"),
        (["train", "--objective", "simcse", "--catalog", "c.csv"], "'simcse' is not one of 'metricbert', 'recobert'"),
    ]:
        result = run_cli(*args, env={"MS_QDRANT_URL": ""})
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "b").exists() and not (tmp_path / "d").exists()


def test_every_command_and_option_is_explained():
    def commands(group, path=()):
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                yield from commands(command, (*path, name))
            else:
                yield (*path, name), command

    every = dict(commands(typer.main.get_command(cli.app)))
    assert every[("train",)].params == []  # the listing's stand-in: the options come with full_command()
    for path, command in [*every.items(), (("train",), full_command())]:
        assert command.help, path
        for param in command.params:
            assert param.help, f"{path} {param.name}"
    runner = CliRunner()
    for path in [(), *every]:
        shown = runner.invoke(cli.app, [*path, "--help"], prog_name="metricsearch", env={"COLUMNS": "200"})
        assert shown.exit_code == 0, (path, shown.output)
    assert "--max-seq-length" in runner.invoke(cli.app, ["train", "--help"]).output


def test_help_serve_and_index_never_import_torch(tiny_bundle, tmp_path, small_catalog):
    code = f"""
import sys
from metricsearch.cli import app
index = ["index", "--catalog", {str(small_catalog)!r}, "--bundle", {str(tiny_bundle)!r}]
index += ["--data-dir", {str(tmp_path)!r}]
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
