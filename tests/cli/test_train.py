"""`metricsearch train` as a user runs it: option mistakes stop with exit code 2 and bad data files with 1, each
with a message naming the fix; its options are TrainConfig's fields under the names users type; train -> export gives
a bundle the service loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metricsearch.cli.train import full_command
from metricsearch.core.bundle import load_bundle
from metricsearch.core.fusion import CATALOG_FUSION, CATALOG_FUSION_RULE
from metricsearch.trainer import TrainConfig
from tests.tiny_model import CORPUS

# The options users type (docs/training.md, run scripts, --config keys): renaming a TrainConfig field renames one.
OPTIONS_IN_USE = (
    "objective",
    "out",
    "catalog",
    "pairs",
    "triplets",
    "base",
    "config",
    "seed",
    "max-steps",
    "epochs",
    "batch-size",
    "lr",
    "mlm-head-lr",
    "weight-decay",
    "warmup-ratio",
    "max-grad-norm",
    "max-seq-length",
    "time-budget-s",
    "bf16",
    "eval-every",
    "log-every",
    "patience",
    "val-fraction",
    "val-max",
    "mining",
    "loss",
    "distance",
    "title-variants",
    "margin",
    "similarity-weight",
    "mlm-weight",
    "mlm-probability",
    "mlm-warmup-steps",
    "siamese-distance",
    "triplet-distance",
    "pooling",
    "rank-k",
    "resume",
    "pseudo-matches",
    "bundle",
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
def test_option_mistakes_exit_2_before_any_model_loads(run_cli, tmp_path, args, message):
    result = run_cli("train", *args, "--out", tmp_path / "run")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_an_empty_catalog_is_a_runtime_failure_exit_1(run_cli, tmp_path):
    catalog = write(tmp_path / "catalog.csv", "id,title,description\n")
    result = run_cli("train", "--objective", "metricbert", "--catalog", catalog, "--out", tmp_path / "run")
    assert result.returncode == 1
    assert f"error: {catalog}: has no items" in result.stderr and "Traceback" not in result.stderr


def test_pairs_without_a_score_column_exit_1(run_cli, tmp_path):
    pairs = write(tmp_path / "pairs.csv", "text_a,text_b\na cat,a kitten\n")
    result = run_cli("train", "--objective", "sbert-siamese", "--pairs", pairs, "--out", tmp_path / "run")
    assert result.returncode == 1
    assert "header lacks column(s) score" in result.stderr and "Traceback" not in result.stderr


def test_train_options_are_train_config_s_fields_with_their_defaults_and_descriptions(run_cli):
    options = {param.name: param for param in full_command().params}
    assert {option.opts[0] for option in options.values()} == {f"--{name}" for name in OPTIONS_IN_USE}
    for name, field in TrainConfig.model_fields.items():
        assert options[name].help == field.description, name
        # A required field is unset on the command line, so the --config file may give it.
        assert options[name].default == (None if field.is_required() else field.default), name
    assert options["bf16"].secondary_opts == ["--no-bf16"]
    shown = run_cli("train", "--help")
    assert shown.returncode == 0 and "<hardest|random>" in shown.stdout and "[default: 0.15]" in shown.stdout


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


def test_train_then_export_gives_a_bundle_the_service_loads(run_cli, tmp_path):
    base, catalog = tiny_model_and_catalog(tmp_path)
    config = write(tmp_path / "train.json", json.dumps({"batch_size": 8, "val_fraction": 0.25, "mlm_warmup_steps": 1}))
    result = run_cli(
        "train", "--objective", "recobert", "--catalog", catalog, "--base", base, "--out", tmp_path / "run",
        "--config", config, "--max-steps", "3", "--eval-every", "2", "--no-bf16", "--bundle", tmp_path / "rb",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary, written = result.stdout.strip().splitlines()[-2:]
    assert summary.startswith("recobert: 3 steps") and "mrr" in summary and str(tmp_path / "run" / "best") in summary
    # The bundle is named after the run, not its checkpoint folder (best/), and says what ranks without fusion.
    manifest = load_bundle(tmp_path / "rb").manifest
    assert (manifest.name, manifest.metric, manifest.fusion) == ("run", "recobert", None)
    assert written == f"bundle written to {tmp_path / 'rb'} (no lexical fusion: RecoBERT's own score fusion ranks)"
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    # Options left at their default do not override the config file; those typed do.
    assert (saved["bf16"], saved["batch_size"], saved["val_fraction"], saved["max_steps"]) == (False, 8, 0.25, 3)

    exported = run_cli("export", "--model", tmp_path / "run" / "best", "--bundle", tmp_path / "bundle")
    assert exported.returncode == 0, exported.stderr
    assert load_bundle(tmp_path / "bundle").manifest.encoder.dim == 32


def test_train_with_bundle_exports_and_tunes_on_the_catalog(run_cli, tmp_path):
    base, catalog = tiny_model_and_catalog(tmp_path)
    taken = tmp_path / "taken"
    taken.mkdir()
    refused = run_cli(
        "train", "--objective", "metricbert", "--catalog", catalog, "--out", tmp_path / "r", "--bundle", taken
    )
    assert refused.returncode == 2 and "--bundle" in refused.stderr and "exists" in refused.stderr
    assert not (tmp_path / "r").exists()  # refused before any training

    result = run_cli(
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


def test_train_on_pseudo_matches_mines_them_with_the_bundle_then_trains(run_cli, tmp_path):
    base, _ = tiny_model_and_catalog(tmp_path)
    catalog = tmp_path / "two-shops.csv"
    rows = [f"l{i},{t.split(',')[0]},{t.replace(',', ' ')},left" for i, t in enumerate(CORPUS)]
    rows += [
        f"r{i},{' '.join(reversed(t.split(',')[0].split()))},{t.replace(',', ' ')},right" for i, t in enumerate(CORPUS)
    ]
    catalog.write_text("id,title,description,source\n" + "\n".join(rows) + "\n")
    miner = tmp_path / "miner"  # a bundle with fusion weights, which the trained bundle starts from
    exported = run_cli("export", "--model", base, "--bundle", miner, "--fusion", "default")
    assert exported.returncode == 0, exported.stderr
    result = run_cli(
        "train", "--objective", "metricbert", "--catalog", catalog, "--base", base, "--out", tmp_path / "run",
        "--pseudo-matches", miner, "--max-steps", "2", "--batch-size", "4", "--val-fraction", "0.25",
        "--no-bf16", "--bundle", tmp_path / "bundle",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    chosen_by = load_bundle(tmp_path / "bundle").manifest.fusion.chosen_by
    assert chosen_by.startswith("metricsearch tune, ") and load_bundle(miner).manifest.fusion.chosen_by in chosen_by
    mined = [line for line in result.stdout.splitlines() if line.startswith("pseudo-matches: ")]
    assert mined and f"of {len(CORPUS)} x {len(CORPUS)} items" in mined[0]
    triplets = [json.loads(line) for line in (tmp_path / "run" / "pseudo_matches.jsonl").read_text().splitlines()]
    assert triplets and set(triplets[0]) == {"anchor", "positive", "negative"}
    assert "triplet_accuracy" in result.stdout.strip().splitlines()[-2]  # held-out triplets validate the run

    refused = run_cli(
        "train", "--objective", "metricbert", "--catalog", tmp_path / "catalog.jsonl", "--out", tmp_path / "r2",
        "--pseudo-matches", miner,
    )  # fmt: skip
    assert refused.returncode == 1 and "has no source" in refused.stderr and "Traceback" not in refused.stderr
