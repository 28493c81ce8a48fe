"""Pseudo-matches: training triplets mined from a two-source catalog without labels. A left and a right item that a
ranking (the packaged bundle's fused scores) puts first for each other, by a wide margin over the runner-up, are taken
for the same thing; the negative is the other side's item nearest to the anchor by the lexical score, the kind of
look-alike the served rerank must tell apart. The trainer cannot run a bundle (it imports no encoder), so the
scores come from the caller: `metricsearch train --pseudo-matches BUNDLE` computes them with the evaluation's
in-process scorer."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from metricsearch.core.errors import TrainerError
from metricsearch.core.records import Item, Triplet
from metricsearch.trainer.data import read_catalog

SOURCE_FIELD = "source"  # the catalog column (metadata key) naming each item's shop, as /index's `source` filter
PSEUDO_KEEP = 0.5  # share of the mutual-first pairs kept, widest margins first (docs/training.md)

# (left items, right items) -> (the ranking's scores, the lexical scores), each (left, right), higher = nearer
Scores = Callable[[list[Item], list[Item]], tuple[np.ndarray, np.ndarray]]


def mine_pseudo_matches(catalog: Path, scores: Scores, out_file: Path, keep: float = PSEUDO_KEEP) -> str:
    """Write the catalog's pseudo-match triplets to `out_file` (JSONL: anchor, positive, negative); return a line
    saying what was found."""
    if out_file.exists():  # mined before the trainer's own check of the run folder, which it must not overwrite
        raise TrainerError(
            f"{out_file.parent} already holds a run: pass --resume to continue it, or choose another --out"
        )
    left, right = split_sources(read_catalog(catalog))
    ranking, lexical = scores(left, right)
    matches = mutual_matches(ranking, keep)
    if len(matches) < 2:
        raise TrainerError(
            f"{catalog}: only {len(matches)} pseudo-matches between its {len(left)} and {len(right)} items; "
            "the two sources share too little to train on"
        )
    triplets = pseudo_triplets(left, right, matches, lexical)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    with out_file.open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(asdict(t)) + "\n" for t in triplets)
    return (
        f"pseudo-matches: {len(matches)} pairs kept of {len(left)} x {len(right)} items, "
        f"{len(triplets)} triplets -> {out_file}"
    )


@dataclass(frozen=True)
class PseudoMatch:
    left: int
    right: int
    margin: float  # the pair's score over the runner-up, the smaller of the two directions


def split_sources(items: list[Item]) -> tuple[list[Item], list[Item]]:
    """The catalog's items of its two sources (the first source met is the left one)."""
    names: dict[str, list[Item]] = {}
    for item in items:
        source = (item.metadata or {}).get(SOURCE_FIELD)
        if source is None or str(source).strip() == "":
            raise TrainerError(
                f"item {item.id!r} has no {SOURCE_FIELD}: pseudo-matches pair items across two sources, so every "
                f"item needs a {SOURCE_FIELD} column (e.g. the shop it comes from)"
            )
        names.setdefault(str(source), []).append(item)
    if len(names) != 2 or min(len(group) for group in names.values()) < 2:
        found = ", ".join(f"{name!r} ({len(group)})" for name, group in names.items())
        raise TrainerError(f"pseudo-matches need exactly two sources of at least 2 items each; the catalog has {found}")
    left, right = names.values()
    return left, right


def mutual_matches(scores: np.ndarray, keep: float) -> list[PseudoMatch]:
    """Pairs (i, j) where j is row i's best and i column j's best (no ties), the `keep` share of them with the
    widest margin: a share rather than a margin in score units, which differ from one bundle's fusion to another."""
    if scores.shape[0] < 2 or scores.shape[1] < 2:
        raise TrainerError("pseudo-matches need at least 2 items on each side")
    best_right = scores.argmax(axis=1)
    best_left = scores.argmax(axis=0)
    row_top2 = np.sort(scores, axis=1)[:, -2:]
    column_top2 = np.sort(scores, axis=0)[-2:, :]
    found = []
    for i, j in enumerate(best_right.tolist()):
        if best_left[j] != i:
            continue
        margin = min(row_top2[i, 1] - row_top2[i, 0], column_top2[1, j] - column_top2[0, j])
        if margin > 0:  # a tie for first is no match
            found.append(PseudoMatch(i, j, float(margin)))
    found.sort(key=lambda m: (-m.margin, m.left))
    return found[: max(1, round(keep * len(found)))] if found else []


def pseudo_triplets(
    left: list[Item], right: list[Item], matches: list[PseudoMatch], lexical: np.ndarray
) -> list[Triplet]:
    """Per pseudo-match and per direction, (anchor, its match, the other side's lexically nearest item that is not
    the match), once with titles and once with descriptions where all three have one: the service compares an
    item field by field, so each field learns on its own kind of text."""
    triplets = []
    for match in matches:
        by_left = _nearest_other(lexical[match.left], match.right)
        by_right = _nearest_other(lexical[:, match.right], match.left)
        for anchor, positive, negative in (
            (left[match.left], right[match.right], right[by_left]),
            (right[match.right], left[match.left], left[by_right]),
        ):
            triplets.append(Triplet(anchor.title, positive.title, negative.title))
            if anchor.description.strip() and positive.description.strip() and negative.description.strip():
                triplets.append(Triplet(anchor.description, positive.description, negative.description))
    return triplets


def _nearest_other(row: np.ndarray, excluded: int) -> int:
    masked = np.asarray(row, dtype=np.float64).copy()
    masked[excluded] = -np.inf
    return int(masked.argmax())
