"""Weights under MX rounding: blocks of the live model's expert weights, the scales the checkpoint stores for them,
the error of rounding each weight matrix of a layer, and K3's weight memory by precision (model/cost.py). Pure
functions of the model or the config; the Quantization lab's layer and K3-scale sections."""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from app.quantization_blocks import BLOCK
from model import cost
from model.checkpoint import is_expert_tensor
from model.config import K3Config
from model.k3 import K3Model
from model.quant import bits_per_value, mx_fake_quant, pack_mxfp4

COARSE_BLOCK = 128
MATRICES = ("w_gate", "w_up", "w_down")


# ---- the live weights -----------------------------------------------------------------------------

def blocks_per_tensor(model: K3Model, source: str) -> int:
    cfg = model.cfg
    if source == "routed":
        return max(1, cfg.expert_width * cfg.expert_hidden // BLOCK)           # one expert's matrix
    layer = model.layers[cfg.moe_layers[0]].ffn
    return -(-layer.shared.w_gate.weight.numel() // BLOCK)


def weight_block(model: K3Model, layer: int, matrix: str, source: str, block: int, expert: int = 0) -> np.ndarray:
    """32 consecutive values of the row-major flattening of one expert's matrix (or a shared expert's)."""
    ffn = model.layers[layer].ffn
    if source == "routed":
        t = getattr(ffn, matrix)[expert].reshape(-1)
    else:
        t = getattr(ffn.shared, matrix).weight.reshape(-1)
    return t[block * BLOCK:(block + 1) * BLOCK].detach().double().numpy()


def layer_scale_exponents(model: K3Model, layer: int) -> pd.DataFrame:
    """E of every MXFP4 block of the layer's three routed-expert tensors: the stored E8M0 bytes - 127
    (blocks of 32 along each expert's flattening; each expert holds a whole number of blocks)."""
    ffn = model.layers[layer].ffn
    rows = []
    for m in MATRICES:
        t = getattr(ffn, m).detach()
        _, scales = pack_mxfp4(t.float())
        e = scales.to(torch.int64).numpy() - 127
        vals, counts = np.unique(e, return_counts=True)
        rows += [{"matrix": m, "exponent": int(x), "blocks": int(c)} for x, c in zip(vals, counts)]
    return pd.DataFrame(rows)


_LABELS = {
    "attn.w_dq.weight": "MLA query down", "attn.w_uq.weight": "MLA query up", "attn.w_dkv.weight": "MLA latent down",
    "attn.w_ukv.weight": "MLA latent up", "attn.w_g.weight": "MLA output gate", "attn.w_o.weight": "MLA output",
    "attn.in_proj.weight": "KDA q/k/v/beta/decay in", "attn.W_fb.weight": "KDA gate up",
    "attn.out_proj.weight": "KDA output",
    "ffn.router.weight": "router", "ffn.down.weight": "latent down (d → l)", "ffn.up.weight": "latent up (l → d)",
    "ffn.shared.w_gate.weight": "shared experts gate", "ffn.shared.w_up.weight": "shared experts up",
    "ffn.shared.w_down.weight": "shared experts down", "ffn.w_gate": "routed experts gate",
    "ffn.w_up": "routed experts up", "ffn.w_down": "routed experts down",
}


def is_matrix(name: str, p: torch.Tensor) -> bool:
    # weight matrices (nn.Linear [out, in] and the stacked experts); not norms, convolution taps,
    # per-head vectors like dt_bias, or AttnRes queries
    return is_expert_tensor(name) or (name.endswith(".weight") and p.dim() == 2)


def quantise(name: str, t: torch.Tensor, fmt: str, block: int) -> torch.Tensor:
    if is_expert_tensor(name):       # each expert's flattening, as the model and the checkpoint block it
        return mx_fake_quant(t.reshape(t.shape[0], -1), fmt, block, per_row=True).reshape(t.shape)
    return mx_fake_quant(t, fmt, block)


def _rel_error(q: torch.Tensor, t: torch.Tensor) -> float:
    n = float(t.norm())
    return float((q - t).norm()) / n if n else 0.0


def layer_errors(model: K3Model, layer: int) -> pd.DataFrame:
    """Relative RMS error ||Q(W) - W|| / ||W|| of every weight matrix of one layer, for MXFP4 (blocks of
    32 and of 128) and MXFP8; what each is stored as in the checkpoint."""
    rows = []
    for name, p in model.layers[layer].named_parameters():
        full = f"layers.{layer}.{name}"
        if not is_matrix(full, p):
            continue
        t = p.detach().double()
        expert = is_expert_tensor(full)
        rows.append({
            "tensor": _LABELS.get(name, name), "name": full, "stored as": "MXFP4" if expert else "bf16",
            "values": t.numel(),
            "MXFP4, blocks of 32": _rel_error(quantise(full, t, "e2m1", BLOCK), t),
            "MXFP4, blocks of 128": _rel_error(quantise(full, t, "e2m1", COARSE_BLOCK), t),
            "MXFP8, blocks of 32": _rel_error(quantise(full, t, "e4m3", BLOCK), t),
        })
    return pd.DataFrame(rows)


def experts_already_mxfp4(model: K3Model, layer: int) -> bool:
    """True when re-quantising the layer's expert weights to MXFP4 (blocks of 32) changes nothing."""
    ffn = model.layers[layer].ffn
    for m in MATRICES:
        t = getattr(ffn, m).detach()
        if not torch.equal(quantise(f"layers.{layer}.ffn.{m}", t, "e2m1", BLOCK), t):
            return False
    return True


# ---- K3 scale -------------------------------------------------------------------------------------

def k3_bytes_table(cfg: K3Config | None = None) -> pd.DataFrame:
    parts = cost.weight_bytes(cfg)
    rows = [{"component": w.component, "parameters": w.params, "K3 stores it as":
             (f"MXFP4 ({w.bits:g} bits)" if w.bits < 16 else
              "bf16 (published: kept in higher precision)" if w.basis == "published" else "bf16 (assumed)"),
             "bits per value": w.bits, "bytes, all bf16": w.bytes_bf16, "bytes, K3": w.bytes_k3,
             "active bytes per token, K3": w.active_bytes_k3} for w in parts]
    return pd.DataFrame(rows)


GB_COLUMNS = {"bytes, all bf16": "GB, all bf16", "bytes, K3": "GB, K3",
              "active bytes per token, K3": "GB read per token, K3"}


def k3_gb_table(cfg: K3Config | None = None) -> pd.DataFrame:
    """k3_bytes_table with its byte columns in GB (10^9 bytes), for display."""
    d = k3_bytes_table(cfg)
    return d.assign(**{c: d[c] / 1e9 for c in GB_COLUMNS}).rename(columns=GB_COLUMNS)


def k3_bytes_summary(cfg: K3Config | None = None) -> dict:
    parts = cost.weight_bytes(cfg)
    routed = next(w for w in parts if w.component == "routed experts")
    return {"bf16": cost.total_bytes(parts, "bf16"), "k3": cost.total_bytes(parts, "k3"),
            "routed_params": routed.params, "other_params": sum(w.params for w in parts) - routed.params,
            "bits": routed.bits, "active_k3": cost.total_bytes(parts, "k3", active=True),
            "active_bf16": cost.total_bytes(parts, "bf16", active=True),
            "bits_mxfp8": bits_per_value("e4m3")}
