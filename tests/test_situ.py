"""SiTU-GLU page data: curves against closed forms written here, the FP8 crossing, the live experts'
activations against running LatentMoE itself, and the routed-path chain (ARCHITECTURE.md section 4)."""
import math

import numpy as np
import pytest
import torch

from app.charts.situ_glu import curve_table, derivative_spec, factors_spec, output_spec, output_window
from app.charts.situ_glu_live import chain_spec, histogram_bins, histogram_spec, runs_along
from app.charts.situ_glu_plane import grid_spec, grid_table, level_curves
from app.situ_glu import (
    CAP,
    FP8_MAX,
    NAMES,
    chain_summary,
    chain_weights,
    curves,
    expert_activations,
    ffn_input,
    grid2d,
    hidden_values,
    recombine,
    routed_chain,
    situ_gate_factor,
    situ_up_factor,
    swiglu_crossings,
)
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
    spec = output_spec(df, 100.0, [g])
    cross = spec["datasets"]["crossings"]
    assert cross["g"].tolist() == [pytest.approx(4.5284, abs=1e-4)] and cross["value"].tolist() == [448.0]
    assert cross["label"][0] == "SwiGLU hits 448 at g = 4.528"
    shapes = [layer["encoding"]["shape"] for layer in spec["layer"] if "shape" in layer.get("encoding", {})]
    assert shapes == [{"datum": "where SwiGLU crosses 448", "scale": {"domain": ["where SwiGLU crosses 448"],
                                                                      "range": ["M-1,-1L1,1M-1,1L1,-1"]},
                       "legend": shapes[0]["legend"]}]                      # drawn as an X, named in the legend
    # u < 0 flips SwiGLU's sign: it reaches -448 at the same |g|, labelled so
    neg = output_spec(curves(10, -100.0), -100.0, swiglu_crossings(-100.0, FP8_MAX, -10, 10))["datasets"]["crossings"]
    assert neg["value"].tolist() == [-448.0] and neg["label"][0].startswith("SwiGLU hits -448")


def rules(spec_or_layers) -> dict[float, dict]:
    """The horizontal reference lines of a spec (or of a panel's layers): their y value -> mark."""
    layers = spec_or_layers["layer"] if isinstance(spec_or_layers, dict) else spec_or_layers
    out = {}
    for layer in layers:
        if layer["mark"]["type"] == "rule" and "values" in layer.get("data", {}):
            for row in layer["data"]["values"]:
                out[row.get("y", row.get("x"))] = layer["mark"]
    return out


def test_output_chart_window_and_limit_lines():
    df = curves(10, 100.0)
    spec = output_spec(df, 100.0, swiglu_crossings(100.0, FP8_MAX, -10, 10))
    lines = [layer for layer in spec["layer"] if layer["mark"]["type"] == "line"]
    assert [layer["encoding"]["y"]["field"] for layer in lines] == ["swiglu", "situ"]
    lo, hi = lines[0]["encoding"]["y"]["scale"]["domain"]
    assert lo < 0 and 448 < hi < 1000 and all(layer["mark"]["clip"] for layer in lines)   # SwiGLU leaves the chart
    assert float(df["swiglu"].max()) > hi
    lim = rules(spec)
    assert set(lim) == {100.0, 448.0}                                      # -100 and -448 are below the window
    assert lim[100.0]["strokeDash"] != lim[448.0]["strokeDash"]
    curves_data = spec["datasets"]["curves"]
    assert np.abs(curves_data["situ"]).max() <= CAP
    # what is drawn: every 7th of the 2001 samples, both ends kept, each one a sample of the real functions
    assert len(curves_data) == 287 and curves_data["g"].iloc[[0, -1]].tolist() == [-10.0, 10.0]
    for g, s_val, w_val in curves_data[["g", "situ", "swiglu"]].iloc[::41].itertuples(index=False):
        assert s_val == pytest.approx(situ_ref(g, 100.0), rel=1e-12) and w_val == pytest.approx(swiglu_ref(g, 100.0), rel=1e-12)
    # the full range holds SwiGLU's whole curve (10 * sigma(10) * 100 = 999.95)
    lo, hi = output_window(df, full_range=True)
    assert hi > 999.9 and lo < swiglu_ref(-1.2785, 100.0)
    assert output_spec(df, 100.0, [], full_range=True)["datasets"]["crossings"].empty


