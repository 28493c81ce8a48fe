"""Code stems (the lexical analyzer v2) against v1 and the other stem rules it was chosen among: on each catalog pair,
the packaged model's lexical score alone and its fused rerank with each analyzer, the weights its rule (the best on
a pair's gold matches that loses nothing on STS-benchmark) chooses on one pair and scores on the other, in one run.
Prints the tables and rewrites EVALUATION.md's "Hybrid: code stems" section.

    .venv/bin/python -m bench.code_stems [--bundle DIR]

The analyzer is chosen on Abt-Buy alone (its MRR under the rule run on its own labels) and reported on
Walmart-Amazon. The rules other than v1 and v2 exist only here, as filters of v2's stems. About 4 minutes on 2
shared cores.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import numpy as np

from bench.data import CATALOG_PAIRS, ROOT, write_catalog_match
from bench.hybrid import RULE_PAIR, given_or_default, sts_data, weighting_spearman, weights_text
from bench.report import machine, write_section
from metricsearch.core import lexical
from metricsearch.core.fusion import zscores
from metricsearch.core.records import Item
from metricsearch.evaluation import BundleScorer, EvalData, evaluate, mrr, read_task, relevance_mask, weightings

SERVED = "v2: every leading run that makes a code (served)"
_all_stems = lexical._stems


def _longer(n: int) -> Callable[[list[str]], list[str]]:
    return lambda terms: [stem for stem in _all_stems(terms) if len(stem) >= n]


VARIANTS: dict[str, Callable[[list[str]], list[str]]] = {
    "v1: no stems": lambda terms: [],
    SERVED: _all_stems,
    "stems of 3 characters or more": _longer(3),
    "stems of 4 characters or more": _longer(4),
}
"""Each rule as the stems it gives a word's terms (core/lexical._stems)."""


class Prepared:
    """A task's dense side, encoded once; its lexical components and z-scores under any analyzer."""

    def __init__(self, scorer: BundleScorer, data: EvalData) -> None:
        self.scorer, self.data = scorer, data
        self.queries, self.candidates, _ = scorer.prepare(data)

    def zscores(self) -> dict[str, np.ndarray]:
        matrices = self.scorer.lexical_matrices(self.data.queries, self.data.candidates, self.candidates.present)
        components = self.scorer.components(self.queries, self.candidates, matrices)
        return zscores(components, self.scorer.stats(self.data.candidates, self.candidates))


