"""Training data: catalogs, scored pairs and triplets (read by the core's one reader, so every problem names the
file and line), pair scores scaled to [0, 1], and BERT's masking of tokens for the masked-language-model loss."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import torch

from metricsearch.core import readers
from metricsearch.core.errors import InvalidInputError, TrainerError
from metricsearch.core.records import Item, ScoredPair, Triplet

IGNORE_INDEX = -100  # the label torch.nn.functional.cross_entropy skips by default


def read_catalog(path: Path) -> list[Item]:
    """All items of a `.csv` or `.jsonl` catalog, at least one, each id once."""
    return readers.read_catalog_list(Path(path))


def read_pairs(path: Path) -> list[ScoredPair]:
    """Pairs with a similarity score on any scale; the file's lowest score becomes 0 and its highest 1."""
    pairs = readers.read_pairs(Path(path))
    low, high = min(p.score for p in pairs), max(p.score for p in pairs)
    if low == high:
        raise InvalidInputError(f"{path}: every score is {low}; scores must differ to say which pairs are more similar")
    return [ScoredPair(p.text_a, p.text_b, (p.score - low) / (high - low)) for p in pairs]


def read_triplets(path: Path) -> list[Triplet]:
    """(anchor, positive, negative) texts: the anchor is meant to be nearer the positive than the negative."""
    return readers.read_triplets(Path(path))


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
