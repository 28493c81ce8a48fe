"""Training data: catalogs, scored pairs and triplets read from files (every problem named by file and line),
and BERT's masking of tokens for the masked-language-model loss."""

from __future__ import annotations

import csv
import math
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from service import catalog_io
from service.catalog import Item
from service.errors import InvalidInputError
from trainer.errors import TrainerError

IGNORE_INDEX = -100  # the label torch.nn.functional.cross_entropy skips by default
PAIR_COLUMNS = ("text_a", "text_b", "score")
TRIPLET_COLUMNS = ("anchor", "positive", "negative")
# STS-B and sentence-transformers' copies of it name the texts sentence1/sentence2.
ALIASES = {"sentence1": "text_a", "sentence2": "text_b"}


@dataclass(frozen=True)
class ScoredPair:
    text_a: str
    text_b: str
    score: float  # normalised to [0, 1]


@dataclass(frozen=True)
class Triplet:
    anchor: str
    positive: str
    negative: str


def read_catalog(path: Path) -> list[Item]:
    """All items of a `.csv` or `.jsonl` catalog, read by the service's own reader so both sides agree."""
    try:
        items = list(catalog_io.read_catalog(Path(path)))
    except InvalidInputError as exc:
        raise TrainerError(str(exc)) from exc
    if not items:
        raise TrainerError(f"{path}: has no items; a catalog needs a header and at least one item")
    return items


def read_pairs(path: Path) -> list[ScoredPair]:
    """Pairs with a similarity score on any scale; the file's lowest score becomes 0 and its highest 1."""
    path = Path(path)
    rows = [
        (where, record["text_a"], record["text_b"], _score(record["score"], where))
        for where, record in _records(path, PAIR_COLUMNS)
    ]
    if not rows:
        raise TrainerError(f"{path}: has no pairs")
    low, high = min(r[3] for r in rows), max(r[3] for r in rows)
    if low == high:
        raise TrainerError(f"{path}: every score is {low}; scores must differ to say which pairs are more similar")
    return [ScoredPair(a, b, (score - low) / (high - low)) for _, a, b, score in rows]


def read_triplets(path: Path) -> list[Triplet]:
    """(anchor, positive, negative) texts: the anchor is meant to be nearer the positive than the negative."""
    path = Path(path)
    triplets = [Triplet(**record) for _, record in _records(path, TRIPLET_COLUMNS)]
    if not triplets:
        raise TrainerError(f"{path}: has no triplets")
    return triplets


def _records(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[str, dict[str, str]]]:
    """(file:line, {column: value}) per record of a .csv, .tsv or .jsonl file; texts are non-empty strings."""
    if not path.is_file():
        raise TrainerError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        yield from _delimited(path, columns)
    elif suffix in (".jsonl", ".ndjson"):
        yield from _jsonl(path, columns)
    else:
        raise TrainerError(f"{path}: unknown format; use .csv, .tsv or .jsonl")


def _delimited(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[str, dict[str, str]]]:
    # TSV quoting is off as in STS-B, whose texts hold bare quote characters; utf-8-sig drops a spreadsheet's BOM.
    tsv = path.suffix.lower() == ".tsv"
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if tsv else csv.DictReader(f)
        header = [ALIASES.get(name, name) for name in reader.fieldnames or []]
        missing = [c for c in columns if c not in header]
        if missing:
            raise TrainerError(f"{path}:1: header lacks column(s) {', '.join(missing)}; it needs {', '.join(columns)}")
        reader.fieldnames = header
        for row in reader:
            where = f"{path}:{reader.line_num}"
            yield where, _checked({c: row.get(c) for c in columns}, where)


def _jsonl(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[str, dict[str, str]]]:
    try:
        for where, record in catalog_io.json_objects(path):
            record = {ALIASES.get(k, k): v for k, v in record.items()}
            yield where, _checked({c: record.get(c) for c in columns}, where)
    except InvalidInputError as exc:
        raise TrainerError(str(exc)) from exc


def _checked(record: dict, where: str) -> dict:
    missing = [c for c, v in record.items() if v is None or (isinstance(v, str) and not v.strip())]
    if missing:
        raise TrainerError(f"{where}: missing {', '.join(missing)}")
    for column, value in record.items():
        if column != "score" and not isinstance(value, str):
            raise TrainerError(f"{where}: {column} must be a string, got {value!r}")
    return record


def _score(value: object, where: str) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        score = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TrainerError(f"{where}: score {value!r} is not a number") from None
    if not math.isfinite(score):
        raise TrainerError(f"{where}: score {value!r} is not a finite number")
    return score


def mask_tokens(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    special_ids: Collection[int],
    mask_id: int,
    vocab_size: int,
    probability: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking: `probability` of the real tokens are chosen; of those 80% become `mask_id`, 10% a random
    token, 10% stay. Returns (masked input ids, labels: the original id where chosen, -100 elsewhere).

    Written here rather than taken from transformers' DataCollatorForLanguageModeling, which needs a tokenizer
    object, draws from the global RNG and does not promise a chosen token, so a short batch could leave the MLM
    loss undefined: here at least one token is chosen whenever the batch has one that may be.
    """
    if not 0.0 < probability <= 1.0:
        raise TrainerError(f"the MLM masking probability must be in (0, 1], got {probability}")
    if input_ids.shape != attention_mask.shape:
        raise TrainerError(f"input_ids {tuple(input_ids.shape)} and attention_mask differ in shape")
    # Draw on the generator's device so a CPU generator can mask a batch that already sits on the GPU.
    device = generator.device if generator is not None else input_ids.device
    ids = input_ids.to(device)
    specials = torch.tensor(sorted(special_ids), dtype=ids.dtype, device=device)
    maskable = attention_mask.to(device).bool() & ~torch.isin(ids, specials)

    chosen = torch.bernoulli(torch.full(ids.shape, probability, device=device), generator=generator).bool()
    chosen &= maskable
    if not chosen.any() and maskable.any():
        candidates = maskable.flatten().nonzero().squeeze(1)
        pick = torch.randint(len(candidates), (1,), generator=generator, device=device)
        chosen.view(-1)[candidates[pick]] = True

    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
    to_mask = chosen & torch.bernoulli(torch.full(ids.shape, 0.8, device=device), generator=generator).bool()
    # Half of the remaining 20%: the other 10% keep their token.
    to_random = chosen & ~to_mask
    to_random &= torch.bernoulli(torch.full(ids.shape, 0.5, device=device), generator=generator).bool()
    random_ids = torch.randint(vocab_size, ids.shape, generator=generator, device=device, dtype=ids.dtype)
    masked = torch.where(to_mask, torch.full_like(ids, mask_id), ids)
    masked = torch.where(to_random, random_ids, masked)
    return masked.to(input_ids.device), labels.to(input_ids.device)
