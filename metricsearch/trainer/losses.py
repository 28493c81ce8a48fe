"""Distances and losses on batches of embeddings (batch-first, differentiable): MetricBERT's angular triplet loss
with in-batch hard negatives, the contrastive and cosine pair losses of its ablation, and RecoBERT's
title-description matching.

Distances are computed in float32 (or wider) with autocast off: in bfloat16, 1 - 1e-6 rounds to 1, so the
clamp that keeps arccos' gradient finite would do nothing, and cosines of near neighbours would all read 1.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from metricsearch.core.errors import TrainerError

COS_EPS = 1e-6  # arccos' derivative -1/sqrt(1 - c^2) is infinite at c = +-1; clamping keeps it finite
PROB_EPS = 1e-6  # keeps the TDM probability strictly inside (0, 1), where log is finite


def _wide(t: Tensor) -> Tensor:
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def _cosine(a: Tensor, b: Tensor) -> Tensor:
    with torch.autocast(a.device.type, enabled=False):
        return F.cosine_similarity(_wide(a), _wide(b), dim=-1)


def _pairwise_cosine(a: Tensor, b: Tensor) -> Tensor:
    with torch.autocast(a.device.type, enabled=False):
        return F.normalize(_wide(a), dim=-1) @ F.normalize(_wide(b), dim=-1).T


def _angle(cos: Tensor) -> Tensor:
    return torch.arccos(cos.clamp(-1.0 + COS_EPS, 1.0 - COS_EPS)) / math.pi


def angular_distance(a: Tensor, b: Tensor) -> Tensor:
    """arccos(cos(a_i, b_i)) / pi per row, in [0, 1]; the gradient is zero, not NaN, at cos = +-1."""
    return _angle(_cosine(a, b))


def pairwise_angular_distance(a: Tensor, b: Tensor) -> Tensor:
    """(n, m) angular distances between every row of a (n, d) and every row of b (m, d)."""
    return _angle(_pairwise_cosine(a, b))


def cosine_distance(a: Tensor, b: Tensor) -> Tensor:
    """1 - cos(a_i, b_i) per row, in [0, 2]."""
    return 1.0 - _cosine(a, b)


def pairwise_cosine_distance(a: Tensor, b: Tensor) -> Tensor:
    """(n, m) cosine distances between every row of a and every row of b."""
    return 1.0 - _pairwise_cosine(a, b)


def _need_two(n: int) -> None:
    if n < 2:
        raise TrainerError(f"in-batch negatives need at least 2 items in a batch, got {n}; raise batch_size")


def hardest_negatives(distances: Tensor) -> Tensor:
    """For each anchor i, the positive j != i nearest to it in (n, n) anchor-vs-positive `distances`; ties go to
    the lowest j. The diagonal (the anchor's own positive) is dropped, not set to +inf, so i is never returned even
    when every other distance is +inf."""
    n = distances.shape[0]
    if distances.dim() != 2 or distances.shape[1] != n:
        raise TrainerError(f"hardest_negatives needs a square (n, n) distance matrix, got {tuple(distances.shape)}")
    _need_two(n)
    off_diagonal = ~torch.eye(n, dtype=torch.bool, device=distances.device)
    k = distances.detach()[off_diagonal].view(n, n - 1).argmin(dim=1)  # argmin returns the first of equal minima
    rows = torch.arange(n, device=distances.device)
    return k + (k >= rows).long()


def random_negatives(n: int, generator: torch.Generator | None = None) -> Tensor:
    """For each i, a j != i drawn uniformly: i plus a uniform shift in 1..n-1, modulo n."""
    _need_two(n)
    device = generator.device if generator is not None else None
    shift = torch.randint(1, n, (n,), generator=generator, device=device)
    return (torch.arange(n, device=shift.device) + shift) % n


def triplet_loss(d_pos: Tensor, d_neg: Tensor, margin: float) -> Tensor:
    """mean(max(0, margin + d_pos - d_neg)). Takes distances, unlike F.triplet_margin_with_distance_loss, so a
    mined negative is an index into the batch's distance matrix rather than a copied embedding."""
    return F.relu(margin + d_pos - d_neg).mean()


PAIR_MARGINS = {"contrastive": (1.0, 0.0), "cosine": (1.0, -1.0)}
"""(m_pos, m_neg) of MetricBERT's Table 2 pair losses (metricbert.txt section 4.5): (ii) contrastive, (iii) cosine."""


def cosine_hinge_loss(cos_pos: Tensor, cos_neg: Tensor, margin_pos: float, margin_neg: float) -> Tensor:
    """MetricBERT's ablation losses on pairs: mean([m_pos - s_p]_+ + [s_n - m_neg]_+) over cosine similarities s_p
    (anchor-positive) and s_n (anchor-negative). Unlike the triplet loss, it pulls every positive towards cosine
    m_pos however far its negative is. With m_neg = 0 a negative is pushed until orthogonal; with m_neg = -1 always,
    so the two variants take the same gradient steps while no negative has a negative cosine (the paper's note)."""
    return (F.relu(margin_pos - cos_pos) + F.relu(cos_neg - margin_neg)).mean()


def tdm_probability(title: Tensor, description: Tensor) -> Tensor:
    """RecoBERT's title-description match (1 + cos) / 2 per row, clamped into (0, 1) so its BCE stays finite."""
    return ((1.0 + _cosine(title, description)) / 2.0).clamp(PROB_EPS, 1.0 - PROB_EPS)


def tdm_loss(title: Tensor, description: Tensor, labels: Tensor) -> Tensor:
    """Binary cross-entropy of the TDM probability against labels (1 = the description belongs to the title).
    Autocast is off here: binary_cross_entropy refuses to run under CUDA autocast."""
    with torch.autocast(title.device.type, enabled=False):
        probability = tdm_probability(title, description)
        return F.binary_cross_entropy(probability, labels.to(probability.dtype))
