"""`metricsearch train` as a user runs it: option mistakes stop with exit code 2 and bad data files with 1, each
with a message naming the fix; its options are TrainConfig's fields with TrainConfig's defaults and choices; options
merge from a config file and the command line, and train -> export gives a bundle the service loads."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import typing
from enum import Enum
from pathlib import Path

import pytest

from metricsearch import cli as cli_module
from metricsearch.core.bundle import load_bundle
from metricsearch.core.errors import TrainerError
from metricsearch.core.fusion import CATALOG_FUSION, CATALOG_FUSION_RULE
from metricsearch.trainer.config import OBJECTIVES, TrainConfig, build_config
from tests.tiny_model import CORPUS

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess:
    # A wide terminal keeps typer's boxed usage errors on one line, so messages can be matched whole.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "400"}
    return subprocess.run(
        [sys.executable, "-m", "metricsearch.cli", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--objective", "simcse", "--catalog", "c.csv"], "'simcse' is not one of 'metricbert', 'recobert'"),
        (["--objective", "sbert-siamese"], "sbert-siamese trains on --pairs FILE (text_a, text_b, score); none given"),
        (["--objective", "metricbert"], "metricbert trains on --catalog FILE"),
        (["--objective", "metricbert", "--catalog", "c.csv", "--mlm-weight", "-1"], "--mlm-weight"),
    ],
)
def test_option_mistakes_exit_2_before_any_model_loads(tmp_path, args, message):
    result = cli("train", *args, "--out", tmp_path / "run")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_an_empty_catalog_is_a_runtime_failure_exit_1(tmp_path):
    catalog = write(tmp_path / "catalog.csv", "id,title,description\n")
    result = cli("train", "--objective", "metricbert", "--catalog", catalog, "--out", tmp_path / "run")
    assert result.returncode == 1
    assert f"error: {catalog}: has no items" in result.stderr and "Traceback" not in result.stderr


def test_pairs_without_a_score_column_exit_1(tmp_path):
    pairs = write(tmp_path / "pairs.csv", "text_a,text_b\na cat,a kitten\n")
    result = cli("train", "--objective", "sbert-siamese", "--pairs", pairs, "--out", tmp_path / "run")
    assert result.returncode == 1
    assert "header lacks column(s) score" in result.stderr and "Traceback" not in result.stderr


def test_train_options_are_train_config_s_fields_defaults_and_choices():
    """The CLI cannot build its options from TrainConfig (importing it loads torch, which `serve` must not), so
    it restates them; this keeps each option's name, default and choices those of the model, and its help set."""
    hints = typing.get_type_hints(cli_module.train, include_extras=True)
    parameters = inspect.signature(cli_module.train).parameters
    assert set(parameters) - {"ctx", "config", "bundle"} == set(TrainConfig.model_fields)
    for name, field in TrainConfig.model_fields.items():
        assert parameters[name].default == (None if field.is_required() else field.default), name
        annotation, option = typing.get_args(hints[name])
        assert option.help, name
        choices = typing.get_args(field.annotation) if typing.get_origin(field.annotation) is typing.Literal else ()
        enums = [t for t in (annotation, *typing.get_args(annotation)) if isinstance(t, type) and issubclass(t, Enum)]
        assert [[member.value for member in enum] for enum in enums] == ([list(choices)] if choices else []), name
    assert [o.value for o in cli_module.Objective] == list(OBJECTIVES)


