"""SiTU-GLU page data: curves against closed forms written here, the FP8 crossing, the live experts'
activations against running LatentMoE itself, and the routed-path chain (ARCHITECTURE.md section 4)."""
import math

import numpy as np
import pytest
import torch

from app.charts.situ import chain_figure, factors_figure, grid_figure, histogram_figure, output_figure
from app.situ import (CAP, FP8_MAX, NAMES, chain_summary, chain_weights, curves, expert_activations, ffn_input,
                      grid2d, hidden_values, recombine, routed_chain, situ_gate_factor, situ_up_factor,
                      swiglu_crossings)
from model.activations import situ_glu
from model.config import K3Config
from model.k3 import K3Model


def sig(x):
    return 1 / (1 + math.exp(-x))


def situ_ref(g, u):      # K3 report: [4 tanh(g/4) sigmoid(g)] * [25 tanh(u/25)]
    return 4 * math.tanh(g / 4) * sig(g) * 25 * math.tanh(u / 25)


def swiglu_ref(g, u):
    return g * sig(g) * u


@pytest.fixture(scope="module")
def micro():
    torch.manual_seed(0)
    model = K3Model(K3Config.micro()).eval()
    with torch.no_grad():
        for moe in model.moe_layers():
            moe.router.weight.normal_(0, 0.5)          # spread the scores so routing is not a tie
            moe.router.expert_bias.normal_(0, 0.1)
        out = model(torch.randint(0, 64, (1, 9)))
    return model, out


def test_bound_holds_over_the_widest_range():
    df = curves(1000, 1000)
    assert np.abs(df["situ"]).max() <= CAP
    assert np.abs(df["situ"]).max() > 99.9                 # the bound is reached, not just respected
    assert df["swiglu"].max() == pytest.approx(1000 * 1000, rel=1e-9)   # unbounded: g sigma(g) u at g = 1000
    g = np.linspace(-1000, 1000, 401)
    G, U = np.meshgrid(g, g)
    assert float(situ_glu(torch.tensor(G), torch.tensor(U)).abs().max()) <= CAP


def test_curve_values_and_derivatives_match_closed_forms():
    df = curves(10, 3.0, n=2001)
    for i in (0, 333, 1000, 1777, 2000):
        g = float(df["x"][i])
        assert df["situ"][i] == pytest.approx(situ_ref(g, 3.0), rel=1e-12, abs=1e-12)
        assert df["swiglu"][i] == pytest.approx(swiglu_ref(g, 3.0), rel=1e-12, abs=1e-12)
        h = 1e-6    # central differences of the closed forms vs the autograd derivatives
        assert df["situ_dg"][i] == pytest.approx((situ_ref(g + h, 3) - situ_ref(g - h, 3)) / (2 * h), abs=1e-6)
        assert df["swiglu_dg"][i] == pytest.approx((swiglu_ref(g + h, 3) - swiglu_ref(g - h, 3)) / (2 * h), abs=1e-6)
        assert df["situ_du"][i] == pytest.approx((situ_ref(g, 3 + h) - situ_ref(g, 3 - h)) / (2 * h), abs=1e-6)
        assert df["situ_up_d"][i] == pytest.approx(1 - math.tanh(g / 25) ** 2, abs=1e-12)
    # the factors multiply to the model's own function
    g, u = torch.linspace(-50, 50, 101, dtype=torch.float64), torch.linspace(60, -40, 101, dtype=torch.float64)
    torch.testing.assert_close(situ_gate_factor(g) * situ_up_factor(u), situ_glu(g, u))


def test_gate_factor_minimum_is_where_the_architecture_says():
    df = curves(5, 1.0, n=100_001)
    i = int(df["situ_gate"].idxmin())
    assert df["situ_gate"][i] == pytest.approx(-0.2698, abs=5e-5)
    assert df["x"][i] == pytest.approx(-1.22, abs=0.01)
    j = int(df["swiglu_gate"].idxmin())
    assert df["swiglu_gate"][j] == pytest.approx(-0.2785, abs=5e-5) and df["x"][j] == pytest.approx(-1.28, abs=0.01)


def test_swiglu_crosses_448_where_the_curve_says():
    (g,) = swiglu_crossings(100.0)
    assert swiglu_ref(g, 100.0) == pytest.approx(448, abs=1e-9)
    assert g == pytest.approx(4.5284, abs=1e-4)
    df = curves(10, 100.0, n=20001)                   # the curve itself crosses between two samples
    first = int(np.argmax(np.abs(df["swiglu"].to_numpy()) > FP8_MAX))
    assert df["x"][first - 1] <= g <= df["x"][first]
    assert swiglu_crossings(1.0) == [pytest.approx(448.0, abs=1e-6)]  # sigma(448) is 1 to double precision
    assert swiglu_crossings(-100.0) == [pytest.approx(g)]             # |f| is symmetric in u
    assert swiglu_crossings(1.0, lo=-10, hi=10) == []                 # out of range: no crossing
    assert swiglu_crossings(0.0) == []
    three = swiglu_crossings(2000.0)          # 448/2000 < 0.2785: the dip below 0 crosses twice as well
    assert len(three) == 3 and three[0] < -1.2785 < three[1] < 0 < three[2]
    for r in three:
        assert abs(swiglu_ref(r, 2000.0)) == pytest.approx(448, abs=1e-6)
    fig = output_figure(df, 100.0, [g])
    assert any(t.mode == "markers+text" and t.x[0] == pytest.approx(g) for t in fig.data)


