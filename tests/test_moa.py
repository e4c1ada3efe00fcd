"""MoE vs Mixture of Agents page data and charts (app/moa.py, app/charts/moa.py)."""
import pytest

from app import moa
from app.charts import moa as charts


def test_sizes_and_matching():
    lo, hi = moa.size_bounds()
    assert lo == 39 and hi == 2780                      # K3's attention + embeddings 38.5B; total 2,779.5B
    assert moa.matched_size(8) == 347 and moa.matched_size(1) == 2779
    assert moa.matched_size(64) == 43
    assert all(lo <= moa.matched_size(n) <= hi for n in moa.N_AGENTS)


def test_scenario_uses_the_chosen_bandwidth_and_precision():
    s = moa.scenario(8, 347, 32_768, 1_024, 4.8, "bf16")
    assert s.accel.bandwidth == 4.8e12 and "H200" in s.accel.name and s.agent_bits == 16
    t = moa.scenario(8, 347, 32_768, 1_024, 9.6, "mxfp4")
    assert t.accel.bandwidth == 9.6e12 and "9.6" in t.accel.name and t.agent_bits == 4.25


def test_cost_table_ratios():
    s = moa.scenario(8, 347, 32_768, 1_024, 4.8, "bf16")
    table, k3, m = moa.cost_table(s)
    r = table.set_index("cost")["ratio"]
    assert r["Peak cache memory"] == pytest.approx(8.0)
    assert r["Weight memory"] == pytest.approx(8 * 347 * 2 / 1559.94, rel=1e-3)      # bf16 agents vs K3's bytes
    assert r["Time to the full answer"] > 5 and r["FLOPs per answer token"] > 10
    assert k3.flops_per_token == pytest.approx(k3.flops / 1024)
    # halving the agents' bits halves their weight memory
    half = moa.cost_table(moa.scenario(8, 347, 32_768, 1_024, 4.8, "fp8"))[0].set_index("cost")["ratio"]
    assert half["Weight memory"] == pytest.approx(r["Weight memory"] / 2, rel=1e-6)


def test_sweep_and_step_breakdown():
    s = moa.scenario(8, 347, 32_768, 1_024, 4.8, "bf16")
    sw = moa.context_sweep(s)
    assert sw["context"].tolist() == moa.CONTEXTS
    assert (sw.drop(columns="context") > 1).all().all()
    b = moa.step_breakdown(s)
    assert set(b["model"]) == {"Kimi K3", "one agent (347B)"}
    k3w = b[(b["model"] == "Kimi K3") & (b["part"] == "active weights")]["bytes"].item()
    assert k3w / 1e9 == pytest.approx(136.97, abs=0.01)
    assert b["ms at the bandwidth"].iloc[0] == pytest.approx(k3w / 4.8e12 * 1e3)


def test_text_tables():
    s = moa.scenario(4, 500, 8_192, 256, 4.8, "bf16")
    table, k3, m = moa.cost_table(s)
    q = moa.qualitative(s, table, k3, m)
    assert q["aspect"].tolist() == ["Differentiability", "Latency", "KV cache", "Compute", "Modularity"]
    assert f"{table.set_index('cost')['ratio']['Peak cache memory']:.1f}x" in q.set_index("aspect").loc["KV cache"].iloc[-1]
    assert any("4.8 TB/s" in a for a in moa.assumptions(s))
    assert moa.show(0.0123, "seconds") == "12.3 ms" and moa.show(2.5, "seconds") == "2.5 s"


def test_figures():
    s = moa.scenario(8, 347, 32_768, 1_024, 4.8, "bf16")
    table, _, m = moa.cost_table(s)
    f = charts.costs_figure(table, m.name)
    assert len(f.data) == 4 and all("MoA / K3" in a.text for a in f.layout.annotations)
    sw = charts.sweep_figure(moa.context_sweep(s), 32_768)
    assert sw.layout.xaxis.type == "log" and len(sw.data) == 4
    assert len(charts.step_figure(moa.step_breakdown(s)).data) == 2
