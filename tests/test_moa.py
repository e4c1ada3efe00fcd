"""MoE vs Mixture of Agents page data and charts (app/moe_vs_moa.py, app/charts/moe_vs_moa.py)."""
import numpy as np
import pytest

from app import moe_vs_moa
from app.charts import moe_vs_moa as charts


def test_sizes_and_matching():
    lo, hi = moe_vs_moa.size_bounds()
    assert lo == 39 and hi == 2780                      # K3's attention + embeddings 38.5B; total 2,779.5B
    assert moe_vs_moa.matched_size(8) == 347 and moe_vs_moa.matched_size(1) == 2779
    assert moe_vs_moa.matched_size(64) == 43
    assert all(lo <= moe_vs_moa.matched_size(n) <= hi for n in moe_vs_moa.N_AGENTS)


def test_scenario_uses_the_chosen_bandwidth_and_precision():
    s = moe_vs_moa.scenario(8, 347, 32_768, 1_024, 4.8, "bf16")
    assert s.accel.bandwidth == 4.8e12 and "H200" in s.accel.name and s.agent_bits == 16
    t = moe_vs_moa.scenario(8, 347, 32_768, 1_024, 9.6, "mxfp4")
    assert t.accel.bandwidth == 9.6e12 and "9.6" in t.accel.name and t.agent_bits == 4.25


def test_cost_table_ratios():
    s = moe_vs_moa.scenario(8, 347, 32_768, 1_024, 4.8, "bf16")
    table, k3, m = moe_vs_moa.cost_table(s)
    r = table.set_index("cost")["ratio"]
    assert r["Peak cache memory"] == pytest.approx(8.0)
    assert r["Weight memory"] == pytest.approx(8 * 347 * 2 / 1559.94, rel=1e-3)      # bf16 agents vs K3's bytes
    assert r["Time to the full answer"] > 5 and r["FLOPs per answer token"] > 10
    assert k3.flops_per_token == pytest.approx(k3.flops / 1024)
    # halving the agents' bits halves their weight memory
    half = moe_vs_moa.cost_table(moe_vs_moa.scenario(8, 347, 32_768, 1_024, 4.8, "fp8"))[0].set_index("cost")["ratio"]
    assert half["Weight memory"] == pytest.approx(r["Weight memory"] / 2, rel=1e-6)


def test_sweep_and_step_breakdown():
    s = moe_vs_moa.scenario(8, 347, 32_768, 1_024, 4.8, "bf16")
    sw = moe_vs_moa.context_sweep(s)
    assert sw["context"].tolist() == moe_vs_moa.CONTEXTS
    assert (sw.drop(columns="context") > 1).all().all()
    b = moe_vs_moa.step_breakdown(s)
    assert set(b["model"]) == {"Kimi K3", "one agent (347B)"}
    k3w = b[(b["model"] == "Kimi K3") & (b["part"] == "active weights")]["bytes"].item()
    assert k3w / 1e9 == pytest.approx(136.97, abs=0.01)
    assert b["ms at the bandwidth"].iloc[0] == pytest.approx(k3w / 4.8e12 * 1e3)


def test_text_tables():
    s = moe_vs_moa.scenario(4, 500, 8_192, 256, 4.8, "bf16")
    table, k3, m = moe_vs_moa.cost_table(s)
    q = moe_vs_moa.qualitative(s, table, k3, m)
    assert q["aspect"].tolist() == ["Differentiability", "Latency", "KV cache", "Compute", "Modularity"]
    assert f"{table.set_index('cost')['ratio']['Peak cache memory']:.1f}x" in q.set_index("aspect").loc["KV cache"].iloc[-1]
    assert any("4.8 TB/s" in a for a in moe_vs_moa.assumptions(s))
    assert moe_vs_moa.show(0.0123, "seconds") == "12.3 ms" and moe_vs_moa.show(2.5, "seconds") == "2.5 s"


