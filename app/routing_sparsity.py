"""The Routing explorer's sparsity cards in numbers: what share of the experts, of the expert weights and of all
parameters a token uses with the person's top-k, in the live instance and at K3 scale. Every count comes from
the parameter accounting (model/accounting.py), with the current k in the layers the re-routing touches."""
from __future__ import annotations

from collections.abc import Mapping

from app.routing import Rerouting
from model.accounting import count_params, moe_parts
from model.config import K3Config


def expert_weights(cfg: K3Config) -> tuple[int, int]:
    """(all routed experts' weights, the shared experts' weights) of one MoE layer."""
    parts = moe_parts(cfg)
    return parts["routed experts"], parts["shared experts"]


def active_params(cfg: K3Config, ks: Mapping[int, int]) -> tuple[int, int]:
    """(total, active per token) when MoE layer l routes each token to ks[l] experts (others: top_k):
    count_params with the idle experts of each layer recounted."""
    p = count_params(cfg)
    per_expert = expert_weights(cfg)[0] // cfg.n_routed_experts
    extra = sum((k - cfg.top_k) * per_expert for l, k in ks.items() if cfg.is_moe(l))
    return p.total, p.active + extra


def sparsity(settings: Rerouting, layer: int, live_cfg: K3Config) -> dict:
    """Numbers for the sparsity cards, for the live instance and at K3 scale, with the current k
    applied where the settings apply it."""
    E = live_cfg.n_routed_experts
    k = settings.k(E)
    layers = settings.layers(layer, live_cfg) if settings.override(live_cfg) else []
    ks = {l: k for l in layers}
    full = K3Config.full()
    live_total, live_active = active_params(live_cfg, ks)
    full_total, full_active = active_params(full, ks)
    moe, shared = expert_weights(live_cfg)
    moe_full, shared_full = expert_weights(full)
    return {
        "k": k, "experts": E, "routed_share": k / E, "sparsity": E / k, "layers": len(layers),
        # one MoE layer at this k: routed + shared expert weights a token uses / all expert weights
        "expert_share_live": (k * moe / E + shared) / (moe + shared),
        "expert_share_full": (k * moe_full / full.n_routed_experts + shared_full) / (moe_full + shared_full),
        # a shared expert works on the full-width token, a routed one in the latent space: its weights, in routed experts
        "shared_per_routed_full": shared_full / full.n_shared_experts / (moe_full / full.n_routed_experts),
        "full_width": full.d_model, "latent_width": full.expert_width,
        "live_total": live_total, "live_active": live_active,
        "full_total": full_total, "full_active": full_active,
    }
