"""A run's curves are drawn from its log alone, with or without validation records."""

from __future__ import annotations

import json

from metricsearch.trainer.plots import plot_curves, read_log

PNG = b"\x89PNG\r\n\x1a\n"


def write_log(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "\n")  # a trailing blank line is skipped
    return path


def test_curves_of_a_run_with_and_without_validation(tmp_path):
    train = [
        {"kind": "train", "step": s, "loss": 1 / s, "parts": {"mlm": 0.5 / s}, "phase": "head-warmup" if s < 2 else ""}
        for s in range(1, 5)
    ]
    evals = [{"kind": "eval", "step": s, "metric": "mrr", "value": v} for s, v in ((2, 0.4), (4, 0.6))]
    log = write_log(tmp_path / "train_log.jsonl", train + evals)
    assert len(read_log(log)) == 6
    assert plot_curves(log, tmp_path / "curves.png", title="metricbert").read_bytes()[:8] == PNG

    unvalidated = write_log(tmp_path / "unvalidated.jsonl", train)
    assert plot_curves(unvalidated, tmp_path / "plain.png").read_bytes()[:8] == PNG
