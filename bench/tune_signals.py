"""Label-free tuning checked against gold: on each catalog pair, the fusion weights that each self-supervised signal of
`metricsearch tune` prefers (pseudo-queries alone, code pairs alone, both agreeing) and their MRR on the pair's gold
matches, next to the bundle's own weights and the best weighting on gold (what labels would find). Prints a table
and rewrites EVALUATION.md's "Hybrid: label-free tuning" section.

    .venv/bin/python -m bench.tune_signals [--bundle DIR]

Gold is read here, after every signal has chosen, never by a signal. About 15 minutes on 2 shared cores.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from bench.data import CATALOG_PAIRS, ROOT
from bench.hybrid import given_or_default, weights_text
from bench.report import machine, write_section
from metricsearch.core.bundle import load_bundle
from metricsearch.core.fusion import DEFAULT_FUSION
from metricsearch.core.records import Item
from metricsearch.evaluation import (
    PSEUDO_MARGIN,
    PSEUDO_QUERIES,
    EvalData,
    agreed_best,
    self_supervised,
    signal_scorer,
    weightings,
)

AGREED = "both agreeing (what tune compares with its margin)"
RULES = {
    "pseudo-queries alone": ("pseudo-queries",),
    "code pairs alone": ("code pairs",),
    AGREED: ("pseudo-queries", "code pairs"),
}


def with_gold(data: EvalData, signals: dict[str, slice], left: list[int], gold: dict[int, list[int]]):
    """The self-supervised queries plus each left item with gold matches (by id, among the items that are no left
    item), as one dataset scored once; the gold slice and every query's excluded candidates."""
    asked = sorted(gold)
    combined = EvalData(
        data.task,
        data.source,
        data.queries + [data.candidates[q] for q in asked],
        data.candidates,
        data.relevant + [gold[q] for q in asked],
        data.own_index + asked,
    )
    exclude = [[] if own is None else [own] for own in data.own_index] + [left] * len(asked)
    return combined, {**signals, "gold": slice(len(data.queries), len(combined.queries))}, exclude


def pair_rows(bundle: Path, pair: str) -> tuple[dict[str, str], dict[str, int], str]:
    """The table's cells for one pair, each signal's query count, and what `tune` does there (a sentence)."""
    left_products, right_products, gold_ids = CATALOG_PAIRS[pair]()
    items = [Item(p.id, p.title, p.description) for p in left_products + right_products]
    position = {item.id: n for n, item in enumerate(items)}
    left = sorted(position[p.id] for p in left_products)
    gold = {position[a]: sorted(position[b] for b in bs) for a, bs in gold_ids.items() if a in position}
    data, signals = self_supervised(items, PSEUDO_QUERIES, 13, pair)
    data, signals, exclude = with_gold(data, signals, left, gold)
    names, per_signal = signal_scorer(bundle, data, signals, exclude)
    fusion = load_bundle(bundle).manifest.fusion
    current = {n: w for n, w in (fusion.weights if fusion else DEFAULT_FUSION).items() if n in names and w > 0}
    before = per_signal(current)
    scored = [(per_signal(w), w) for w in weightings(names)]
    best_gold = max(scored, key=lambda pair_scored: pair_scored[0]["gold"])
    cells = {
        "bundle's weights": f"{before['gold']:.3f}",
        "best weighting on gold (labels)": f"{best_gold[0]['gold']:.3f} ({weights_text(best_gold[1])})",
    }
    verdict = f"{pair}: fewer code pairs than tune needs, so the pseudo-queries alone decide"
    for label, used in RULES.items():
        if not all(signal in signals for signal in used):
            cells[label] = "no code pairs"
            continue
        result, weights, gain = agreed_best(scored, {signal: before[signal] for signal in used})
        cells[label] = f"{result['gold']:.3f} ({weights_text(weights)}; gain {gain:+.3f})"
        if label == AGREED:
            action = "replaces the weights" if gain >= PSEUDO_MARGIN else "keeps the bundle's weights"
            verdict = (
                f"{pair}: the signals agree on a gain of {gain:+.3f}, so tune {action}; the agreed weighting's gold "
                f"MRR is {result['gold'] - before['gold']:+.3f} against the bundle's weights"
            )
    sizes = {signal: rows.stop - rows.start for signal, rows in signals.items()}
    print(pair, sizes, cells, verdict, flush=True)
    return cells, sizes, verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, help="bundle to check (default: the packaged model, exported)")
    parser.add_argument("--report", type=Path, default=ROOT / "EVALUATION.md")
    args = parser.parse_args()
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="tune-signals-"))
    try:
        bundle = given_or_default(args.bundle, workdir)
        results = {pair: pair_rows(bundle, pair) for pair in CATALOG_PAIRS}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    pairs = list(CATALOG_PAIRS)
    labels = list(next(iter(results.values()))[0])
    lines = ["| weights | " + " | ".join(f"{p} gold MRR" for p in pairs) + " |", "|---|" + "---|" * len(pairs)]
    lines += [f"| {label} | " + " | ".join(results[p][0].get(label, "") for p in pairs) + " |" for label in labels]
    table = "\n".join(lines)
    print(table)
    sizes = "; ".join(
        f"{p}: {s['pseudo-queries']} pseudo-queries, {s.get('code pairs', 0)} code pairs, {s['gold']} gold queries"
        for p, (_, s, _) in results.items()
    )
    verdicts = "\n".join(f"- {verdict}" for _, _, verdict in results.values())
    minutes = (time.perf_counter() - started) / 60
    command = ".venv/bin/python -m bench.tune_signals" + (f" --bundle {args.bundle}" if args.bundle else "")
    body = f"""Command: `{command}` ({minutes:.0f} min on {machine()},
CPU only, shared). Bundle: {"the packaged model (default weights)" if args.bundle is None else args.bundle}.

Each self-supervised signal of `metricsearch tune` scores every weighting of the grid on the pair's own catalog (both
shops, no labels): pseudo-queries (title variants and half-descriptions, ranked as text) and code pairs (two items
that alone in the catalog share a model or part number of 4+ characters, one asked by id). Each rule picks the
weighting whose least gain over the bundle's weights, on the signals it uses, is largest ("gain"); the cell is that
weighting's MRR on the pair's gold matches (each left item among the right items, by id), read only afterwards.
`tune` writes the "both agreeing" weighting only when its gain reaches {PSEUDO_MARGIN}; otherwise it keeps the
bundle's weights. Queries: {sizes}.

{table}

{verdicts}

Pseudo-queries share their source's words and code pairs share a code by construction: each signal alone favours
the lexical evidence it was made from, which is why `tune` asks both to agree.
"""
    write_section(args.report, "Hybrid: label-free tuning", body)
    print(f"tune signals bench done in {minutes:.1f} min; EVALUATION.md section 'Hybrid: label-free tuning' written")


if __name__ == "__main__":
    main()
