"""Hybrid quality: the packaged model's fused rerank (learned metric + lexical scores) on both catalog pairs, next to
TF-IDF, the lexical score alone and the off-the-shelf per-field angular rerank, measured in one run; the default
weights re-derived by their rule (`metricsearch tune --pairs` on Abt-Buy's gold matches), and the same rule run on
Walmart-Amazon's gold matches instead (the other direction: reported on Abt-Buy); each pair tuned on its own catalog;
and the default bundle served through HTTP (POST /index, POST /similar, k = 100). Then two checks of the default
bundle off its home ground: Abt titles as free-text queries over Buy (MRR@10, served) and STS-benchmark test
pairs (Spearman of the fused score). Prints the tables and rewrites EVALUATION.md's "Hybrid" section.

    .venv/bin/python -m bench.hybrid [--no-http] [--report EVALUATION.md]

Each left item ranks every right item of its pair; the best-ranked gold match counts (ties pessimistic). About 10
minutes on 2 shared cores (encoding 7,600 items several times; HTTP indexing).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from bench.data import CATALOG_PAIRS, DATA, ROOT, write_catalog, write_catalog_match
from bench.report import machine, write_section
from metricsearch.core.fusion import DEFAULT_FUSION, DEFAULT_FUSION_RULE, zscores
from metricsearch.core.ranking import pessimistic_rank, ranking_metrics
from metricsearch.core.records import Item
from metricsearch.evaluation import (
    PSEUDO_MARGIN,
    BundleScorer,
    EvalData,
    HttpScorer,
    LexicalScorer,
    TfidfScorer,
    evaluate,
    read_task,
    tune,
)
from metricsearch.service import ServiceProcess

CLI = [sys.executable, "-m", "metricsearch.cli"]
RULE_PAIR = "Abt-Buy"  # the pair whose labelled matches choose the default weights (Walmart-Amazon confirms them)


def metrics(scores: np.ndarray, relevant: list[list[int]]) -> dict[str, float]:
    ranks = [pessimistic_rank(scores[i], r) for i, r in enumerate(relevant)]
    return ranking_metrics(ranks, scores.shape[1], ks=(1, 10))


def weights_text(weights: dict[str, float]) -> str:
    return ", ".join(f"{name} {w:g}" for name, w in weights.items() if w > 0)


def export_default(bundle: Path) -> None:
    subprocess.run([*CLI, "export", "--bundle", str(bundle), "--overwrite"], check=True, capture_output=True)


def given_or_default(bundle: Path | None, workdir: Path) -> Path:
    """The bundle a bench was given, else the packaged model exported under workdir."""
    if bundle is not None:
        return bundle
    export_default(workdir / "default")
    return workdir / "default"


def mrr_at(scores: np.ndarray, relevant: list[list[int]], k: int) -> float:
    """Mean reciprocal rank with a match past rank k counting 0 (ties pessimistic)."""
    ranks = np.array([pessimistic_rank(scores[i], r) for i, r in enumerate(relevant)])
    return float(np.mean(np.where(ranks <= k, 1.0 / ranks, 0.0)))


def served(bundle: Path, data, workdir: Path, free_text: bool = False) -> np.ndarray:
    """The bundle behind a real service on 127.0.0.1: candidates indexed through /index, queries by text."""
    service = ServiceProcess(bundle, workdir / f"data-{time.monotonic_ns()}", {"MS_INTRA_OP_THREADS": "0"})
    service.start(timeout_s=180)
    try:
        scorer = HttpScorer(service.url, timeout_s=600, free_text=free_text)
        try:
            return scorer.scores(data)
        finally:
            scorer.close()
    finally:
        service.stop()


def free_text_rows(default: Path, folder: Path, workdir: Path, http: bool) -> dict[str, float]:
    """Abt titles alone as queries over the Buy catalog, MRR@10: a search box rather than a product page."""
    data = read_task("catalog-match", folder)
    titles = dataclasses.replace(data, queries=[Item(id=q.id, title=q.title) for q in data.queries])
    rows = {
        "TF-IDF (title query, title + description items, scikit-learn)": TfidfScorer().scores(titles),
        "lexical score alone (whole text)": LexicalScorer().scores(titles),
    }
    if http:
        rows['default bundle, served (`{"text": title}`, k = 100)'] = served(default, titles, workdir, free_text=True)
    return {label: mrr_at(scores, data.relevant, 10) for label, scores in rows.items()}


def sts_data(workdir: Path) -> EvalData:
    """STS-benchmark test pairs, each sentence an item with only a title."""
    path = workdir / "sts-test.csv"
    with (DATA / "stsbenchmark/sts-test.csv").open(encoding="utf-8") as f, path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["text_a", "text_b", "score"])
        for line in f:
            cells = line.rstrip("\n").split("\t")
            if len(cells) >= 7:
                writer.writerow([cells[5], cells[6], cells[4]])
    return read_task("pairs", path)


def sts_spearman(bundle: Path, data: EvalData) -> Callable[[dict[str, float]], float]:
    """Spearman of any fusion weighting of the bundle's components on the STS pairs (idf and statistics over the
    second sentences, as BundleScorer computes them): what the rule checks each weighting against."""
    scorer = BundleScorer(bundle)
    queries, candidates, lexical = scorer.prepare(data)
    z = zscores(scorer.components(queries, candidates, lexical), scorer.stats(data.candidates, candidates))
    return weighting_spearman(z, data.gold)


def weighting_spearman(z: dict[str, np.ndarray], gold) -> Callable[[dict[str, float]], float]:
    """Spearman with `gold` of any weighting of the STS pairs' component z-scores `z` (each pair on the diagonal)."""
    diagonal = {name: np.diag(values) for name, values in z.items()}

    def spearman(weights: dict[str, float]) -> float:
        fused = sum(w * diagonal[name] for name, w in weights.items() if w > 0 and name in diagonal)
        return float(spearmanr(fused, gold).correlation)

    return spearman