def terms_an_item(items: list[Item]) -> float:
    return float(np.mean([len(lexical.analyze(f"{item.title}\n{item.description}")) for item in items]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, help="the bundle ranked (default: the packaged model, exported)")
    parser.add_argument("--report", type=Path, default=ROOT / "EVALUATION.md")
    args = parser.parse_args()
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="code-stems-"))
    try:
        bundle = given_or_default(args.bundle, workdir)
        scorer = BundleScorer(bundle)
        if scorer.lexical is None or not scorer.lexical.stems:
            raise SystemExit(f"{bundle}: its analyzer has no stems to vary: export it with this version's CLI")
        tasks = {}
        for pair, read in CATALOG_PAIRS.items():
            left, right, gold = read()
            tasks[pair] = Prepared(
                scorer, read_task("catalog-match", write_catalog_match(left, right, gold, workdir / pair))
            )
        sts = Prepared(scorer, sts_data(workdir))
        floor = evaluate(sts.data, BundleScorer(bundle, "mean")).metrics["Spearman"]
        fusion = scorer.rerank.fusion
        grid = weightings(list(fusion))
        results: dict[str, dict] = {}
        for variant, stems in VARIANTS.items():
            with mock.patch.object(lexical, "_stems", stems):
                spearman = weighting_spearman(sts.zscores(), sts.data.gold)
                admissible = [w for w in grid if spearman(w) >= floor]
                row: dict = {"admissible": len(admissible)}
                for pair, task in tasks.items():
                    z = task.zscores()
                    relevant = relevance_mask(task.data.relevant, len(task.data.candidates))
                    everyone = np.ones_like(relevant)
                    row[pair] = {
                        "terms": terms_an_item(task.data.candidates),
                        "lexical": mrr(z, {"lexical_text": 1.0}, relevant, everyone),
                        "default": mrr(z, fusion, relevant, everyone),
                        "grid": np.array([mrr(z, w, relevant, everyone) for w in admissible]),
                    }
                row["weights"] = {pair: admissible[int(np.argmax(row[pair]["grid"]))] for pair in tasks}
                results[variant] = row
            print(variant, {p: (row[p]["lexical"], row[p]["default"]) for p in tasks}, row["weights"], flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    pairs = list(CATALOG_PAIRS)
    other = next(p for p in pairs if p != RULE_PAIR)

    def under_rule(variant: str, chosen_on: str, scored_on: str) -> float:
        row = results[variant]
        return float(row[scored_on]["grid"][int(np.argmax(row[chosen_on]["grid"]))])

    chosen = max(VARIANTS, key=lambda v: under_rule(v, RULE_PAIR, RULE_PAIR))
    lines = [
        "| analyzer | "
        + " | ".join(f"{p}: terms an item | lexical alone | fused, bundle's weights" for p in pairs)
        + " |",
        "|---|" + "---:|" * (3 * len(pairs)),
    ]
    rule_lines = [
        f"| analyzer | rule on {RULE_PAIR}'s labels: weights | {RULE_PAIR} (in sample) | {other} "
        f"| rule on {other}'s labels: weights | {RULE_PAIR} | {other} (in sample) |",
        "|---|---|---:|---:|---|---:|---:|",
    ]
    for variant, row in results.items():
        cells = [f"{row[p]['terms']:.1f} | {row[p]['lexical']:.4f} | {row[p]['default']:.4f}" for p in pairs]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
        rule_lines.append(
            f"| {variant} | {weights_text(row['weights'][RULE_PAIR])} "
            f"| {under_rule(variant, RULE_PAIR, RULE_PAIR):.4f} | {under_rule(variant, RULE_PAIR, other):.4f} "
            f"| {weights_text(row['weights'][other])} "
            f"| {under_rule(variant, other, RULE_PAIR):.4f} | {under_rule(variant, other, other):.4f} |"
        )
    table, rule_table = "\n".join(lines), "\n".join(rule_lines)
    verdict = (
        f"Chosen on {RULE_PAIR} (its MRR under the rule run on its own labels): **{chosen}**; on {other}, which chose "
        f"nothing, it scores {under_rule(chosen, RULE_PAIR, other):.4f} with those weights, against "
        f"{under_rule('v1: no stems', RULE_PAIR, other):.4f} for v1."
    )
    print(table, rule_table, verdict, sep="\n\n")
    minutes = (time.perf_counter() - started) / 60
    shown = f" --bundle {args.bundle}" if args.bundle else ""
    body = f"""Command: `.venv/bin/python -m bench.code_stems{shown}` ({minutes:.0f} min on {machine()}, CPU only,
shared). Bundle: {"the packaged model" if args.bundle is None else args.bundle}, in process as in "Hybrid" (each left
item ranks every right item of its pair, ties pessimistic, idf and statistics over the right items).

Analyzer v2 (metricsearch/core/lexical.py) adds to each code (a term of letters and digits, or of five digits or
more) its stems: its leading runs of letters and digits, where they make a code ("kdl40v" and "kdl40v5100" of
"kdl40v5100b"). Shops append colour, region and pack suffixes to one model number ("lw1002w", "f2e9142-wht-apl");
the stem is what both listings share. The other rows keep only the longer stems; v1 has none.

{table}

The rule that chose the default weights (the grid's best on a pair's gold matches among the weightings that keep
STS-benchmark's Spearman at the encoder's cosine or above), run with each analyzer on {RULE_PAIR}'s labels and scored on
{other} too, and run on {other}'s labels instead. Here idf and statistics are over the right items, as in the rows
above; `metricsearch tune --pairs` (bench.hybrid's rule) takes them over both shops' items, so its choice can differ.

{rule_table}

{verdict}
"""
    write_section(args.report, "Hybrid: code stems", body)
    print(f"code stems bench done in {minutes:.1f} min; {args.report.name} section 'Hybrid: code stems' written")


if __name__ == "__main__":
    main()
