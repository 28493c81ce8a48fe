"""Distances and losses against brute force and hand-computed values; gradients finite where arccos' is not."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from metricsearch.core.errors import TrainerError
from metricsearch.trainer.losses import (
    PAIR_MARGINS,
    angular_distance,
    cosine_distance,
    cosine_hinge_loss,
    hardest_negatives,
    pairwise_angular_distance,
    pairwise_cosine_distance,
    random_negatives,
    tdm_loss,
    tdm_probability,
    triplet_loss,
)


def brute_force_hardest(distances: list[list[float]]) -> list[int]:
    n = len(distances)
    best = []
    for i in range(n):
        chosen = None
        for j in range(n):
            if j != i and (chosen is None or distances[i][j] < distances[i][chosen]):
                chosen = j
        best.append(chosen)
    return best


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=2, max_value=7).flatmap(
        lambda n: st.lists(
            st.lists(
                st.sampled_from([0.0, 0.25, 0.5, 1.0, math.inf]) | st.floats(0, 2, width=32), min_size=n, max_size=n
            ),
            min_size=n,
            max_size=n,
        )
    )
)
def test_hardest_negatives_is_the_nearest_other_positive_first_of_ties(rows):
    found = hardest_negatives(torch.tensor(rows)).tolist()
    assert found == brute_force_hardest(rows)
    assert all(j != i for i, j in enumerate(found))


def test_hardest_negatives_skips_the_own_positive_even_when_it_is_nearest():
    distances = torch.tensor([[0.0, 0.9, 0.3], [0.8, 0.0, 0.8], [0.1, 0.2, 0.0]], requires_grad=True)
    assert hardest_negatives(distances).tolist() == [2, 0, 0]
    assert hardest_negatives(torch.full((3, 3), math.inf)).tolist() == [1, 0, 0]


@pytest.mark.parametrize("shape", [(1, 1), (2, 3)])
def test_hardest_negatives_refuses_a_batch_without_negatives(shape):
    with pytest.raises(TrainerError):
        hardest_negatives(torch.zeros(shape))


def test_random_negatives_are_other_rows_uniformly():
    generator = torch.Generator().manual_seed(0)
    draws = torch.stack([random_negatives(4, generator) for _ in range(3000)])
    assert (draws != torch.arange(4)).all()
    counts = torch.stack([(draws == j).sum(0) for j in range(4)]).float() / len(draws)  # counts[j, i]
    off_diagonal = counts[~torch.eye(4, dtype=torch.bool)]
    assert torch.allclose(off_diagonal, torch.full_like(off_diagonal, 1 / 3), atol=0.04)
    with pytest.raises(TrainerError):
        random_negatives(1)


def test_distances_match_numpy():
    generator = torch.Generator().manual_seed(1)
    a, b = torch.randn(6, 5, generator=generator), torch.randn(4, 5, generator=generator)
    an, bn = a.numpy(), b.numpy()
    cos = (an / np.linalg.norm(an, axis=1, keepdims=True)) @ (bn / np.linalg.norm(bn, axis=1, keepdims=True)).T
    np.testing.assert_allclose(pairwise_angular_distance(a, b).numpy(), np.arccos(cos) / np.pi, atol=1e-6)
    np.testing.assert_allclose(pairwise_cosine_distance(a, b).numpy(), 1 - cos, atol=1e-6)
    rows = np.arange(4)
    np.testing.assert_allclose(angular_distance(a[:4], b).numpy(), np.arccos(cos[rows, rows]) / np.pi, atol=1e-6)
    np.testing.assert_allclose(cosine_distance(a[:4], b).numpy(), 1 - cos[rows, rows], atol=1e-6)


def test_angular_distance_of_known_angles():
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [2.0, 0.0], [1.0, 1.0]])
    b = torch.tensor([[0.0, 3.0], [-1.0, 0.0], [5.0, 0.0], [1.0, 0.0]])
    assert torch.allclose(angular_distance(a, b), torch.tensor([0.5, 1.0, 0.0, 0.25]), atol=1e-3)


def test_angular_distance_gradient_matches_finite_differences():
    generator = torch.Generator().manual_seed(2)
    a = torch.randn(4, 5, dtype=torch.float64, generator=generator, requires_grad=True)
    b = torch.randn(4, 5, dtype=torch.float64, generator=generator, requires_grad=True)
    assert torch.autograd.gradcheck(angular_distance, (a, b))
    assert torch.autograd.gradcheck(pairwise_angular_distance, (a, b[:3]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_angular_distance_gradient_is_finite_at_identical_and_opposite_vectors(dtype, sign):
    a = torch.tensor([[0.3, -1.2, 2.0], [1.0, 0.0, 0.0]], dtype=dtype, requires_grad=True)
    b = (sign * a).detach().requires_grad_()
    for distance in (angular_distance(a, b), pairwise_angular_distance(a, b).diagonal()):
        a.grad = b.grad = None
        distance.sum().backward()
        assert torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()
        assert torch.allclose(distance.detach(), torch.full((2,), 0.0 if sign > 0 else 1.0, dtype=dtype), atol=1e-3)


def test_angular_distance_stays_finite_under_bfloat16_autocast():
    a = torch.randn(3, 8, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = a @ torch.eye(8)  # bfloat16 under autocast, as an encoder's output would be
        distance = angular_distance(hidden, hidden.detach()) + pairwise_angular_distance(hidden, hidden).sum()
    assert distance.dtype == torch.float32
    distance.sum().backward()
    assert torch.isfinite(a.grad).all()


def test_triplet_loss_by_hand():
    d_pos, d_neg = torch.tensor([0.1, 0.5, 0.2]), torch.tensor([0.4, 0.3, 0.9])
    # margin 0.2: max(0, 0.2+0.1-0.4)=0, max(0, 0.2+0.5-0.3)=0.4, max(0, 0.2+0.2-0.9)=0
    assert triplet_loss(d_pos, d_neg, 0.2).item() == pytest.approx(0.4 / 3)


def test_the_papers_pair_losses_by_hand():
    cos_pos, cos_neg = torch.tensor([0.9, 0.5]), torch.tensor([0.2, -0.4])
    # contrastive (1, 0): ((0.1 + 0.2) + (0.5 + 0)) / 2; cosine (1, -1): ((0.1 + 1.2) + (0.5 + 0.6)) / 2
    assert cosine_hinge_loss(cos_pos, cos_neg, *PAIR_MARGINS["contrastive"]).item() == pytest.approx(0.4)
    assert cosine_hinge_loss(cos_pos, cos_neg, *PAIR_MARGINS["cosine"]).item() == pytest.approx(1.2)
    assert cosine_hinge_loss(torch.ones(2), -torch.ones(2), 1.0, -1.0).item() == 0.0  # both margins met


def test_contrastive_and_cosine_take_the_same_steps_while_no_negative_cosine_is_negative():
    """The paper's note on Table 2 ((ii) and (iii) gave identical results): the gradients agree while every s_n > 0,
    and differ once one is negative (only the cosine variant pushes it further)."""

    def gradients(cos_neg: list[float], loss: str) -> tuple[torch.Tensor, torch.Tensor]:
        pos, neg = torch.tensor([0.3, 0.8], requires_grad=True), torch.tensor(cos_neg, requires_grad=True)
        cosine_hinge_loss(pos, neg, *PAIR_MARGINS[loss]).backward()
        return pos.grad, neg.grad

    for a, b in zip(gradients([0.1, 0.6], "contrastive"), gradients([0.1, 0.6], "cosine"), strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(gradients([-0.2, 0.6], "contrastive")[1], gradients([-0.2, 0.6], "cosine")[1])


def test_tdm_loss_is_the_bce_of_the_cosine_head():
    title = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    description = torch.tensor([[0.0, 1.0], [-1.0, 0.0], [1.0, 0.0]])
    labels = torch.tensor([1.0, 0.0, 1.0])
    p = [0.5, 0.0, (1 + math.sqrt(0.5)) / 2]  # (1 + cos) / 2
    assert torch.allclose(tdm_probability(title, description), torch.tensor(p), atol=1e-5)
    expected = -(math.log(p[0]) + math.log(1 - p[1]) + math.log(p[2])) / 3
    assert tdm_loss(title, description, labels).item() == pytest.approx(expected, abs=1e-5)


def test_tdm_loss_is_finite_when_confidently_wrong():
    title = torch.tensor([[1.0, 0.0]], requires_grad=True)
    loss = tdm_loss(title, torch.tensor([[-1.0, 0.0]]), torch.tensor([1]))  # opposite vectors labelled a match
    loss.backward()
    assert torch.isfinite(loss) and loss.item() == pytest.approx(-math.log(1e-6), rel=1e-3)
    assert torch.isfinite(title.grad).all()
