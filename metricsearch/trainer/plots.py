"""The loss and validation curves of a run, drawn from its `train_log.jsonl` (so a resumed run's plot shows the
whole history). Matplotlib's Agg canvas is used directly: no pyplot global state, no display needed."""

from __future__ import annotations

import json
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def read_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def plot_curves(log_path: Path, png_path: Path, *, title: str = "") -> Path:
    """Training loss (total and each term) and the validation metric against the step, side by side."""
    records = read_log(log_path)
    train = [r for r in records if r.get("kind") == "train"]
    evals = [r for r in records if r.get("kind") == "eval"]

    figure = Figure(figsize=(11, 4), layout="constrained")
    FigureCanvasAgg(figure)
    loss_axes, eval_axes = figure.subplots(1, 2)
    steps = [r["step"] for r in train]
    terms = sorted({k for r in train for k in r.get("parts", {})})
    loss_axes.plot(steps, [r["loss"] for r in train], label="loss", linewidth=1.5)
    for term in terms:
        loss_axes.plot(steps, [r["parts"].get(term) for r in train], label=term, linewidth=1, alpha=0.8)
    warmups = [r["step"] for r in train if r.get("phase") == "head-warmup"]
    if warmups:
        loss_axes.axvspan(0, max(warmups), color="grey", alpha=0.15, label="MLM head warm-up")
    loss_axes.set(xlabel="step", ylabel="training loss", title="training loss")
    loss_axes.legend(fontsize="small")

    if evals:
        metric = evals[0]["metric"]
        eval_axes.plot([r["step"] for r in evals], [r["value"] for r in evals], marker="o", label=metric)
        best = max(evals, key=lambda r: r["value"])
        eval_axes.scatter([best["step"]], [best["value"]], color="red", zorder=3, label=f"best {best['value']:.4f}")
        eval_axes.set(xlabel="step", ylabel=metric, title=f"validation {metric} (held out)")
        eval_axes.legend(fontsize="small")
    else:
        eval_axes.set(title="no validation (val_fraction 0)")
    if title:
        figure.suptitle(title)
    figure.savefig(png_path, dpi=100)
    return Path(png_path)
