"""Self-supervised positives for MetricBERT: an item's description, or a variant of its own title
(core/augment.py) drawn from the run's seeded torch generator, so a run and its resume make the same ones."""

from __future__ import annotations

import torch

from metricsearch.core import augment
from metricsearch.core.augment import is_part_number

__all__ = ["is_part_number", "positive_texts", "title_variant"]


def title_variant(title: str, generator: torch.Generator) -> str:
    return augment.title_variant(title, lambda n: torch.rand(n, generator=generator).tolist())


def positive_texts(titles: list[str], descriptions: list[str], share: float, generator: torch.Generator) -> list[str]:
    """Each item's positive: a variant of its title with probability `share` (always when it has no description),
    else its description. `share` 0 draws nothing, so the paper's runs keep their random streams."""
    if share == 0:
        return descriptions
    draws = torch.rand(len(titles), generator=generator).tolist()
    return [
        title_variant(title, generator) if draw < share or not description.strip() else description
        for title, description, draw in zip(titles, descriptions, draws, strict=True)
    ]