def sts_rows(default: Path, data: EvalData) -> dict[str, float]:
    """STS-benchmark test pairs, Spearman: the encoder's cosine and the default bundle's fused score."""
    scorers = {
        "all-MiniLM-L6-v2 cosine (the figure before fusion)": BundleScorer(default, "mean"),
        "default bundle, learned metric alone": BundleScorer(default, "metric-two"),
        "default bundle, fused": BundleScorer(default),
    }
    return {label: evaluate(data, scorer).metrics["Spearman"] for label, scorer in scorers.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-http", action="store_true", help="skip the served (HTTP) rows")
    parser.add_argument("--report", type=Path, default=ROOT / "EVALUATION.md")
    args = parser.parse_args()
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="hybrid-bench-"))
    try:
        default = workdir / "default"
        export_default(default)
        folders, catalogs = {}, {}
        for pair, read in CATALOG_PAIRS.items():
            left, right, gold = read()
            folders[pair] = write_catalog_match(left, right, gold, workdir / pair)
            catalogs[pair] = write_catalog(left + right, workdir / f"{pair}-catalog.csv")

        sts = sts_data(workdir)
        floor = evaluate(sts, BundleScorer(default, "mean")).metrics["Spearman"]
        spearman = sts_spearman(default, sts)
        rule_bundles, ruled = {}, {}
        for pair in folders:  # the rule: the best on a pair's labelled matches that loses nothing on STS-B
            rule_bundles[pair] = workdir / f"rule-{pair}"
            shutil.copytree(default, rule_bundles[pair])
            ruled[pair] = tune(
                catalogs[pair],
                rule_bundles[pair],
                pairs=folders[pair] / "gold.csv",
                margin=0.0,
                admissible=lambda weights: spearman(weights) >= floor,
            ).weights
            print(f"rule on {pair}'s labels: {weights_text(ruled[pair])}", flush=True)
        rederived = ruled[RULE_PAIR]
        reproduced = {n: w for n, w in rederived.items() if w} == {n: w for n, w in DEFAULT_FUSION.items() if w}
        print(f"rule re-derived: {weights_text(rederived)}; equals DEFAULT_FUSION: {reproduced}", flush=True)
        reverse_pair = next(pair for pair in folders if pair != RULE_PAIR)

        rows: dict[str, dict[str, dict[str, float]]] = {}
        tuned_weights = {}
        for pair, folder in folders.items():
            data = read_task("catalog-match", folder)
            own = workdir / f"tuned-{pair}"
            shutil.copytree(default, own)
            tuned_weights[pair] = tune(catalogs[pair], own).weights
            scorers = {
                "TF-IDF (title + description, scikit-learn)": TfidfScorer(),
                "lexical score alone (whole text)": LexicalScorer(),
                "all-MiniLM-L6-v2, per-field angular (1, 1), no lexical": BundleScorer(default, "metric-two"),
                "default bundle, fused (in-process)": BundleScorer(default),
                "default bundle re-tuned on the pair's own catalog (in-process)": BundleScorer(own),
                f"the rule run on {reverse_pair}'s labels instead (in-process)": BundleScorer(
                    rule_bundles[reverse_pair]
                ),
            }
            for label, scorer in scorers.items():
                rows.setdefault(label, {})[pair] = metrics(scorer.scores(data), data.relevant)
                print(pair, label, rows[label][pair], flush=True)
            if not args.no_http:
                label = "default bundle, served through HTTP (k = 100)"
                rows.setdefault(label, {})[pair] = metrics(served(default, data, workdir), data.relevant)
                print(pair, label, rows[label][pair], flush=True)
        free_text = free_text_rows(default, folders["Abt-Buy"], workdir, not args.no_http)
        print("free text", free_text, flush=True)
        sts_figures = sts_rows(default, sts)
        print("STS-B", sts_figures, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    pairs = list(CATALOG_PAIRS)
    header = "| scorer | " + " | ".join(f"{p} MRR | {p} HR@1 | {p} HR@10" for p in pairs) + " |"
    lines = [header, "|---|" + "---:|" * (3 * len(pairs))]
    for label, per_pair in rows.items():
        cells = [f"{per_pair[p][m]:.3f}" for p in pairs for m in ("MRR", "HR@1", "HR@10") if p in per_pair]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    free_text_table = "\n".join(
        ["| scorer | MRR@10 |", "|---|---:|", *(f"| {label} | {v:.3f} |" for label, v in free_text.items())]
    )
    sts_table = "\n".join(
        ["| scorer | Spearman |", "|---|---:|", *(f"| {label} | {v:.4f} |" for label, v in sts_figures.items())]
    )
    table = "\n".join(lines)
    print(table, free_text_table, sts_table, sep="\n\n")
    tuned_lines = "\n".join(f"- tuned on {pair}'s own catalog: {weights_text(w)}" for pair, w in tuned_weights.items())
    minutes = (time.perf_counter() - started) / 60
    body = f"""Command: `.venv/bin/python -m bench.hybrid{" --no-http" if args.no_http else ""}` ({minutes:.0f} min on
{machine()}, CPU only, shared). Each left item ranks every right item of its pair (the
other shop); the best-ranked gold match counts, ties pessimistic; the served rows index the right items through
`POST /index` and ask `POST /similar` with the left item's title and description, k = 100 (a match past 100 counts
as last). In-process rows run the service's own scoring code (tests/evaluation/test_hybrid_parity.py holds them
equal), with idf and statistics over the right items.

{table}

Default weights (`DEFAULT_FUSION`, metricsearch/core/fusion.py): {weights_text(DEFAULT_FUSION)}. The rule:
{DEFAULT_FUSION_RULE}. Re-derived in this run: {weights_text(rederived)} ({"the same" if reproduced else "DIFFERENT"}).
Walmart-Amazon is the pair the rule never saw; Abt-Buy's figures are in-sample: the rule chose the weights on its
gold matches (each Abt item ranked among Buy's, as here). The other direction, the same rule run on {reverse_pair}'s
gold matches, chooses {weights_text(ruled[reverse_pair])} (the row "the rule run on {reverse_pair}'s labels instead";
there {RULE_PAIR}'s figure is the one out of sample). Of the grid's 4,095 weightings, those keeping STS-B at
the encoder's figure or above weigh the learned metric most: every lexical weighting strong enough to win on catalogs
alone (the previous default had `lexical_text` 2: Walmart-Amazon 0.925) costs STS-B 0.03-0.09.

{tuned_lines}

The lexical score is TF-IDF cosine with idf once (metricsearch/core/lexical.py): sublinear tf, L2-normalised per
text, and the live catalog's idf applied by the store; the whole text (title + description) is its own lexical field,
so a part number matches whichever field each shop wrote it in. The rows "re-tuned on the pair's own catalog" are
`metricsearch tune` as a user runs it, without labels: it replaces a bundle's weights only when both of its
self-supervised signals (pseudo-queries; pairs of items that alone share a part number) prefer others by
{PSEUDO_MARGIN} MRR. Either signal alone chose weights that did worse on the gold matches than the default
("Hybrid: label-free tuning" below).

`lexical_codes` is the query's model and part numbers alone (terms of letters and digits, or of five digits or more,
and their stems: analyzer v2, "Hybrid: code stems" below) against each item's whole text: a match on those is rare
between different products and common between listings of the same one, while a shared short number or common word
says little (STS-benchmark's news and captions share those).

Free text: Abt's titles alone as queries over Buy's items (the search box of a storefront; MRR@10, a match past 10
counts 0). Targets: >= 0.80 (txtai 9.14 with the same model, one text per item: 0.755, measured by the issue's
author, not in this run).

{free_text_table}

STS-benchmark test pairs, Spearman with the human scores (each sentence an item with only a title; idf and
statistics over the second sentences). Target: the fused default no lower than the encoder's cosine (0.820).

{sts_table}
"""
    write_section(args.report, "Hybrid", body)
    print(f"hybrid bench done in {minutes:.1f} min; EVALUATION.md section 'Hybrid' written")


if __name__ == "__main__":
    main()
