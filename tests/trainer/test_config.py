"""TrainConfig, the one settings object of a training run: values merge from a JSON/YAML file and the command line
(which wins), the objective's defaults are filled in, and a mistake names the option to fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metricsearch.core.errors import TrainerError
from metricsearch.trainer.config import TrainConfig, build_config


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


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


def test_title_variants_are_a_metricbert_option():
    assert TrainConfig(out="o", objective="metricbert", catalog="c.csv").title_variants == 0.0
    with pytest.raises(ValueError, match="--title-variants applies to metricbert only"):
        TrainConfig(out="o", objective="recobert", catalog="c.csv", title_variants=0.5)
    with pytest.raises(ValueError):
        TrainConfig(out="o", objective="metricbert", catalog="c.csv", title_variants=1.5)


def test_pseudo_matches_train_metricbert_without_mlm_or_title_variants():
    config = TrainConfig(out="o", objective="metricbert", catalog="c.csv", pseudo_matches="bundles/b")
    assert (config.mlm_weight, config.mlm_warmup_steps, config.title_variants) == (0.0, 0, 0.0)
    with pytest.raises(ValueError, match="--pseudo-matches trains metricbert, not recobert"):
        TrainConfig(out="o", objective="recobert", catalog="c.csv", pseudo_matches="b")
    with pytest.raises(ValueError, match="without MLM"):
        TrainConfig(out="o", objective="metricbert", catalog="c.csv", pseudo_matches="b", mlm_weight=1.0)
    with pytest.raises(ValueError, match="--title-variants applies to a catalog's own titles"):
        TrainConfig(out="o", objective="metricbert", catalog="c.csv", pseudo_matches="b", title_variants=1.0)