def test_grid_shows_the_bound():
    grid = grid2d(50, n=41)
    assert grid["situ"].shape == (41, 41) and np.abs(grid["situ"]).max() <= CAP
    assert grid["swiglu"][-1, -1] == pytest.approx(swiglu_ref(50, 50))     # row = up, column = gate
    assert grid["swiglu"][0, -1] == pytest.approx(swiglu_ref(50, -50))
    fig = grid_figure(grid)
    assert sum(t.type == "heatmap" for t in fig.data) == 2
    assert any(t.type == "contour" for t in fig.data)                     # SwiGLU passes 448 here
    assert len(factors_figure(curves(50, 1.0)).data) == 4


def test_live_activations_reproduce_latent_moe(micro):
    model, out = micro
    for layer in model.cfg.moe_layers:
        acts = expert_activations(model, out, layer)
        moe = model.layers[layer].ffn
        # the activations shown rebuild exactly the output the layer recorded in the forward
        torch.testing.assert_close(recombine(moe, acts).reshape(out.trace.outputs[(layer, "ffn")].shape),
                                   out.trace.outputs[(layer, "ffn")], rtol=1e-5, atol=1e-5)
        # and the FFN input they start from is the one LatentMoE itself maps to that output
        with torch.no_grad():
            y, info = moe(ffn_input(out, layer))
            y_swi, _ = moe(ffn_input(out, layer), activation="swiglu")
        assert torch.equal(info.indices.reshape(acts.experts.shape), acts.experts)
        torch.testing.assert_close(y, out.trace.outputs[(layer, "ffn")], rtol=0, atol=1e-6)
        torch.testing.assert_close(recombine(moe, acts, "swiglu"), y_swi.reshape(-1, y.shape[-1]),
                                   rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="not a MoE layer"):
        expert_activations(model, out, 0)


def test_hidden_values_bounded_only_for_situ(micro):
    model, out = micro
    acts = expert_activations(model, out, 2)
    n = acts.gate.numel()
    for scale in (1.0, 200.0):
        situ, swi = hidden_values(acts, "situ_glu", scale), hidden_values(acts, "swiglu", scale)
        assert situ.shape == swi.shape == (n,)
        assert np.abs(situ).max() <= CAP
    assert np.abs(swi).max() > FP8_MAX                      # at 200x, SwiGLU overflows FP8, SiTU-GLU cannot
    assert len(histogram_figure({"situ_glu": situ, "swiglu": swi}, NAMES).data) == 2


def test_chain_first_layer_is_the_real_routed_path(micro):
    model, out = micro
    x = ffn_input(out, 1)
    table = routed_chain(chain_weights(model), x, 1.0, variants=(("situ_glu", True),))
    moe = model.layers[1].ffn
    with torch.no_grad():
        y, _ = moe(x)
        routed = (y - moe.shared(x)).double()
    assert table["rms_out"].iloc[0] == pytest.approx(float(routed.pow(2).mean().sqrt()), rel=1e-4)


def test_chain_growth_and_the_two_fixes(micro):
    model, out = micro
    W = chain_weights(model)
    x = ffn_input(out, 1)
    calm = chain_summary(routed_chain(W, x, 1.0), len(W))
    assert (calm["largest |h| (inf: overflow)"] < FP8_MAX).all()
    table = routed_chain(W, x, 8.0)
    s = chain_summary(table, len(W)).set_index("variant")
    bare = s.loc["SwiGLU, no RMSNorm before W_up"]
    assert bare["largest |h| (inf: overflow)"] > 3.4e38                     # compounds past float32 / BF16 range
    normed = table[table["variant"] == "SwiGLU, with RMSNorm before W_up"]["max_h"].to_numpy()
    assert normed.max() < 1e-20 * bare["largest |h| (inf: overflow)"]       # the norm stops the compounding
    for v in ("SiTU-GLU, no RMSNorm before W_up", "SiTU-GLU, with RMSNorm before W_up"):
        assert s.loc[v, "largest |h| (inf: overflow)"] <= CAP                # the bound holds at every layer
    fig = chain_figure(table)
    assert sum(t.mode == "lines" for t in fig.data) == 4
