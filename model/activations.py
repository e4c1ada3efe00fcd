"""SiTU-GLU (K3 report, every FFN) and SwiGLU for comparison (ARCHITECTURE.md section 4)."""
from __future__ import annotations

import torch
from torch import nn

from model.config import BETA_GATE, BETA_UP  # noqa: F401 - SiTU-GLU's bounds, named here too


def situ_glu(gate: torch.Tensor, up: torch.Tensor, beta_gate: float = BETA_GATE,
             beta_up: float = BETA_UP) -> torch.Tensor:
    # [beta_g tanh(g / beta_g) sigmoid(g)] * [beta_u tanh(u / beta_u)], computed in fp32
    dt = gate.dtype
    g = gate if dt == torch.float64 else gate.float()
    u = up if dt == torch.float64 else up.float()
    out = (beta_gate * torch.tanh(g / beta_gate) * torch.sigmoid(g)) * (beta_up * torch.tanh(u / beta_up))
    return out.to(dt)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return nn.functional.silu(gate) * up


ACTIVATIONS = {"situ_glu": situ_glu, "swiglu": swiglu}


class GLUFFN(nn.Module):
    """act(x W_gate, x W_up) W_down: the dense layer-0 FFN, a shared expert block, or one expert."""

    def __init__(self, d_in: int, hidden: int, activation: str = "situ_glu"):
        super().__init__()
        self.activation = activation
        self.w_gate = nn.Linear(d_in, hidden, bias=False)
        self.w_up = nn.Linear(d_in, hidden, bias=False)
        self.w_down = nn.Linear(hidden, d_in, bias=False)

    def forward(self, x: torch.Tensor, activation: str | None = None) -> torch.Tensor:
        act = ACTIVATIONS[activation or self.activation]
        return self.w_down(act(self.w_gate(x), self.w_up(x)))

    def parts(self, x: torch.Tensor, activation: str | None = None) -> dict[str, torch.Tensor]:
        """g = x W_gate, u = x W_up, the hidden act(g, u) and the output, by name (`out` = forward(x))."""
        act = ACTIVATIONS[activation or self.activation]
        g, u = self.w_gate(x), self.w_up(x)
        h = act(g, u)
        return {"gate": g, "up": u, "hidden": h, "out": self.w_down(h)}
