"""One training process (no torchrun): rank 0 is the main process and every collective is a no-op that leaves the
gradients, the logged values and rank 0's decisions as they are, without needing a process group."""

from __future__ import annotations

import torch
import torch.distributed as torch_dist

from metricsearch.trainer.distributed import Distributed

CPU = torch.device("cpu")


def test_a_single_process_is_the_main_one_and_needs_no_process_group():
    assert not torch_dist.is_initialized()  # so any collective reached below would raise
    single = Distributed()
    assert (single.rank, single.world_size, single.main) == (0, 1, True)
    assert not Distributed(rank=1, world_size=2).main  # only rank 0 writes checkpoints and logs


def test_gradients_are_left_as_they_are_by_one_process():
    layer = torch.nn.Linear(3, 2)
    frozen = torch.nn.Parameter(torch.ones(2))  # no gradient: skipped, not a crash
    layer(torch.arange(3.0)).sum().backward()
    before = [p.grad.clone() for p in layer.parameters()]
    Distributed().average_gradients([*layer.parameters(), frozen])
    assert all(torch.equal(p.grad, b) for p, b in zip(layer.parameters(), before, strict=True))
    assert frozen.grad is None


def test_a_step_without_gradients_reduces_nothing_even_with_several_processes():
    """An all-reduce of no tensors would fail (torch.cat of nothing); no gradient means nothing to average."""
    Distributed(rank=0, world_size=2).average_gradients([torch.nn.Parameter(torch.zeros(2))])


def test_logged_values_and_rank_0s_decisions_are_one_processs_own():
    values = {"loss": 0.25, "mrr": 0.5}
    assert Distributed().mean(values, CPU) == {"loss": 0.25, "mrr": 0.5}
    assert Distributed().from_main(True, CPU) is True and Distributed().from_main(120, CPU) == 120
