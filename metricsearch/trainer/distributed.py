"""Several training processes started by torchrun, or one: what the loop needs of torch.distributed."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as torch_dist
from torch import nn


class Distributed:
    """torch.distributed when torchrun started several processes, nothing otherwise. Gradients are averaged by
    hand (one flat all-reduce) rather than through DistributedDataParallel, which expects one forward per step,
    while the objectives run two or three and an MLM head outside the model."""

    def __init__(self, rank: int = 0, world_size: int = 1) -> None:
        self.rank, self.world_size = rank, world_size

    @property
    def main(self) -> bool:
        return self.rank == 0

    def average_gradients(self, parameters: Sequence[nn.Parameter]) -> None:
        grads = [p.grad for p in parameters if p.grad is not None]
        if self.world_size == 1 or not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        torch_dist.all_reduce(flat)
        flat /= self.world_size
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    def mean(self, values: dict[str, float], device: torch.device) -> dict[str, float]:
        if self.world_size == 1:
            return values
        keys = sorted(values)
        tensor = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=device)
        torch_dist.all_reduce(tensor)
        return dict(zip(keys, (tensor / self.world_size).tolist(), strict=True))

    def from_main(self, value: int, device: torch.device) -> int:
        """Rank 0's decision (stop, the planned steps), so every process leaves the loop at the same step."""
        if self.world_size == 1:
            return value
        tensor = torch.tensor([int(value)], dtype=torch.int64, device=device)
        torch_dist.broadcast(tensor, src=0)
        return int(tensor.item())
