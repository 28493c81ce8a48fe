"""The learning-rate schedule: transformers' linear warm-up and decay, held back for the MLM head's warm-up; the
run's summary line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import get_linear_schedule_with_warmup

from metricsearch.trainer.loop import TrainResult, lr_factors


def test_schedule_matches_transformers_and_waits_for_the_head_warmup():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    reference = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=3, num_training_steps=20)
    expected = []
    for _ in range(20):
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        reference.step()
    assert [lr_factors(s, head_warmup=0, warmup=3, total=20)[0] for s in range(20)] == pytest.approx(expected)

    shifted = [lr_factors(s, head_warmup=5, warmup=3, total=25) for s in range(25)]
    assert all(encoder == 0.0 and head == 1.0 for encoder, head in shifted[:5])
    assert [encoder for encoder, _ in shifted[5:]] == pytest.approx(expected)
    assert shifted[-1][1] == pytest.approx(1 / 20)  # the head decays with the encoder after its warm-up


def test_summary_says_plainly_when_training_never_beat_the_start():
    def summary(best_value, best_step, steps=30):
        return TrainResult(steps, "mrr", best_value, best_step, 12.0, Path("run/best"), "max steps").summary("recobert")

    never = summary(0.507, 0)
    assert never.startswith("recobert: 30 steps in 12 s (max steps); training never beat the starting model")
    assert "(mrr 0.5070 at step 0), so best/ holds the starting model -> run/best" in never
    assert "best mrr 0.6000 at step 20 -> run/best" in summary(0.6, 20)
    assert "no validation" in summary(None, None)
