"""The cost model (model/cost.py) against numbers worked out by hand from ARCHITECTURE.md section 9
(2,779.5B total, 104.19B active; routed experts 2,722.7B total, 48.62B active) and NVIDIA's published
H200 figures (4.8 TB/s; 1,979 TFLOPS BF16 with sparsity)."""
from dataclasses import replace

import pytest

from model import cost
from model.config import K3Config

GB = 1e9
ROUTED_B, ROUTED_ACTIVE_B = 2722.74083, 48.62037     # billions, accounting (ARCHITECTURE.md section 9 totals)
TOTAL_B, ACTIVE_B = 2779.48439, 104.18953
EMBED_B = 163_840 * 7168 / 1e9                          # 1.174B: the embedding lookup


def test_k3_weight_bytes_at_4_25_bits_for_experts_only():
    parts = cost.weight_bytes()
    routed = next(w for w in parts if w.component == "routed experts")
    assert routed.bits == 4.25                                            # 4-bit codes + 8-bit scale per 32
    assert routed.params / 1e9 == pytest.approx(ROUTED_B, abs=1e-4)
    # 2,722.7B values x 4.25 / 8 bytes, everything else 2 bytes
    assert routed.bytes_k3 == pytest.approx(ROUTED_B * GB * 4.25 / 8, rel=1e-6)
    assert cost.total_bytes(parts, "k3") == pytest.approx(ROUTED_B * GB * 4.25 / 8 + (TOTAL_B - ROUTED_B) * GB * 2,
                                                          rel=1e-6)
    assert cost.total_bytes(parts, "k3") / 1e12 == pytest.approx(1.56, abs=0.005)           # 1.446 + 0.113 TB
    assert cost.total_bytes(parts, "bf16") / 1e12 == pytest.approx(5.559, abs=0.001)        # 2,779.5B x 2
    assert all(w.bits == 16 for w in parts if w.component != "routed experts")
    with pytest.raises(ValueError):
        cost.total_bytes(parts, "fp8")


def test_active_bytes_per_token():
    parts = cost.weight_bytes()
    want = ROUTED_ACTIVE_B * GB * 4.25 / 8 + (ACTIVE_B - ROUTED_ACTIVE_B) * GB * 2      # 25.8 + 111.1 GB
    assert cost.total_bytes(parts, "k3", active=True) == pytest.approx(want, rel=1e-6)
    assert want / GB == pytest.approx(136.97, abs=0.01)


def test_bandwidth_bound_of_104b_at_4_25_bits_is_milliseconds():
    # 104.19e9 x 4.25 / 8 = 55.35 GB; / 4.8 TB/s = 11.53 ms
    t = cost.bandwidth_bound_step(ACTIVE_B * GB, 4.25, 4.8e12)
    assert t == pytest.approx(0.011531, rel=1e-3)
    assert t > 10_000 * 1e-6


def test_attention_flops_per_layer():
    cfg = K3Config.full()
    assert cost.mla_flops_per_cached_token(cfg) == 2 * 96 * (2 * 512 + 64) == 208_896
    assert cost.kda_flops_per_token(cfg) == 7 * 96 * 128 * 128
    assert cost.attention_flops(cfg, 1000) == pytest.approx(69 * 7 * 96 * 128 ** 2 + 24 * 208_896 * 1000)


def test_k3_decode_step_by_hand():
    k3 = cost.k3_decoder()
    kda_state_bytes = 2 * 69 * (96 * 128 * 128 + 3 * 3 * 96 * 128)        # bf16 states + conv tails
    step = (136.967889088 * GB + kda_state_bytes) / 4.8e12
    assert cost.decode_time(k3, 0, 1) == pytest.approx(step, rel=1e-6)
    # one token later the 24 MLA layers each hold one more 576-value row
    assert cost.decode_time(k3, 1, 1) - cost.decode_time(k3, 0, 1) == pytest.approx(24 * 576 * 2 / 4.8e12, rel=1e-6)
    assert k3.flops(0) == pytest.approx(2 * ACTIVE_B * GB + 69 * 7 * 96 * 128 ** 2, rel=1e-6)


def test_decode_flops_sum_equals_step_by_step():
    k3 = cost.k3_decoder()
    steps = sum(float(k3.flops(t)) for t in range(100, 110))
    assert cost.decode_flops(k3, 100, 10) == pytest.approx(steps, rel=1e-12)


def test_matched_agents_and_per_step_ratio():
    s = cost.Scenario(n_agents=8, context=1, output=1)
    assert cost.agent_size(s) / 1e9 == pytest.approx(TOTAL_B / 8, rel=1e-6)               # 347.4B
    agent = cost.dense_agent(cost.agent_size(s))
    assert agent.weight_bytes == pytest.approx((TOTAL_B / 8 - EMBED_B) * GB * 2, rel=1e-6)  # 692.5 GB
    # per decode step, bandwidth-bound: (692.5 + cache) / (137.0 + cache) ~ 5.05
    assert cost.ratios(s)["step"] == pytest.approx(5.05, abs=0.01)


def test_moa_timeline_by_hand():
    # 2 agents of 1,000B in bf16, empty prompt, 1-token answers: each of the three phases (proposers,
    # aggregator reading 2 tokens, aggregator writing 1) reads the weights once, about 0.4162 s each.
    s = cost.Scenario(n_agents=2, agent_params=1000e9, context=0, output=1)
    per_read = (1000 - EMBED_B) * GB * 2 / 4.8e12
    assert cost.moa_cost(s).seconds == pytest.approx(3 * per_read, rel=1e-3)
    one = cost.moa_cost(replace(s, n_agents=1))                           # one dense model: no aggregation
    assert one.seconds == pytest.approx(per_read, rel=1e-3)


def test_moa_of_eight_costs_more_everywhere():
    for T in (1024, 32_768, 1_048_576):
        for bits in (16.0, 8.0, 4.25):
            r = cost.ratios(cost.Scenario(context=T, agent_bits=bits))
            assert r["flops"] > 1 and r["cache"] >= 8 and r["seconds"] > 1
    # cache: 8 proposer caches vs K3's one (the aggregator's 8K extra tokens are smaller at 32K)
    assert cost.ratios(cost.Scenario())["cache"] == pytest.approx(8.0)


def test_bandwidth_changes_times_not_flops():
    s = cost.Scenario()
    fast = replace(s, accel=replace(cost.H200, bandwidth=9.6e12))
    a, b = cost.k3_cost(s), cost.k3_cost(fast)
    assert b.flops == a.flops and b.cache_bytes == a.cache_bytes
    assert b.seconds == pytest.approx(a.seconds / 2, rel=1e-3)           # bandwidth-bound at batch 1


def test_agent_smaller_than_attention_stack_is_refused():
    core = cost.attention_core()
    assert core / 1e9 == pytest.approx(38.54, abs=0.01)                  # KDA + MLA + embedding + head + norms
    with pytest.raises(ValueError):
        cost.dense_agent(core - 1)
