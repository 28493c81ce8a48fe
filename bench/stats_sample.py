"""How much the fused rerank's statistics sample moves quality. The service z-scores each component with its mean and
standard deviation over the pairs of STATS_SAMPLE stored items, the first by point id (core/fusion.py): which items
those are depends on the catalog's ids, so for a user it is a random draw. On each catalog pair this scores the left
items against the right ones (as EVALUATION.md "Hybrid" does, in process) with statistics from every pair of the
right items (exact), from the sample the evaluation takes, and from random samples of several sizes; and, without
labels, how far each draw's standard deviations stray from the exact ones. Prints the tables and rewrites
EVALUATION.md's "Hybrid: statistics sample" section.

    .venv/bin/python -m bench.stats_sample [--bundle DIR] [--draws 12] [--sizes 200 500 1000]

About 10 minutes on 2 shared cores (every pair of Walmart-Amazon's 5,245 right items is scored once).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.data import CATALOG_PAIRS, ROOT, write_catalog_match
from bench.hybrid import given_or_default, metrics
from bench.report import machine, write_section
from metricsearch.core.fusion import STATS_SAMPLE, ComponentStats, fuse, stats_sample
from metricsearch.evaluation import BundleScorer, EvalData, read_task


def pair_rows(bundle: Path, pair: str, sizes: list[int], draws: int, workdir: Path) -> tuple[dict[str, str], int]:
    """The table's cells for one pair (MRR with each source of statistics, and the label-free spread of the draws),
    and how many right items it has."""
    left, right, gold = CATALOG_PAIRS[pair]()
    data = read_task("catalog-match", write_catalog_match(left, right, gold, workdir / pair))
    scorer = BundleScorer(bundle)
    weights = scorer.rerank.fusion
    if weights is None:
        raise SystemExit(f"{bundle} has no fusion weights: its ranking reads no statistics")
    queries, candidates, lexical = scorer.prepare(data)
    asked = scorer.components(queries, candidates, lexical)
    n = len(data.candidates)
    # Every right item asked by id against every right item: the pairs any sample's statistics are taken from.
    nothing: list[list[int]] = [[] for _ in range(n)]
    among = EvalData(data.task, data.source, list(data.candidates), list(data.candidates), nothing, list(range(n)))
    block = scorer.components(*scorer.prepare(among))
    others = ~np.eye(n, dtype=bool)

    def stats_of(sample: np.ndarray) -> ComponentStats:
        pairs = others[np.ix_(sample, sample)]
        return ComponentStats.estimate({name: v[np.ix_(sample, sample)][pairs] for name, v in block.items()})

    def mrr(stats: ComponentStats) -> float:
        return metrics(fuse(asked, stats, weights), data.relevant)["MRR"]

    exact = stats_of(np.arange(n))
    evaluation = stats_of(np.asarray(stats_sample([item.id for item in data.candidates])))
    reference = scorer.stats(data.candidates, candidates)  # the evaluation's own estimate of the same sample
    if not all(
        np.isclose(reference.mean[c], evaluation.mean[c]) and np.isclose(reference.std[c], evaluation.std[c])
        for c in reference.std
    ):
        raise SystemExit("the pairs scored here disagree with the evaluation's own statistics: a bug in this bench")
    cells = {
        "every pair of the right items (exact)": f"{mrr(exact):.4f}",
        f"the evaluation's sample (first {STATS_SAMPLE} by point id)": f"{mrr(evaluation):.4f}",
    }
    rng = np.random.default_rng(13)
    for size in sizes:
        values, strays = [], []
        for _ in range(draws):
            stats = stats_of(rng.choice(n, min(size, n), replace=False))
            values.append(mrr(stats))
            strays.append(max(abs(stats.std[c] / exact.std[c] - 1) for c in weights if weights[c] > 0))
        cells[f"{draws} random samples of {size}: MRR mean (sd; least - most)"] = (
            f"{np.mean(values):.4f} ({np.std(values):.4f}; {min(values):.4f} - {max(values):.4f})"
        )
        cells[f"{draws} random samples of {size}: largest error of a weighted component's sd (median draw)"] = (
            f"{np.median(strays):.0%}"
        )
    print(pair, cells, flush=True)
    return cells, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, help="bundle to check (default: the packaged model, exported)")
    parser.add_argument("--draws", type=int, default=12, help="random samples per size")
    parser.add_argument("--sizes", type=int, nargs="+", default=[STATS_SAMPLE, 500, 1000], help="sample sizes")
    parser.add_argument("--report", type=Path, default=ROOT / "EVALUATION.md")
    args = parser.parse_args()
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="stats-sample-"))
    try:
        bundle = given_or_default(args.bundle, workdir)
        results = {pair: pair_rows(bundle, pair, args.sizes, args.draws, workdir) for pair in CATALOG_PAIRS}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    pairs = list(CATALOG_PAIRS)
    labels = list(next(iter(results.values()))[0])
    counts = ", ".join(f"{p} {n:,}" for p, (_, n) in results.items())
    lines = ["| statistics from | " + " | ".join(pairs) + " |", "|---|" + "---:|" * len(pairs)]
    lines += [f"| {label} | " + " | ".join(results[p][0][label] for p in pairs) + " |" for label in labels]
    table = "\n".join(lines)
    print(table)
    minutes = (time.perf_counter() - started) / 60
    command = f".venv/bin/python -m bench.stats_sample --draws {args.draws} --sizes {' '.join(map(str, args.sizes))}"
    command += f" --bundle {args.bundle}" if args.bundle else ""
    body = f"""Command: `{command}` ({minutes:.0f} min on {machine()}, CPU only,
shared). Bundle: {"the packaged model (default weights)" if args.bundle is None else args.bundle}.

The fused rerank z-scores each component with its mean and standard deviation over the pairs of {STATS_SAMPLE} stored
items, the first by point id (a hash of the item's id, so for a user a random draw that changes with the ids). Each
left item ranks every right item of its pair ({counts} right items), in process, as in "Hybrid"; only the statistics
change from row to row.
The "largest error" rows need no labels: how far a draw's standard deviation of a weighted component strays from the
catalog's exact one.

{table}
"""
    write_section(args.report, "Hybrid: statistics sample", body)
    print(f"stats sample bench done in {minutes:.1f} min; EVALUATION.md section 'Hybrid: statistics sample' written")


if __name__ == "__main__":
    main()