def test_factor_and_derivative_panels():
    df = curves(100, 1.0)
    spec = factors_spec(df)
    gate, up = spec["hconcat"]
    assert [sum(layer["mark"]["type"] == "line" for layer in p["layer"]) for p in (gate, up)] == [2, 2]
    assert set(rules(gate["layer"])) == {4.0} and set(rules(up["layer"])) == {25.0}      # each bound
    y = lambda panel: next(layer for layer in panel["layer"] if layer["mark"]["type"] == "line")["encoding"]["y"]
    assert y(gate)["scale"]["domain"] == [-0.6, 12.0] and y(up)["scale"]["domain"] == [-75.0, 75.0]  # 3x the bound
    minimum = next(layer for layer in gate["layer"] if layer["mark"]["type"] == "point")["data"]["values"][0]
    assert minimum["label"] == f"min {minimum['y']:.4f} at g = {minimum['x']:.2f}"
    assert minimum["y"] == pytest.approx(-0.2698, abs=2e-3)                     # on this grid's samples
    data = spec["datasets"]["factors"]
    assert data["situ_up"].abs().max() < 25 and data["identity_up"].abs().max() == 100
    deriv = derivative_spec(df, 7.0)
    assert [p["title"] for p in deriv["hconcat"]] == ["d(gate factor)/dg", "d(up factor)/du", "∂output/∂g at u = 7"]
    d = deriv["datasets"]["derivatives"]
    i = int(np.argmin(np.abs(d["x"] - 30.0)))                  # far out the SiTU-GLU gradients fade, SwiGLU's do not
    assert d["situ_gate_d"][i] < 1e-3 < 0.99 < d["swiglu_gate_d"][i] and (d["swiglu_up_d"] == 1).all()


def test_grid_shows_the_bound():
    grid = grid2d(50, n=41)
    assert grid["situ"].shape == (41, 41) and np.abs(grid["situ"]).max() <= CAP
    assert grid["swiglu"][-1, -1] == pytest.approx(swiglu_ref(50, 50))     # row = up, column = gate
    assert grid["swiglu"][0, -1] == pytest.approx(swiglu_ref(50, -50))
    spec = grid_spec(grid)
    assert [p["title"] for p in spec["hconcat"]] == ["SiTU-GLU(g, u): bounded by 100", "SwiGLU(g, u): unbounded"]
    ds = spec["datasets"]
    cells = {key: ds[f"cells_{key}"] for key in ("situ", "swiglu")}
    assert len(cells["situ"]) == len(cells["swiglu"]) == 21 * 21           # every other sample of 41 is pointable
    corner = cells["swiglu"][(cells["swiglu"]["g"] == 50) & (cells["swiglu"]["u"] == -50)]["value"]
    assert corner.tolist() == [pytest.approx(swiglu_ref(50, -50))]
    assert cells["situ"]["value"].abs().max() <= CAP
    assert (cells["swiglu"]["g1"] - cells["swiglu"]["g0"]).round(9).eq(5.0).all()   # each covers 2 x 2.5 of the plane
    contours = {name: len(d) for name, d in ds.items() if name.startswith("contour_")}
    assert contours["contour_situ_100"] == contours["contour_situ_448"] == 0          # SiTU-GLU: none
    assert contours["contour_swiglu_100"] > 0 and contours["contour_swiglu_448"] > 0  # SwiGLU passes 448 here
    assert sum(layer["mark"]["type"] == "line" for layer in spec["hconcat"][1]["layer"]) == 2
    assert not any(layer["mark"]["type"] == "line" for layer in spec["hconcat"][0]["layer"])
    # the default grid (161 a side): an image of every sample per plane, pointable cells on every 8th
    big = grid_spec(grid2d(50))["datasets"]
    g = sorted(set(big["cells_swiglu"]["g"]))
    assert len(g) == 21 and g[:2] == [pytest.approx(-50), pytest.approx(-45)] and g[-1] == pytest.approx(50)
    swi = png(big["image_swiglu"]["url"][0])
    assert swi.shape == (161, 161, 3)
    assert tuple(swi[0, -1]) == (213, 94, 0)          # g = u = 50: 2500, the top of the scale: vermillion
    assert tuple(swi[-1, -1]) == (0, 114, 178)        # g = 50, u = -50: -2500, the bottom: blue
    assert tuple(swi[0, 0]) == (187, 187, 187)        # g = -50: swish(-50) ~ 0, grey
    situ = png(big["image_situ"]["url"][0])
    assert 187 < situ[0, -1, 0] < 213                 # bounded at 100: well short of SwiGLU's colour
    table = grid_table(grid2d(50))                         # the CSV: every sample, not the image
    assert len(table) == 2 * 161 * 161 and set(table["function"]) == {"SiTU-GLU", "SwiGLU"}


def png(url: str) -> np.ndarray:
    import base64
    import io

    from PIL import Image
    assert url.startswith("data:image/png;base64,")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB"))


