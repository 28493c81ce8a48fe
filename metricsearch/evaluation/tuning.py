"""`metricsearch tune`: choose a bundle's fusion weights for a catalog, without labels.

Two self-supervised signals come from the catalog itself, and neither reads a label:
- pseudo-queries: a sample of its items, each as another shop would describe it (a title variant from
  core/augment.py: generic words dropped, part numbers re-hyphenated, order shuffled; and half of its description's
  words), whose one relevant item is the item it was made from;
- code pairs: two items that alone in the catalog share a model or part number (core/lexical.py's codes, 4
  characters or more), each the other's match, asked by id as a product page asks.
A weighting replaces the bundle's (DEFAULT_FUSION for a bundle without; for a bundle with an adaptive rule, the
weights its rule chooses on this catalog, evaluation/adaptation.py) only when it beats them on every signal by
PSEUDO_MARGIN MRR; else the bundle's fusion, rule and all, is kept. Each signal alone is biased: pseudo-queries are
easy (every weighting ranks them at MRR 0.98-0.99) and code pairs share a code by construction, so each prefers
weights that did worse on the gold matches of both catalog pairs (EVALUATION.md, "Choices behind the defaults"). With
labelled pairs (ids of the catalog: each left item's matches), those rank instead, and the best weights win outright,
as fixed weights in place of any rule. Either way the components are z-normalised
with the catalog's statistics as the service computes them, so the weights mean the same wherever the bundle is served.

Written by hand: the grid search is a few lines over precomputed z-score matrices.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from metricsearch.core.augment import title_variant
from metricsearch.core.bundle import FUSION_COMPONENTS, FusionSpec, load_bundle, write_manifest
from metricsearch.core.errors import InvalidInputError
from metricsearch.core.fusion import DEFAULT_FUSION, DEFAULT_FUSION_RULE, AgreementRule, zscores
from metricsearch.core.lexical import code_terms
from metricsearch.core.readers import read_catalog_list, records
from metricsearch.core.records import Item
from metricsearch.evaluation.adaptation import adapted_weights
from metricsearch.evaluation.datasets import EvalData
from metricsearch.evaluation.scorers import BundleScorer

WEIGHT_GRID = (0.0, 0.5, 1.0, 2.0)
"""Weights tried for each component; 4 values over 6 components are 4,095 weightings (all-zero left out)."""
PSEUDO_QUERIES = 400
PSEUDO_MARGIN = 0.02
"""MRR by which every self-supervised signal must prefer a weighting to the bundle's for tune to replace its weights
(chosen on Abt-Buy's gold matches: at 0.01 both signals still agreed on weights worse than the default's)."""
CODE_MIN_LENGTH = 4  # shorter codes ("5d", "x1") are shared by unrelated products
MIN_CODE_PAIRS = 20
"""Fewer code pairs than this (a catalog without part numbers) leave the pseudo-queries as the only signal."""
MAX_RANK = 100  # ranks past the service's largest k count as 0 in MRR, as the evaluation's HTTP runs do


@dataclass(frozen=True)
class Tuned:
    weights: dict[str, float]
    mrr: dict[str, float]
    """Per signal (or the labelled pairs): the chosen weights' MRR."""
    default_mrr: dict[str, float]
    """Per signal: the bundle's weights' MRR."""
    queries: int
    chosen_by: str


def pseudo_queries(items: Sequence[Item], n: int, seed: int) -> tuple[list[Item], list[int]]:
    """n items (all, if fewer) rewritten as another shop might list them, and the index of each one's source."""
    rng = np.random.default_rng(seed)
    picked = sorted(rng.choice(len(items), size=min(n, len(items)), replace=False).tolist())

    def uniform(k: int) -> list[float]:
        return rng.random(k).tolist()

    queries = []
    for i in picked:
        item = items[i]
        words = item.description.split()
        kept = [w for w, draw in zip(words, uniform(len(words)), strict=True) if draw < 0.5]
        queries.append(Item(f"pseudo-{item.id}", title_variant(item.title, uniform), " ".join(kept)))
    return queries, picked


def code_pairs(items: Sequence[Item], n: int, seed: int) -> list[tuple[int, int]]:
    """Up to n (query, match) positions of items that alone in the catalog share a code, each item a query once. A
    whole code, never a stem: a stem names a series, not one product."""
    codes = [
        {t for t in code_terms(f"{item.title} {item.description}", stems=False) if len(t) >= CODE_MIN_LENGTH}
        for item in items
    ]
    holders: dict[str, list[int]] = {}
    for position, held in enumerate(codes):
        for code in held:
            holders.setdefault(code, []).append(position)
    partner: dict[int, int] = {}
    for code in sorted(holders):
        if len(holders[code]) == 2:
            a, b = holders[code]
            partner.setdefault(a, b)
            partner.setdefault(b, a)
    queries = sorted(partner)
    if len(queries) > n:
        queries = sorted(np.random.default_rng(seed).choice(queries, size=n, replace=False).tolist())
    return [(q, partner[q]) for q in queries]


