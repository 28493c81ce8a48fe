"""`metricsearch evaluate` restates the choices of metricsearch.evaluation (importing it at start-up would load
scipy); they must not drift. Its runs are tested with the evaluation (tests/evaluation)."""

from __future__ import annotations

from metricsearch.cli import evaluate
from metricsearch.evaluation.datasets import TASKS
from metricsearch.evaluation.scorers import BASELINES, INFERENCES


def test_choices_are_those_of_the_evaluation():
    assert [t.value for t in evaluate.Task] == list(TASKS)
    assert [i.value for i in evaluate.Inference] == list(INFERENCES)
    assert [b.value for b in evaluate.Baseline] == list(BASELINES)