def test_level_curves_follow_the_closed_form():
    grid = grid2d(50, n=161)
    c = level_curves(grid["axis"], grid["swiglu"], 448.0)
    assert len(c) > 100 and c["branch"].nunique() == 2                   # above and below u = 0, for g > 0
    exact = np.array([abs(swiglu_ref(g, u)) for g, u in zip(c["g"], c["u"])])
    assert np.abs(exact - 448).max() < 0.01 * 448                         # linear interpolation between rows
    top = c[c["u"] == 50]                                                 # where the branch enters through the top edge
    assert top["g"].tolist() == [pytest.approx(448 / 50, abs=0.05)]       # g sigma(g) = 8.96 at g = 8.96
    # SiTU-GLU stays under 100 on this plane: no curve at all
    assert level_curves(grid["axis"], grid["situ"], 100.0).empty
    small = grid2d(5, n=41)
    assert level_curves(small["axis"], small["swiglu"], 448.0).empty     # 5 * sigma(5) * 5 < 448


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
    values = {"situ_glu": situ, "swiglu": swi}
    bins, lo, hi = histogram_bins(values, NAMES)
    assert lo == min(situ.min(), swi.min()) and hi == max(situ.max(), swi.max())
    for name, v in (("SiTU-GLU", situ), ("SwiGLU", swi)):
        part = bins[bins["activation"] == name]
        assert part["count"].sum() == n and (part["count"] > 0).all()    # every value counted once, empty bins left out
        assert part["end"].max() >= v.max() and part["start"].min() <= v.min()
    width = (bins["end"] - bins["start"]).to_numpy()
    assert np.allclose(width, (hi - lo) / 80)                             # one set of bins for both
    situ_bins = bins[bins["activation"] == "SiTU-GLU"]
    assert situ_bins["start"].max() < CAP and situ_bins["end"].min() > -CAP - width[0]
    swi_bins = bins[bins["activation"] == "SwiGLU"]                     # its tail past 448 is in the bins over 448
    over = int((swi > FP8_MAX).sum())
    assert over > 0 and swi_bins[swi_bins["start"] > FP8_MAX]["count"].sum() <= over <= \
        swi_bins[swi_bins["end"] > FP8_MAX]["count"].sum()
    spec = histogram_spec(values, NAMES)
    lines = {r["data"]["values"][0]["label"] for r in spec["layer"] if r["mark"]["type"] == "rule"}
    assert {"100", "-100", "448"} <= lines                                 # the limits inside the values' range
    assert spec["layer"][0]["encoding"]["y"]["scale"]["type"] == "log"


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
    spec = chain_spec(table)
    data = spec["datasets"]["layers"]
    assert data["variant"].nunique() == 4 and np.isfinite(data["value"]).all() and (data["value"] > 0).all()
    line = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "line")
    assert line["encoding"]["y"]["scale"]["type"] == "log" and line["mark"]["clip"]
    bare_rows = table[table["variant"] == "SwiGLU, no RMSNorm before W_up"]
    first_past = int(bare_rows[~(bare_rows["max_h"] <= 1e6)]["layer"].iloc[0])  # past the ceiling (or inf)
    gone = spec["datasets"]["gone"].set_index("variant")
    assert list(gone.index) == ["SwiGLU, no RMSNorm before W_up"]             # the only one that leaves the chart
    assert gone.loc["SwiGLU, no RMSNorm before W_up", "layer"] == first_past
    assert gone["label"].iloc[0].endswith(f"from layer {first_past}") and gone["value"].iloc[0] == 1e6
    assert {100.0, 448.0} <= set(rules(spec))                             # the cap and the FP8 limit
    assert rules(chain_spec(table, "rms_out")) == {}                       # no limit lines for the RMS
    # pointing at a layer lists every variant there; the bare SwiGLU chain says where it overflowed
    hover = spec["datasets"]["layers_hover"].set_index("layer")
    assert list(hover.index) == sorted(set(table["layer"]))
    names = [t["title"] for t in next(layer for layer in spec["layer"] if "params" in layer)["encoding"]["tooltip"][1:]]
    assert names == ["SwiGLU, no norm", "SwiGLU with norm", "SiTU-GLU, no norm", "SiTU-GLU with norm"]
    bare = hover[f"v{names.index('SwiGLU, no norm')}"]
    for row in (bare_rows.iloc[0], bare_rows.iloc[-1]):
        assert float(bare[int(row["layer"])]) == pytest.approx(row["max_h"], rel=5e-3)   # 3 significant digits