def self_supervised(items: Sequence[Item], n: int, seed: int, source: str) -> tuple[EvalData, dict[str, slice]]:
    """n pseudo-queries and up to n code pairs (none if fewer than MIN_CODE_PAIRS) ranking the catalog, and the
    slice of the queries each signal holds: the pseudo-queries as text, a code pair's item by id."""
    asked, sources = pseudo_queries(items, n, seed)
    mined = code_pairs(items, n, seed)
    mined = mined if len(mined) >= MIN_CODE_PAIRS else []
    data = EvalData(
        "catalog-match",
        source,
        asked + [items[q] for q, _ in mined],
        list(items),
        [[s] for s in sources] + [[match] for _, match in mined],
        [None] * len(asked) + [q for q, _ in mined],
    )
    signals = {"pseudo-queries": slice(0, len(asked))}
    if mined:
        signals["code pairs"] = slice(len(asked), len(asked) + len(mined))
    return data, signals


def labelled_queries(items: Sequence[Item], pairs: Path) -> tuple[list[Item], list[list[int]]]:
    """Each left item of the pairs file (left_id, right_id: ids of the catalog) and its matches."""
    position = {item.id: n for n, item in enumerate(items)}
    matches: dict[int, list[int]] = {}
    for where, row in records(pairs, ("left_id", "right_id")):
        for column in ("left_id", "right_id"):
            if row[column] not in position:
                raise InvalidInputError(f"{where}: {column} {row[column]!r} is not an id of the catalog")
        matches.setdefault(position[row["left_id"]], []).append(position[row["right_id"]])
    if not matches:
        raise InvalidInputError(f"{pairs}: has no pairs")
    return [items[i] for i in matches], list(matches.values())


def weightings(names: Sequence[str]) -> list[dict[str, float]]:
    return [dict(zip(names, w, strict=True)) for w in itertools.product(WEIGHT_GRID, repeat=len(names)) if any(w)]


def relevance_mask(relevant: Sequence[Sequence[int]], n_candidates: int) -> np.ndarray:
    mask = np.zeros((len(relevant), n_candidates), dtype=bool)
    for row, positions in enumerate(relevant):
        mask[row, list(positions)] = True
    return mask


def mrr(z: dict[str, np.ndarray], weights: dict[str, float], relevant: np.ndarray, others: np.ndarray) -> float:
    """MRR of the weighted z-sum, each query's best relevant candidate ranked pessimistically (ties count against
    it, as core.ranking.pessimistic_rank), 0 past MAX_RANK; `relevant` is a (queries, candidates) mask, `others`
    masks out a query's own item (a stored item is never its own result)."""
    total = sum(w * z[name] for name, w in weights.items() if w > 0)
    best = np.where(relevant, total, -np.inf).max(axis=1)
    ranks = 1 + ((total >= best[:, None]) & ~relevant & others).sum(axis=1)
    return float(np.where(ranks <= MAX_RANK, 1.0 / ranks, 0.0).mean())


