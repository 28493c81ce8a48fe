"""What an evaluation run leaves behind: `results.json` (everything, ranks included, so runs can be compared
later), `results.md` (the table), and plots a person would rather look at than read (rank histogram and HR@k
curve; predicted vs gold for scored pairs). `--compare` reads several runs back and sets them side by side."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from metricsearch.core.errors import InvalidInputError
from metricsearch.evaluation.datasets import EvalData
from metricsearch.evaluation.harness import ModelResult

RANKING_COLUMNS = ("MPR", "MRR", "HR@1", "HR@10", "HR@100", "P@10", "NDCG@10")
PAIR_COLUMNS = ("Pearson", "Spearman")
RESULTS = "results.json"


@dataclass(frozen=True)
class Run:
    """A run read back from its folder."""

    name: str
    task: str
    summary: str
    models: list[dict]
    gold: list[float] | None = None  # pairs: the gold scores the predictions are plotted against

    @property
    def is_pairs(self) -> bool:
        return self.task == "pairs"


def describe(data: EvalData) -> str:
    if data.is_pairs:
        return f"{len(data.queries)} scored pairs from {data.source}; Pearson and Spearman of score vs gold"
    examples = (
        "each query counts once, by its best-ranked relevant item"
        if data.per == "query"
        else ("each (query, relevant item) pair counts once")
    )
    relevant = sum(len(r) for r in data.relevant)
    return (
        f"{len(data.queries)} queries ranking {len(data.candidates)} candidates ({relevant} relevant) from "
        f"{data.source}; ties pessimistic; {examples}"
    )


def markdown_table(models: Sequence[dict], pairs: bool, run_column: Sequence[str] | None = None) -> str:
    columns = PAIR_COLUMNS if pairs else RANKING_COLUMNS
    lead = ["run"] if run_column else []
    lines = [
        "| " + " | ".join([*lead, "model", *columns, "how"]) + " |",
        "|" + "---|" * (len(lead) + len(columns) + 2),
    ]
    for n, model in enumerate(models):
        values = [f"{model['metrics'][c]:.3f}" if c in model["metrics"] else "" for c in columns]
        cells = [*([run_column[n]] if run_column else []), model["model"], *values, model["how"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_run(out: Path, data: EvalData, results: Sequence[ModelResult], command: str) -> list[Path]:
    """Write results.json, results.md and the plots into `out`; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    models = [r.to_json() for r in results]
    summary = describe(data)
    payload = {
        "task": data.task,
        "data": data.source,
        "summary": summary,
        "command": command,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "models": models,
        "gold": data.gold.tolist() if data.is_pairs else None,
    }
    (out / RESULTS).write_text(json.dumps(payload, indent=1))
    table = markdown_table(models, data.is_pairs)
    (out / "results.md").write_text(f"# {data.task}\n\n{summary}.\n\nCommand: `{command}`\n\n{table}\n")
    run = Run(out.name, data.task, summary, models, payload["gold"])
    return [out / RESULTS, out / "results.md", *plot_runs([run], out)]


def load_run(folder: Path) -> Run:
    path = Path(folder) / RESULTS
    if not path.is_file():
        raise InvalidInputError(
            f"{folder}: no {RESULTS}; pass a folder written by `metricsearch evaluate --report-dir`"
        )
    try:
        payload = json.loads(path.read_text())
        return Run(Path(folder).name, payload["task"], payload["summary"], payload["models"], payload.get("gold"))
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise InvalidInputError(f"{path}: not a results file of this version ({exc})") from exc


def compare_tables(runs: Sequence[Run]) -> str:
    """One table for the ranking runs and one for the pair runs, a row per (run, model)."""
    parts = []
    for pairs in (False, True):
        chosen = [r for r in runs if r.is_pairs == pairs]
        if chosen:
            models = [m for r in chosen for m in r.models]
            names = [f"{r.name} ({r.task})" for r in chosen for _ in r.models]
            parts.append(markdown_table(models, pairs, names))
    return "\n\n".join(parts)


def plot_runs(runs: Sequence[Run], out: Path, prefix: str = "") -> list[Path]:
    """Rank histogram and HR@k curve of every ranking model, predicted-vs-gold scatter of every pair model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    several = len(runs) > 1
    ranking = [
        (f"{r.name}: {m['model']}" if several else m["model"], m) for r in runs if not r.is_pairs for m in r.models
    ]
    pairs = [
        (f"{r.name}: {m['model']}" if several else m["model"], m, r.gold) for r in runs if r.is_pairs for m in r.models
    ]
    written = []
    if ranking:
        top = max(max(m["n_candidates"]) for _, m in ranking)
        bins = np.unique(np.geomspace(1, top + 1, 40).astype(int))
        fig, ax = plt.subplots(figsize=(8, 5))
        for label, m in ranking:
            ax.hist(m["ranks"], bins=bins, histtype="step", linewidth=1.5, label=label)
        ax.set(xscale="log", xlabel="rank of the relevant item (1 = top, ties pessimistic)", ylabel="examples")
        ax.set_title("Where the relevant item lands")
        ax.legend(fontsize=7)
        written.append(_save(fig, out / f"{prefix}rank_histogram.png"))

        ks = np.unique(np.geomspace(1, top, 60).astype(int))
        fig, ax = plt.subplots(figsize=(8, 5))
        for label, m in ranking:
            ranks = np.asarray(m["ranks"])
            ax.plot(ks, [np.mean(ranks <= k) for k in ks], label=label)
        ax.set(xscale="log", xlabel="k", ylabel="HR@k", ylim=(0, 1.02), title="Hit ratio at k")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        written.append(_save(fig, out / f"{prefix}hr_at_k.png"))
    if pairs:
        fig, axes = plt.subplots(1, len(pairs), figsize=(4 * len(pairs), 4), squeeze=False)
        for ax, (label, m, gold) in zip(axes[0], pairs, strict=True):
            ax.scatter(m["predicted"], gold, s=3, alpha=0.4)
            ax.set(
                xlabel="predicted score", ylabel="gold score", title=f"{label}\nSpearman {m['metrics']['Spearman']:.3f}"
            )
            ax.title.set_fontsize(7)
        written.append(_save(fig, out / f"{prefix}pairs_scatter.png"))
    return written


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