def test_cost_chart_panels_carry_the_ratios_and_the_values():
    s = moe_vs_moa.scenario(8, 347, 32_768, 1_024, 4.8, "bf16")
    table, _, m = moe_vs_moa.cost_table(s)
    spec = charts.costs_spec(table, m.name)
    titles = {p["title"]["text"]: p["title"]["subtitle"] for p in spec["hconcat"]}
    assert list(titles) == ["FLOPs per answer token", "Peak cache memory", "Time to the full answer", "Weight memory"]
    assert titles["Peak cache memory"] == "MoA / K3 = 8.0x"                       # 8 agents hold 8 caches
    assert titles["Weight memory"] == f"MoA / K3 = {8 * 347 * 2 / 1559.94:.1f}x"   # bf16 agents vs K3's 1,559.94 GB
    bars = spec["datasets"]["costs"].set_index(["cost", "side"])
    assert bars.loc[("Weight memory", "MoA"), "value"] == pytest.approx(8 * 347 * 2)     # GB: 8 x 347B x 2 bytes
    assert bars.loc[("Weight memory", "MoA"), "label"] == "5,552 GB"
    assert bars.loc[("Weight memory", "K3"), "value"] == pytest.approx(1559.94, abs=0.01)
    assert bars.loc[("Peak cache memory", "MoA"), "model"] == m.name
    assert spec["usermeta"]["embedOptions"]["renderer"] == "svg"                   # the ratios are text on the page
    for panel in spec["hconcat"]:                                                  # every bar fits under its panel's top
        name = panel["title"]["text"]
        assert panel["layer"][0]["encoding"]["y"]["scale"]["domain"][1] > bars.loc[name, "value"].max()


def test_sweep_chart_log_axes_and_reference_lines():
    s = moe_vs_moa.scenario(8, 347, 32_768, 1_024, 4.8, "bf16")
    spec = charts.sweep_spec(moe_vs_moa.context_sweep(s), 32_768)
    ratios = spec["datasets"]["ratios"]
    assert len(ratios) == 4 * 11 and sorted(set(ratios["context"])) == [2 ** k for k in range(10, 21)]
    cache = ratios[ratios["ratio of"] == "peak cache"]["ratio"]
    np.testing.assert_allclose(cache, 8.0, rtol=1e-9)          # 8 proposer caches, each K3's size, at every length
    lines = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "line")["encoding"]
    assert lines["x"]["scale"]["type"] == "log" and lines["y"]["scale"]["type"] == "log"
    lo, hi = lines["y"]["scale"]["domain"]
    assert lo <= 1 <= hi and lo <= ratios["ratio"].min() and ratios["ratio"].max() <= hi     # the 1x line is in view
    assert spec["datasets"]["chosen"]["context"].tolist() == [32_768]
    rules = [layer for layer in spec["layer"] if layer["mark"]["type"] == "rule"]
    assert [r["mark"]["strokeDash"] for r in rules] == [[6, 4], [2, 3]]           # equal cost dashed, context dotted
    assert any(layer["encoding"].get("text") == {"value": "equal cost"} for layer in spec["layer"])


def test_step_chart_stacks_weights_and_cache():
    s = moe_vs_moa.scenario(8, 347, 32_768, 1_024, 4.8, "bf16")
    spec = charts.step_spec(moe_vs_moa.step_breakdown(s))
    step = spec["datasets"]["step"]
    k3 = step[step["model"] == "Kimi K3"].set_index("part")
    assert k3.loc["active weights", "GB"] == pytest.approx(136.97, abs=0.01)
    np.testing.assert_allclose(step["ms"], step["GB"] / 4.8)                  # 1 GB at 4.8 TB/s: 1/4.8 ms
    totals = spec["datasets"]["totals"].set_index("model")
    assert totals.loc["one agent (347B)", "GB"] == pytest.approx(step[step["model"] == "one agent (347B)"]["GB"].sum())
    agent = step[step["model"] == "one agent (347B)"].set_index("part")
    assert 0.99 * 347 * 2 < agent.loc["active weights", "GB"] < 347 * 2       # all bf16 weights but the embedding
    cache = "cache at 32K tokens"
    assert agent.loc[cache, "GB"] == pytest.approx(k3.loc[cache, "GB"])        # K3's own attention stack, its cache
    assert totals.loc["Kimi K3", "label"].startswith("138 GB → 28.")
    assert spec["layer"][0]["encoding"]["x"]["stack"] == "zero"
