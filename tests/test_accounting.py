"""Closed-form accounting against the published totals (K3 report Table 1; K2 paper)."""
import pytest

from model.accounting import count_params, kda_layer, mla_layer, mtp_layer
from model.config import K3Config


def test_k3_full_total_and_active_match_published():
    p = count_params(K3Config.full())
    # ARCHITECTURE.md section 9 / K3 report: 2,779.5B total, 104.19B active (published 2.78T / 104.2B)
    assert p.total == pytest.approx(2_779.5e9, rel=1e-3)
    assert p.active == pytest.approx(104.19e9, rel=1e-3)
    assert 0.0365 < p.active_share < 0.0385          # "about 3.7% of the weights per token"


def test_kimi_k2_main_model_and_mtp():
    k2 = K3Config.kimi_k2()
    p = count_params(k2)
    assert p.total == pytest.approx(1_026.4e9, rel=1e-3)  # main model
    assert p.active == pytest.approx(31.7e9, rel=2e-3)
    # published 1.04T includes one multi-token-prediction layer
    assert round((p.total + mtp_layer(k2).total) / 1e12, 2) == 1.04


def test_routed_experts_hold_98_percent_of_k3():
    p = count_params(K3Config.full())
    assert p.breakdown["routed experts"] / p.total == pytest.approx(0.98, abs=0.005)
    assert sum(p.breakdown.values()) == p.total
    assert sum(p.active_breakdown.values()) == p.active
    assert "embedding" not in p.active_breakdown


def test_active_counts_exactly_top_k_experts():
    c = K3Config.micro()
    p = count_params(c)
    per_expert = 3 * c.latent_dim * c.expert_hidden
    assert p.active_breakdown["routed experts"] == c.top_k * per_expert * len(c.moe_layers)
    # more experts stored, the same expert work per token: the point of sparsity (only the router,
    # which scores every expert, grows in the active count)
    q = count_params(c.with_(n_routed_experts=4 * c.n_routed_experts))
    assert q.active_breakdown["routed experts"] == p.active_breakdown["routed experts"]
    assert q.total - p.total > 2 * (q.active - p.active) > 0


def test_mla_gate_and_layer_formulas_respond_to_config():
    c = K3Config.micro()
    d, H, v = c.d_model, c.mla_heads, c.v_head_dim
    assert mla_layer(c) - mla_layer(c.with_(mla_gate=False)) == d * H * v
    # KDA: the q/k/v/gate/output projections dominate: 5 d P of the layer at K3 scale
    f = K3Config.full()
    assert 5 * f.d_model * f.kda_proj / kda_layer(f) == pytest.approx(1.0, abs=0.01)
