"""Closed-form parameter accounting (ARCHITECTURE.md section 9).

The same formulas must equal sum(p.numel()) of the instantiated tiny and micro models, which is what
makes the full-scale numbers on the pages trustworthy: they come from the code that was checked.
"""
from __future__ import annotations

from dataclasses import dataclass

from model.config import K3Config

# Display order of the breakdown, largest share first at K3 scale.
COMPONENTS = (
    "routed experts", "shared experts", "KDA attention", "MLA attention", "dense FFN (layer 0)",
    "latent projections", "router", "embedding", "LM head", "norms + AttnRes",
)


@dataclass(frozen=True)
class ParamCount:
    total: int
    active: int
    breakdown: dict          # component -> total parameters
    active_breakdown: dict   # component -> parameters used by one token

    @property
    def active_share(self) -> float:
        return self.active / self.total


def kda_layer(cfg: K3Config) -> int:
    d, H, dk, P, c = cfg.d_model, cfg.kda_heads, cfg.kda_head_dim, cfg.kda_proj, cfg.kda_conv
    return (3 * d * P          # W_q, W_k, W_v
            + 3 * P * c        # depthwise causal convs
            + H                # A_log
            + d * dk + dk * P  # low-rank decay d -> d_k -> P
            + P                # dt_bias
            + d * H            # beta
            + d * P            # full-rank output gate
            + dk               # per-head output RMSNorm gain (shared across heads)
            + P * d)           # W_o


def mla_layer(cfg: K3Config) -> int:
    d, H = cfg.d_model, cfg.mla_heads
    qr, kvr = cfg.q_lora_rank, cfg.kv_lora_rank
    nope, rope, v = cfg.qk_nope_dim, cfg.qk_rope_dim, cfg.v_head_dim
    gate = d * H * v if cfg.mla_gate else 0
    return (d * qr + qr + qr * H * (nope + rope)      # W_dq, its norm, W_uq
            + d * (kvr + rope) + kvr                  # W_dkv, latent norm
            + kvr * H * (nope + v)                    # W_ukv
            + H * v * d + gate)                       # W_o and the per-channel output gate


def glu(d_in: int, hidden: int) -> int:
    return 3 * d_in * hidden


def moe_parts(cfg: K3Config) -> dict:
    d, E, w, f = cfg.d_model, cfg.n_routed_experts, cfg.expert_width, cfg.expert_hidden
    latent = (d * w + w * d + w) if cfg.latent_dim else 0   # W_down, W_up, RMSNorm(l) with gain
    return {
        "router": E * d,
        "latent projections": latent,
        "shared experts": glu(d, cfg.n_shared_experts * cfg.shared_hidden),
        "routed experts": E * glu(w, f),
    }


def per_layer_norms(cfg: K3Config) -> int:
    # two pre-norms; with AttnRes also a key-norm gain and a query vector for each of the two reads
    return 2 * cfg.d_model + (4 * cfg.d_model if cfg.attnres else 0)


def count_params(cfg: K3Config) -> ParamCount:
    d, V = cfg.d_model, cfg.vocab_size
    parts = dict.fromkeys(COMPONENTS, 0)
    parts["embedding"] = V * d
    parts["LM head"] = V * d
    parts["norms + AttnRes"] = d + (2 * d if cfg.attnres else 0)   # final norm (+ output read)
    for i, kind in enumerate(cfg.layer_types):
        parts["KDA attention" if kind == "kda" else "MLA attention"] += (
            kda_layer(cfg) if kind == "kda" else mla_layer(cfg))
        parts["norms + AttnRes"] += per_layer_norms(cfg)
        if cfg.is_moe(i):
            for k, v in moe_parts(cfg).items():
                parts[k] += v
        else:
            parts["dense FFN (layer 0)"] += glu(d, cfg.dense_hidden)

    n_moe = len(cfg.moe_layers)
    idle_experts = (cfg.n_routed_experts - cfg.top_k) * glu(cfg.expert_width, cfg.expert_hidden) * n_moe
    active = dict(parts)
    active["embedding"] = 0                       # a lookup, not a matmul
    active["routed experts"] -= idle_experts
    total = sum(parts.values())
    return ParamCount(total=total, active=sum(active.values()),
                      breakdown={k: v for k, v in parts.items() if v},
                      active_breakdown={k: v for k, v in active.items() if v})


def mtp_layer(cfg: K3Config) -> ParamCount:
    """One DeepSeek-V3-style multi-token-prediction module (two input norms, the 2d -> d projection,
    one full MoE layer, a final norm; embedding and head shared with the main model). Kimi K2's
    published 1.04T includes one; its main model is what count_params gives."""
    d = cfg.d_model
    attn = mla_layer(cfg) if cfg.layer_types[-1] == "mla" else kda_layer(cfg)
    moe = sum(moe_parts(cfg).values())
    total = 2 * d + 2 * d * d + attn + moe + per_layer_norms(cfg) + d
    idle = (cfg.n_routed_experts - cfg.top_k) * glu(cfg.expert_width, cfg.expert_hidden)
    return ParamCount(total=total, active=total - idle, breakdown={}, active_breakdown={})
