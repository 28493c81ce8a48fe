"""Second-order pooling in training: the pooled vectors' cosine is S_F (the service's, from factors), the low-rank
pooling's backward pass is finite on ill-conditioned token matrices, and every objective's loss falls with it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from metricsearch.core import second_order
from metricsearch.core.errors import TrainerError
from metricsearch.trainer import pooling
from metricsearch.trainer.config import TrainConfig
from tests.trainer.test_objectives import CASES, losses_on_fixed_batch, tiny_dir  # noqa: F401 (fixture)


def _batch(*matrices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad (n_i, d) token matrices into a (batch, n_max, d) tensor and its attention mask."""
    n_max = max(m.shape[0] for m in matrices)
    tokens = torch.zeros(len(matrices), n_max, matrices[0].shape[1])
    mask = torch.zeros(len(matrices), n_max, dtype=torch.long)
    for i, m in enumerate(matrices):
        tokens[i, : m.shape[0]], mask[i, : m.shape[0]] = m, 1
    return tokens, mask


def test_cov_pooling_cosine_is_the_served_frobenius_similarity():
    torch.manual_seed(0)
    a, b = torch.randn(7, 16), torch.randn(3, 16)
    tokens, mask = _batch(a, b)
    tokens[1, 3:] = 5.0  # padding rows: must be masked out
    vectors = pooling.second_order(tokens, mask, "cov", None)
    served = second_order.frobenius_similarity(
        second_order.factors(a.numpy(), 16), second_order.factors(b.numpy(), 16)[None]
    )[0]
    assert float(vectors[0] @ vectors[1]) == pytest.approx(float(served), abs=1e-5)


@pytest.mark.parametrize("k", [1, 3])
def test_svd_pooling_is_the_rank_k_covariance(k):
    torch.manual_seed(1)
    a = torch.randn(12, 10, dtype=torch.float64) * torch.logspace(1, -1, 10, dtype=torch.float64)
    reconstructed = pooling.low_rank_covariance(a[None], k)[0]
    _, s, vt = np.linalg.svd(a.numpy(), full_matrices=False)
    exact = (vt[:k].T * s[:k] ** 2) @ vt[:k]
    np.testing.assert_allclose(reconstructed.numpy(), exact, rtol=1e-3, atol=1e-3 * np.abs(exact).max())


ILL_CONDITIONED = {
    "one-token": lambda: _batch(torch.randn(1, 24), torch.randn(9, 24)),
    "fewer-tokens-than-k": lambda: _batch(torch.randn(3, 24), torch.randn(2, 24)),
    "identical-tokens": lambda: _batch(torch.randn(1, 24).repeat(8, 1), torch.randn(1, 24).repeat(4, 1)),
    "all-zero": lambda: _batch(torch.zeros(5, 24), torch.randn(5, 24)),
    "spread-1e8": lambda: _batch(torch.randn(10, 24) * torch.logspace(4, -4, 24), torch.randn(6, 24)),
    "repeated-singular-values": lambda: _batch(torch.eye(24)[:6] * 3.0, torch.eye(24)[6:12] * 3.0),
}


@pytest.mark.parametrize("kind", ["svd-1", "svd-5", "cov"])
@pytest.mark.parametrize("case", list(ILL_CONDITIONED))
def test_backward_is_finite_on_ill_conditioned_token_matrices(case, kind):
    torch.manual_seed(2)
    tokens, mask = ILL_CONDITIONED[case]()
    tokens.requires_grad_(True)
    name, _, k = kind.partition("-")
    vectors = pooling.second_order(tokens, mask, name, int(k) if k else None)
    similarity = (vectors[0] * vectors[1]).sum()
    (1.0 - similarity).backward()
    assert torch.isfinite(vectors).all()
    assert torch.isfinite(tokens.grad).all(), f"{case} {kind}: non-finite gradient"


SECOND_ORDER_CASES = [  # each objective's path through trainer.pooling, both poolings over the set
    ("metricbert", "cov", None),
    ("metricbert", "svd", 2),
    ("recobert", "svd", 2),
    ("sbert-siamese-cosine", "cov", None),
    ("sbert-triplet-euclidean", "svd", 2),
]


@pytest.mark.slow  # 3-25 s each on the shared 2-core machine
@pytest.mark.parametrize(("case", "name", "k"), SECOND_ORDER_CASES)
def test_loss_falls_with_second_order_pooling(tiny_dir, case, name, k):  # noqa: F811 (fixture)
    options, batch = CASES[case]
    history = losses_on_fixed_batch(tiny_dir, {**options, "pooling": name, "rank_k": k}, batch)
    assert all(np.isfinite(history))
    assert history[-1] < 0.9 * history[0], f"{case} {name}: {history}"


def test_rank_k_goes_with_svd_only():
    from metricsearch.trainer.config import build_config

    base = {"objective": "metricbert", "catalog": "c.csv", "out": "o"}
    with pytest.raises(TrainerError, match="rank-k"):
        build_config({**base, "pooling": "svd"})
    with pytest.raises(TrainerError, match="rank-k"):
        build_config({**base, "pooling": "cov", "rank_k": 4})
    assert TrainConfig(**base, pooling="svd", rank_k=4).rank_k == 4
