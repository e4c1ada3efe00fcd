"""RMSNorm, with and without a learned gain (ARCHITECTURE.md: eps 1e-5 unless stated)."""
from __future__ import annotations

import torch
from torch import nn

from model import fast


def rms_norm(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    # No gain: used for AttnRes keys. Computed in fp32 (or fp64 if given), returned in that dtype.
    x = x if x.dtype == torch.float64 else x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if fast.usable(x, self.weight):              # inference: one compiled call (model/fast.py)
            return fast.rms_norm(x, self.weight, self.eps)
        return (rms_norm(x, self.eps) * self.weight).to(x.dtype)