def test_config_file_values_apply_and_the_command_line_wins(tmp_path):
    config = write(
        tmp_path / "train.yaml",
        "objective: metricbert\ncatalog: c.csv\nout: run\nbatch-size: 32\nlr: 1.0e-4\nmining: random\n",
    )
    merged = build_config({"lr": 3e-5, "seed": None}, config)
    assert (merged.batch_size, merged.lr, merged.mining, merged.seed) == (32, 3e-5, "random", 42)
    assert (merged.margin, merged.mlm_weight, merged.mlm_warmup_steps, merged.epochs) == (0.1, 1.0, 100, 1)

    as_json = write(
        tmp_path / "train.json", json.dumps({"objective": "sbert-triplet", "triplets": "t.csv", "out": "o"})
    )
    assert build_config({}, as_json).margin == 1.0  # euclidean triplet margin for unit vectors
    with pytest.raises(TrainerError, match="--learning-rate: unknown option"):
        build_config({}, write(tmp_path / "typo.json", json.dumps({"learning_rate": 1e-4})))
    with pytest.raises(TrainerError, match="--mlm-weight applies to metricbert and recobert only"):
        build_config({"objective": "sbert-siamese", "pairs": "p.csv", "out": "o", "mlm_weight": 1.0})
    with pytest.raises(TrainerError, match="takes no --margin"):
        build_config({"objective": "metricbert", "catalog": "c", "out": "o", "loss": "cosine", "margin": 0.2})


def tiny_model_and_catalog(tmp_path: Path) -> tuple[Path, Path]:
    """A tiny BERT to start from and a catalog of CORPUS (title: the text up to its first comma)."""
    from tests.tiny_model import build_tiny_model

    catalog = tmp_path / "catalog.jsonl"
    catalog.write_text(
        "".join(
            json.dumps({"id": str(i), "title": t.split(",")[0], "description": t}) + "\n" for i, t in enumerate(CORPUS)
        )
    )
    return build_tiny_model(tmp_path / "tiny"), catalog


def test_train_then_export_gives_a_bundle_the_service_loads(tmp_path):
    base, catalog = tiny_model_and_catalog(tmp_path)
    config = write(tmp_path / "train.json", json.dumps({"batch_size": 8, "val_fraction": 0.25, "mlm_warmup_steps": 1}))
    result = cli(
        "train", "--objective", "recobert", "--catalog", catalog, "--base", base, "--out", tmp_path / "run",
        "--config", config, "--max-steps", "3", "--eval-every", "2", "--no-bf16",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = result.stdout.strip().splitlines()[-1]
    assert (
        summary.startswith("recobert: 3 steps") and "best mrr" in summary and str(tmp_path / "run" / "best") in summary
    )
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    # Options left at their default do not override the config file; those typed do.
    assert (saved["bf16"], saved["batch_size"], saved["val_fraction"], saved["max_steps"]) == (False, 8, 0.25, 3)

    exported = cli("export", "--model", tmp_path / "run" / "best", "--bundle", tmp_path / "bundle")
    assert exported.returncode == 0, exported.stderr
    assert load_bundle(tmp_path / "bundle").manifest.encoder.dim == 32


def test_train_with_bundle_exports_and_tunes_on_the_catalog(tmp_path):
    base, catalog = tiny_model_and_catalog(tmp_path)
    taken = tmp_path / "taken"
    taken.mkdir()
    refused = cli(
        "train", "--objective", "metricbert", "--catalog", catalog, "--out", tmp_path / "r", "--bundle", taken
    )
    assert refused.returncode == 2 and "--bundle" in refused.stderr and "exists" in refused.stderr
    assert not (tmp_path / "r").exists()  # refused before any training

    result = cli(
        "train", "--objective", "metricbert", "--catalog", catalog, "--base", base, "--out", tmp_path / "run",
        "--max-steps", "2", "--batch-size", "8", "--val-fraction", "0", "--mlm-weight", "0", "--no-bf16",
        "--bundle", tmp_path / "bundle",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    manifest = load_bundle(tmp_path / "bundle").manifest
    assert manifest.provenance.objective == "metricbert" and manifest.lexical is not None
    chosen_by = manifest.fusion.chosen_by if manifest.fusion else ""
    assert chosen_by.startswith("metricsearch tune, ") and "pseudo-queries" in chosen_by
    assert "kept" in chosen_by and CATALOG_FUSION_RULE in chosen_by  # the start a catalog-trained bundle gets
    assert manifest.fusion.weights == {name: w for name, w in CATALOG_FUSION.items() if w}
    assert "tuned on catalog.jsonl" in result.stdout.strip().splitlines()[-1]