def test_chain_chart_marks_values_that_reach_zero():
    import pandas as pd
    rows = []
    for a, norm in (("swiglu", False), ("swiglu", True), ("situ_glu", False), ("situ_glu", True)):
        for layer in range(1, 6):
            if (a, norm) == ("swiglu", False) and layer > 3:
                break                                                     # overflowed at layer 3: stopped there
            value = 0.0 if (a, norm, layer >= 4) == ("situ_glu", False, True) else 10.0 ** -layer
            value = math.inf if (a, norm, layer) == ("swiglu", False, 3) else value
            rows.append({"layer": layer, "variant": f"{a} {norm}", "activation": a, "norm": norm,
                         "max_h": value, "rms_out": value})
    spec = chain_spec(pd.DataFrame(rows), "rms_out")
    gone = spec["datasets"]["gone"]
    assert gone["variant"].tolist() == ["swiglu False"] and gone["label"][0] == "overflow (inf) from layer 3"
    hover = spec["datasets"]["layers_hover"].set_index("layer")
    assert hover["v0"].tolist() == ["0.1", "0.01", "overflow (inf)", "not run (overflowed)", "not run (overflowed)"]
    assert hover["v2"][5] == "0"                                          # the variant that fell to 0
    zero = spec["datasets"]["zero"]
    assert zero["variant"].tolist() == ["situ_glu False"] and zero["label"][0] == "exactly 0 from layer 4"
    y = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "line")["encoding"]["y"]
    assert zero["value"][0] == pytest.approx(y["scale"]["domain"][0])     # at the foot of the chart
    assert y["scale"]["domain"][0] == pytest.approx(10 ** -5.5) and "'10⁻⁵'" in y["axis"]["labelExpr"]


def test_summary_tables_for_the_page():
    import pandas as pd

    from app.text import text_table
    rows = [{"layer": layer, "variant": v, "activation": "swiglu", "norm": v == "b",
             "max_h": math.inf if (v, layer) == ("a", 3) else 10.0 ** layer, "rms_out": 1.0}
            for v in ("a", "b") for layer in range(1, 4 if v == "a" else 6)]
    summary = chain_summary(pd.DataFrame(rows), 5)
    table = text_table(summary, {"largest |h| (inf: overflow)": ".3g"})[0].set_index("variant")
    assert list(table.index) == ["a", "b"]                                  # the variant labels the rows
    assert table.loc["a"].tolist() == ["3", "inf", "3", "3", "yes"]         # overflowed at layer 3 of 5
    assert table.loc["b"].tolist() == ["5", "1e+05", "3", "–", "no"]        # never past 3.4e38: no layer
    hist = text_table(pd.DataFrame([{"activation": "SwiGLU", "values": 12345, "max |h|": 512.3456}]),
                      {"values": ",d", "max |h|": ".4g"})[0].set_index("activation")
    assert hist.loc["SwiGLU"].tolist() == ["12,345", "512.3"]


def test_csv_of_the_curve_charts_has_every_sample():
    df = curves(10, 3.0)
    out = curve_table(df, "output")
    assert list(out.columns) == ["g", "SwiGLU", "SiTU-GLU"] and len(out) == 2001
    assert out["SiTU-GLU"].iloc[-1] == pytest.approx(situ_ref(10, 3.0))
    assert len(curve_table(df, "derivatives").columns) == 7 and len(curve_table(df, "factors")) == 2001


def test_a_line_drawn_on_a_reference_line_is_named_by_its_label():
    # a variant held at the cap (100) is drawn on the cap's own line: the cap's label must say so, sit
    # under the line, and be drawn over the variants' lines (with a halo of the page's colour)
    import pandas as pd

    rows = []
    for a, norm, level in (("swiglu", False, 5.0), ("swiglu", True, 300.0), ("situ_glu", False, 99.0),
                           ("situ_glu", True, 40.0)):
        name = f"{'SiTU-GLU' if a == 'situ_glu' else 'SwiGLU'}, {'with' if norm else 'no'} RMSNorm before W_up"
        rows += [{"layer": layer, "variant": name, "activation": a, "norm": norm, "max_h": level * (1 + 0.01 * (layer % 2)),
                  "rms_out": 1.0} for layer in range(1, 93)]
    spec = chain_spec(pd.DataFrame(rows), "max_h", theme_type="dark")
    texts = [part for part in spec["layer"] if part["mark"]["type"] == "text" and "values" in part.get("data", {})]
    cap = [t for t in texts if t["data"]["values"][0]["y"] == CAP]
    assert cap and all(t["data"]["values"][0]["label"] == "SiTU-GLU cap 100 (SiTU-GLU, no norm runs along it)"
                       for t in cap)
    assert all(t["mark"]["baseline"] == "top" for t in cap)                          # under the line
    assert any(t["mark"].get("stroke") == "#0e1117" for t in cap)                    # the dark page's colour
    fp8 = [t for t in texts if t["data"]["values"][0]["y"] == FP8_MAX]
    assert fp8 and fp8[0]["data"]["values"][0]["label"] == "E4M3 max 448 (no block scale)"   # nothing on it
    kinds = [part["mark"]["type"] for part in spec["layer"]]
    assert kinds.index("line") < min(i for i, k in enumerate(kinds) if k == "text")   # labels over the lines
    assert runs_along([100, 99, 101, 30], 100) and not runs_along([100, 30, 20, 10], 100)
