"""Offline evaluation: task datasets, the models compared (bundles scored with the core's own rerank, a running
service over HTTP, baselines) and the reports; `metricsearch evaluate` and bench/quality.py use it."""

from metricsearch.evaluation.adaptation import adapted_weights, agreement_of, measure_agreement
from metricsearch.evaluation.datasets import EvalData, read_task, split_halves
from metricsearch.evaluation.harness import ModelResult, evaluate
from metricsearch.evaluation.report import compare_tables, describe, load_run, markdown_table, plot_runs, write_run
from metricsearch.evaluation.scorers import (
    BundleScorer,
    HttpScorer,
    LdaScorer,
    LexicalScorer,
    Scorer,
    TfidfScorer,
    baseline_scorers,
    lexical_matrix,
    whole_text,
)
from metricsearch.evaluation.tuning import (
    PSEUDO_MARGIN,
    PSEUDO_QUERIES,
    WEIGHT_GRID,
    Tuned,
    agreed_best,
    mrr,
    relevance_mask,
    self_supervised,
    signal_scorer,
    tune,
    weightings,
)

__all__ = [
    "PSEUDO_MARGIN",
    "PSEUDO_QUERIES",
    "WEIGHT_GRID",
    "BundleScorer",
    "EvalData",
    "HttpScorer",
    "LdaScorer",
    "LexicalScorer",
    "ModelResult",
    "Scorer",
    "TfidfScorer",
    "Tuned",
    "adapted_weights",
    "agreed_best",
    "agreement_of",
    "baseline_scorers",
    "compare_tables",
    "describe",
    "evaluate",
    "lexical_matrix",
    "load_run",
    "markdown_table",
    "measure_agreement",
    "mrr",
    "plot_runs",
    "read_task",
    "relevance_mask",
    "self_supervised",
    "signal_scorer",
    "split_halves",
    "tune",
    "weightings",
    "whole_text",
    "write_run",
]