def tune(
    catalog: Path,
    bundle: Path,
    *,
    pairs: Path | None = None,
    queries: int = PSEUDO_QUERIES,
    seed: int = 13,
    margin: float = PSEUDO_MARGIN,
    admissible: Callable[[dict[str, float]], bool] | None = None,
) -> Tuned:
    """Choose the fusion weights of `bundle` for `catalog` and write them into its manifest; without labels, only
    when every self-supervised signal prefers them to the bundle's by `margin` (0: the best wins outright).
    `admissible`, when given, is a check every chosen weighting must pass besides (the default bundle's rule: no
    loss on STS-benchmark)."""
    loaded = load_bundle(bundle)
    if loaded.manifest.lexical is None or loaded.manifest.metric == "recobert":
        raise InvalidInputError(
            f"{bundle}: tuning fuses the learned metric with lexical scores, which needs a bundle with lexical "
            "vectors and metric 'angular' or 'frobenius': re-export it with this version's `metricsearch export`"
        )
    items = read_catalog_list(catalog)
    if len(items) < 10:
        raise InvalidInputError(f"{catalog}: has {len(items)} items; tuning needs at least 10 to rank")
    if pairs is None:
        data, signals = self_supervised(items, queries, seed, str(catalog))
        sizes = {signal: rows.stop - rows.start for signal, rows in signals.items()}
        codes = f"{sizes['code pairs']}" if "code pairs" in sizes else f"no (fewer than {MIN_CODE_PAIRS})"
        how = f"{sizes['pseudo-queries']} pseudo-queries (title variants, half-descriptions) and {codes} code pairs"
        how += f" of {Path(catalog).name}"
    else:
        asked, relevant = labelled_queries(items, pairs)
        own = [items.index(q) for q in asked]
        data = EvalData("catalog-match", str(catalog), asked, items, relevant, own)
        signals = {"labelled pairs": slice(0, len(asked))}
        how = f"labelled pairs {Path(pairs).name}: {len(asked)} queries over {Path(catalog).name}"
    # A query never ranks itself; a labelled query ranks among the items that are no query (in a catalog of two
    # shops, the other shop's: how a storefront filters and how EVALUATION.md measures).
    exclude = [[] if own is None else [own] for own in data.own_index]
    if pairs is not None:
        exclude = [sorted(set(data.own_index))] * len(data.queries)
    names, per_signal = signal_scorer(bundle, data, signals, exclude)
    tried = [w for w in weightings(names) if admissible is None or admissible(w)]
    if not tried:
        raise InvalidInputError("no weighting passes the admissibility check")
    fusion = loaded.manifest.fusion
    weights = fusion.weights if fusion else DEFAULT_FUSION
    adaptive = fusion.adaptive if fusion else None
    if adaptive is not None:  # what the service would rank this catalog with
        weights, _ = adapted_weights(BundleScorer(bundle), items, AgreementRule.of(adaptive), weights)
    current = {n: w for n, w in weights.items() if n in names and w > 0}
    before = per_signal(current) if current else dict.fromkeys(signals, 0.0)
    scored = [(per_signal(w), w) for w in tqdm(tried, desc="weightings", leave=False)]
    best_mrr, best, gain = agreed_best(scored, before)
    rule = "its adaptive rule's choice on this catalog" if adaptive is not None else "it"
    if pairs is None and current and gain < margin:
        best, best_mrr = current, before
        chosen_by = (
            f"metricsearch tune, {how}: kept {rule}, MRR {_listed(before)}; no weighting beat it by {margin} "
            + (f"on every signal ({fusion.chosen_by})" if fusion else f"on every signal ({DEFAULT_FUSION_RULE})")
        )
        spec = FusionSpec(weights=best if adaptive is None else fusion.weights, chosen_by=chosen_by, adaptive=adaptive)
    else:
        chosen_by = f"metricsearch tune, {how}: MRR {_listed(best_mrr)} (was {_listed(before)}"
        chosen_by += ", its adaptive rule's choice, which these fixed weights replace)" if adaptive else ")"
        spec = FusionSpec(weights=best, chosen_by=chosen_by)
    manifest = loaded.manifest.model_copy(update={"fusion": spec})
    write_manifest(manifest, loaded.path)
    load_bundle(bundle)  # what was written validates
    return Tuned(best, best_mrr, before, len(data.queries), chosen_by)


def signal_scorer(
    bundle: Path, data: EvalData, signals: dict[str, slice], exclude: Sequence[Sequence[int]]
) -> tuple[list[str], Callable[[dict[str, float]], dict[str, float]]]:
    """The components a weighting may use, and a function giving any weighting's MRR on each signal (a slice of the
    data's queries); `exclude` holds, per query, the candidates it never ranks. Encodes and scores once."""
    items = data.candidates
    scorer = BundleScorer(bundle)
    prepared_queries, candidates, lexical = scorer.prepare(data)
    z = zscores(scorer.components(prepared_queries, candidates, lexical), scorer.stats(items, candidates))
    # Without a single description the description weights cannot be told apart from the title's: they stay 0.
    described = any(item.description.strip() for item in items)
    names = [n for n in FUSION_COMPONENTS if n in z and (described or "description" not in n)]
    relevant = relevance_mask(data.relevant, len(items))
    others = ~relevance_mask(exclude, len(items))

    def per_signal(weights: dict[str, float]) -> dict[str, float]:
        return {
            signal: mrr({n: z[n][rows] for n in weights}, weights, relevant[rows], others[rows])
            for signal, rows in signals.items()
        }

    return names, per_signal


def agreed_best(
    scored: Sequence[tuple[dict[str, float], dict[str, float]]], before: dict[str, float]
) -> tuple[dict[str, float], dict[str, float], float]:
    """The (per-signal MRR, weights) whose least gain over `before` on any signal is largest, and that gain: a
    weighting only one signal prefers does not win. The first of equals wins, so the result is reproducible."""
    gains = [min(result[signal] - before[signal] for signal in before) for result, _ in scored]
    best = int(np.argmax(gains))
    return scored[best][0], scored[best][1], gains[best]


def _listed(per_signal: dict[str, float]) -> str:
    return ", ".join(f"{signal} {value:.3f}" for signal, value in per_signal.items())
