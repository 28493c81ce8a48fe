"""A training run end to end on a tiny BERT: what a run writes, that its checkpoint exports to a bundle the service
encodes with the trained model's vectors, reproducibility, resume, early stopping and the time budget."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from metricsearch.core.bundle import load_bundle
from metricsearch.core.errors import TrainerError
from metricsearch.encoder import Encoder
from metricsearch.export.onnx_export import export_bundle
from metricsearch.trainer.config import build_config
from metricsearch.trainer.loop import Loop
from metricsearch.trainer.train import train
from tests.tiny_model import CORPUS, build_tiny_model


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("loop")
    catalog = root / "catalog.csv"
    with catalog.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "title", "description"])
        for i, text in enumerate(CORPUS):
            writer.writerow([f"item-{i}", " ".join(text.split()[-3:]), text])
    pairs = root / "pairs.jsonl"
    with pairs.open("w") as f:
        for i, text in enumerate(CORPUS):
            f.write(json.dumps({"text_a": text, "text_b": text[: len(text) // 2], "score": 4 + i % 2}) + "\n")
            f.write(json.dumps({"text_a": text, "text_b": CORPUS[(i + 9) % len(CORPUS)], "score": i % 2}) + "\n")
    triplets = root / "triplets.csv"
    with triplets.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["anchor", "positive", "negative"])
        for i, text in enumerate(CORPUS):
            writer.writerow([" ".join(text.split()[:3]), text, CORPUS[(i + 5) % len(CORPUS)]])
    return {"catalog": catalog, "pairs": pairs, "triplets": triplets, "base": build_tiny_model(root / "tiny")}


def run(data: dict[str, Path], out: Path, **options):
    """A short metricbert run unless told otherwise: 24 training items in batches of 8, 8 held out."""
    defaults = {
        "objective": "metricbert",
        "base": data["base"],
        "out": out,
        "batch_size": 8,
        "lr": 1e-3,
        "max_steps": 6,
        "mlm_warmup_steps": 2,
        "eval_every": 2,
        "log_every": 1,
        "val_fraction": 0.25,
    }
    options = defaults | options
    if options["objective"] in ("metricbert", "recobert"):
        options.setdefault("catalog", data["catalog"])
    elif options["objective"] == "sbert-siamese":
        options |= {"pairs": data["pairs"], "mlm_warmup_steps": None}
    else:
        options |= {"triplets": data["triplets"], "mlm_warmup_steps": None}
    return train(build_config(options))


def records(out: Path, kind: str) -> list[dict]:
    lines = (out / "train_log.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def test_run_writes_checkpoints_log_and_curves_and_the_checkpoint_exports(data, tmp_path):
    out = tmp_path / "run"
    result = run(data, out)

    assert result.steps == 6 and result.stopped == "max steps" and result.metric == "mrr"
    assert result.best_dir == out / "best"
    assert (out / "best" / "modules.json").is_file()
    assert (out / "best" / "mlm_head" / "mlm_head.safetensors").is_file()
    training = json.loads((out / "best" / "training.json").read_text())
    assert training["objective"] == "metricbert" and training["training_data_digest"].startswith("sha256:")
    assert (out / "last" / "trainer_state.pt").is_file() and (out / "last" / "mlm_head").is_dir()
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    train_records = records(out, "train")
    assert [r["step"] for r in train_records] == [1, 2, 3, 4, 5, 6]
    assert [r["phase"] for r in train_records] == ["head-warmup"] * 2 + ["joint"] * 4
    assert {"triplet", "mlm"} == set(train_records[0]["parts"])
    rates = [r["lr"] for r in train_records]
    assert rates[:2] == [0.0, 0.0] and rates[2] == 1e-3  # frozen during the head's warm-up, then from the peak
    assert rates[2:] == sorted(rates[2:], reverse=True) and rates[-1] > 0  # linear decay
    assert [r["step"] for r in records(out, "eval")] == [0, 4, 6]  # step 2 is the end of the head-only warm-up
    assert records(out, "summary")[0]["best_step"] == result.best_step

    assert_served_like_trained(out / "best", tmp_path / "bundle")


def assert_served_like_trained(checkpoint: Path, bundle: Path) -> None:
    """The bundle exported from the checkpoint gives, through the service's encoder, the checkpoint's vectors."""
    export_bundle(checkpoint, bundle)
    texts = ["cast iron skillet", CORPUS[3], CORPUS[20] + " " + CORPUS[21]]
    served = Encoder(load_bundle(bundle)).encode(texts)
    trained = SentenceTransformer(str(checkpoint), device="cpu", local_files_only=True).encode(
        texts, normalize_embeddings=True
    )
    assert np.sum(served * trained, axis=1).min() >= 0.9999


def test_same_seed_same_losses_other_seed_other_losses(data, tmp_path):
    def losses(out, seed):
        run(data, out, seed=seed, mining="random", max_steps=4)
        return [(r["loss"], r["parts"]) for r in records(out, "train")]

    first = losses(tmp_path / "a", 5)
    assert first == losses(tmp_path / "b", 5)
    assert first != losses(tmp_path / "c", 6)


def test_resume_continues_from_the_saved_step_as_if_never_stopped(data, tmp_path, monkeypatch):
    options = {"max_steps": 8, "eval_every": 4}
    run(data, tmp_path / "whole", **options)
    whole = [r["loss"] for r in records(tmp_path / "whole", "train")]

    original = Loop._train_step

    def crash_at_step_6(self):
        if self.step == 5:
            raise RuntimeError("simulated crash")
        return original(self)

    monkeypatch.setattr(Loop, "_train_step", crash_at_step_6)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(data, tmp_path / "cut", **options)
    monkeypatch.setattr(Loop, "_train_step", original)
    assert torch.load(tmp_path / "cut" / "last" / "trainer_state.pt")["step"] == 4

    result = run(data, tmp_path / "cut", resume=True, **options)
    resumed = records(tmp_path / "cut", "train")
    assert result.steps == 8
    assert [r["step"] for r in resumed] == list(range(1, 9))  # the crashed run's step 5 is not logged twice
    assert [r["loss"] for r in resumed] == pytest.approx(whole, rel=1e-5)


def test_a_finished_run_is_not_overwritten(data, tmp_path):
    run(data, tmp_path / "run", max_steps=3)
    with pytest.raises(TrainerError, match="already holds a run"):
        run(data, tmp_path / "run", max_steps=3)
    with pytest.raises(TrainerError, match="nothing to resume"):
        run(data, tmp_path / "other", resume=True)


@pytest.mark.parametrize(
    ("objective", "metric"),
    [("recobert", "mrr"), ("sbert-siamese", "spearman"), ("sbert-triplet", "triplet_accuracy")],
)
def test_every_objective_trains_and_keeps_an_exportable_best(data, tmp_path, objective, metric):
    result = run(data, tmp_path / "run", objective=objective, max_steps=4)
    assert result.metric == metric and result.steps == 4
    evals = records(tmp_path / "run", "eval")
    assert evals[0]["step"] == 0 and all(r["metric"] == metric for r in evals)
    assert (tmp_path / "run" / "best" / "mlm_head").is_dir() == (objective == "recobert")
    assert_served_like_trained(result.best_dir, tmp_path / "bundle")


def test_early_stopping_keeps_the_best_checkpoint(data, tmp_path):
    result = run(data, tmp_path / "run", lr=1e-12, mlm_weight=0, max_steps=50, eval_every=1, patience=2)
    assert result.stopped == "early stopping"
    assert result.steps == 2 and result.best_step == 0


def test_a_time_budget_alone_plans_the_steps_and_stops_within_it(data, tmp_path):
    # 8 s: the budget counts from the start, and under `make test`'s parallel load loading and the first evaluation
    # once took enough of 4 s to leave one step (a clear TrainerError, not a run).
    budget = 8
    options = {"max_steps": None, "time_budget_s": budget, "mlm_warmup_steps": 1, "eval_every": 5, "patience": 1000}
    result = run(data, tmp_path / "run", **options)
    planned = records(tmp_path / "run", "budget")[0]["total_steps"]
    assert planned > 1 and result.steps <= planned
    assert result.stopped in ("max steps", "time budget")
    assert result.seconds < budget + 2  # the final evaluation and checkpoint were budgeted for
    assert (result.best_dir / "modules.json").is_file()


def test_without_validation_best_is_the_final_model(data, tmp_path):
    result = run(data, tmp_path / "run", val_fraction=0, max_steps=3)
    assert result.metric is None and result.best_step == 3
    assert records(tmp_path / "run", "eval") == []
    assert (tmp_path / "run" / "best" / "modules.json").is_file()
