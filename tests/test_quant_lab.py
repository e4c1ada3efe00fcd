"""Quantization lab data and charts (app/quantization_blocks.py, app/quantization_weights.py, app/quantization_behaviour.py,
app/charts/quantization.py): grids and block scales against ARCHITECTURE.md section 7's worked examples, layer scales
and errors, and behaviour metrics from real forward passes of small models (change the quantisation and the numbers
change)."""
import numpy as np
import pandas as pd
import pytest
import torch

from app import quantization_behaviour as behaviour
from app import quantization_blocks as blocks
from app import quantization_weights as weights
from app.charts import quantization as charts
from model.config import K3Config
from model.k3 import K3Model
from model.quant import block_scale_exponents, mx_fake_quant

E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6]


def test_e2m1_grid_and_bits():
    g = blocks.grid_frame("e2m1")
    assert g["value"].tolist() == E2M1
    assert g["bits"].tolist() == ["0 00 0", "0 00 1", "0 01 0", "0 01 1", "0 10 0", "0 10 1", "0 11 0", "0 11 1"]
    assert g["kind"].tolist() == ["zero", "subnormal"] + ["normal"] * 6


def test_e4m3_grid():
    g = blocks.grid_frame("e4m3")
    assert len(g) == 127                               # 128 codes with sign 0, minus S.1111.111 (NaN)
    assert g["value"].iloc[1] == 2.0 ** -9             # smallest subnormal: 1/8 x 2^-6
    assert g["value"].iloc[8] == 2.0 ** -6             # smallest normal
    assert g["value"].max() == 448 and g["bits"].iloc[-1] == "0 1111 110"
    normal = g[g["kind"] == "normal"]
    # 8 values in every power of two: relative gaps between 1/16 and 1/8 among normals
    gaps = normal["relative gap"].dropna()
    assert gaps.min() == pytest.approx(1 / 15) and gaps.max() == pytest.approx(1 / 8)


@pytest.mark.parametrize("fmt", ["e2m1", "e4m3"])
def test_worked_examples_of_architecture_md(fmt):
    values, X, want = blocks.EXAMPLES[fmt]
    s = blocks.explain_block(values, fmt)
    assert s.X == X                                    # e2m1: 7.9 -> floor(log2) 2 - emax 2 = 0; e4m3: 9 - 8 = 1
    assert s.dequantised.tolist() == want
    assert s.floor_log2 - s.emax == s.scale_exp
    assert np.all(np.isin(np.abs(s.grid), blocks.grid_frame(fmt)["value"].to_numpy()))   # P is on the grid


def test_block_scale_follows_amax():
    # amax 0.07 -> floor(log2 0.07) = -4 -> E = -6 (E2M1), -12 (E4M3)
    v = [0.07, -0.01, 0.002] + [0.0] * 29
    assert blocks.explain_block(v, "e2m1").scale_exp == -6
    assert blocks.explain_block(v, "e4m3").scale_exp == -12
    assert block_scale_exponents(torch.tensor(v), "e2m1").tolist() == [-6]
    z = blocks.explain_block([0.0] * 32, "e2m1")
    assert z.floor_log2 is None and np.all(z.dequantised == 0)
    with pytest.raises(ValueError):
        blocks.explain_block([1.0] * 33, "e2m1")
    with pytest.raises(ValueError):
        blocks.explain_block([np.nan], "e2m1")


def test_codes_of_the_worked_example():
    codes = blocks.e2m1_codes(blocks.EXAMPLES["e2m1"][0])
    assert codes[:3] == ["0 00 0", "1 00 0", "0 00 1"]          # 0.1 -> 0, -0.25 -> -0, 0.3 -> 0.5
    assert codes[-1] == "0 11 1" and codes[-2] == "1 11 0"      # 7.9 -> 6, -3.7 -> -4


def wide_micro():
    # micro with experts of 8 x 16 = 128 values, so blocks of 128 differ from blocks of 32
    torch.manual_seed(0)
    cfg = K3Config.micro().with_(expert_hidden=16)
    model = K3Model(cfg).eval().requires_grad_(False)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():                                   # experts stored as MXFP4, as the shipped checkpoint
        for moe in model.moe_layers():
            for name in weights.MATRICES:
                p = getattr(moe, name)
                # blocks of 32 at different sizes (trained weights are not uniform), then MXFP4
                size = 2.0 ** torch.randint(-3, 4, (p.numel() // 32, 1), generator=g)
                w = (p.reshape(-1, 32) * size).reshape(p.shape[0], -1)
                p.copy_(mx_fake_quant(w, "e2m1", per_row=True).reshape(p.shape))
    return model


@pytest.fixture(scope="module")
def model():
    return wide_micro()


def test_layer_scales_and_errors(model):
    s = weights.layer_scale_exponents(model, 1)
    assert set(s["matrix"]) == set(weights.MATRICES)
    assert s.groupby("matrix")["blocks"].sum().tolist() == [16 * 4] * 3          # 16 experts x 4 blocks each
    e = weights.layer_errors(model, 1).set_index("tensor")
    routed = e[e["stored as"] == "MXFP4"]
    assert len(routed) == 3
    assert (routed["MXFP4, blocks of 32"] == 0).all() and (routed["MXFP8, blocks of 32"] == 0).all()
    assert (routed["MXFP4, blocks of 128"] > 0).all()                            # coarser scales lose levels
    bf16 = e[e["stored as"] == "bf16"]
    assert "router" in bf16.index and (bf16["MXFP4, blocks of 32"] > bf16["MXFP8, blocks of 32"]).all()
    assert weights.experts_already_mxfp4(model, 1)
    assert not weights.experts_already_mxfp4(K3Model(K3Config.micro()).eval(), 1)


def test_variant_tensors_touch_only_their_part(model):
    assert behaviour.variant_tensors(model, "act") == {}
    router = behaviour.variant_tensors(model, "router")
    assert router and all(k.endswith("ffn.router.weight") for k in router)
    coarse = behaviour.variant_tensors(model, "coarse")
    assert coarse and all(k.endswith(("w_gate", "w_up", "w_down")) for k in coarse)
    everything = behaviour.variant_tensors(model, "all")
    assert "head.weight" in everything and "embed.weight" not in everything
    assert not any(k.endswith(("w_gate", "w_up", "w_down")) and ".shared." not in k for k in everything)
    with pytest.raises(ValueError):
        behaviour.variant_tensors(model, "fp2")


def test_behaviour_changes_with_the_quantisation_and_not_without(model):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.randint(0, model.cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    ref = behaviour.run(model, ids, None)
    same = behaviour.compare(ref, behaviour.run(model, ids, None))
    assert same.kl_mean == 0 and same.top1 == 1 and same.changed == 0
    for variant in behaviour.VARIANTS:
        c = behaviour.compare(ref, behaviour.run(model, ids, variant))
        assert c.kl_mean > 0, variant                       # a real forward with different numbers
        assert 0 <= c.top1 <= 1 and 0 <= c.changed <= 1
        assert len(c.per_layer) == len(model.cfg.moe_layers)
        assert c.kl.shape == (2 * 16,)
    # the shared model is never written
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_compare_counts_changed_choices_by_hand():
    logp = np.log(np.full((1, 2, 4), 0.25))
    a = behaviour.Behaviour(logp, np.array([[[[0, 1], [2, 3]]]]), (1,))
    b = behaviour.Behaviour(logp, np.array([[[[1, 0], [2, 0]]]]), (1,))                # token 0 same set, token 1 one swap
    c = behaviour.compare(a, b)
    assert c.per_layer["changed"].tolist() == [0.25]
    assert c.kl_mean == 0


def test_heldout_ids_shape():
    class Tok:
        def encode(self, text):
            return list(range(len(text)))
    ids = behaviour.heldout_ids(Tok(), rows=2, chunk=128)
    assert ids.shape == (2, 128)


def test_k3_bytes_table_and_summary():
    t = weights.k3_bytes_table().set_index("component")
    assert t.loc["routed experts", "bits per value"] == 4.25
    assert t.loc["routed experts", "bytes, K3"] == pytest.approx(2722.74e9 * 4.25 / 8, rel=1e-5)
    assert t.loc["router", "K3 stores it as"].startswith("bf16 (published")
    assert t.loc["embedding", "K3 stores it as"] == "bf16 (assumed)"
    s = weights.k3_bytes_summary()
    assert s["bf16"] / s["k3"] == pytest.approx(5559.0 / 1559.9, rel=1e-3)


# ---- the Vega-Lite specs (app/charts/quantization.py) -----------------------------------------------------

def layers_of(spec):
    return spec.get("layer") or [spec]


def test_grids_spec_shows_every_value_with_its_bits():
    spec = charts.grids_spec(blocks.grid_frame("e2m1"), blocks.grid_frame("e4m3"), "dark")
    assert spec["usermeta"]["chart"] == "quant_grids"
    small, wide = spec["datasets"]["e2m1"], spec["datasets"]["e4m3"]
    # 15 distinct E2M1 values: ±0.5 ... ±6 and one 0 (the 16th code, -0, is the same value)
    assert sorted(small["value"]) == sorted([-v for v in E2M1[1:]] + E2M1)
    bits = dict(zip(small["value"], small["bits"]))
    assert bits[-6] == "1 11 1" and bits[6] == "0 11 1" and bits[-0.5] == "1 00 1" and bits[0] == "0 00 0"
    assert dict(zip(small["value"], small["kind"]))[0.5] == "subnormal"
    assert small.set_index("value").loc[-1.5, "label"] == "-1.5"
    # E4M3: the 126 positive values (127 non-negative, minus zero), 2^-9 to 448, log axis
    assert len(wide) == 126 and wide["value"].min() == 2.0 ** -9 and wide["value"].max() == 448
    nxt = dict(zip(wide["value"], wide["next"]))
    assert nxt[1.0] == "12.5% higher" and nxt[1.875] == "6.7% higher"       # 1 -> 1.125; 1.875 -> 2
    assert nxt[448.0].startswith("none")
    top, bottom = spec["vconcat"]
    x = bottom["encoding"]["x"]
    assert x["scale"]["type"] == "log" and x["scale"]["domain"][1] == 600
    assert x["axis"]["values"][0] == 2.0 ** -9 and x["axis"]["values"][-1] == 448
    assert "'2⁻⁹'" in x["axis"]["labelExpr"] and "'448'" in x["axis"]["labelExpr"]
    assert top["layer"][0]["encoding"]["x"]["scale"]["domain"] == [-6.8, 6.8]
    colour = bottom["encoding"]["color"]["scale"]
    assert dict(zip(colour["domain"], colour["range"])) == {"zero": "#999999", "subnormal": "#CC79A7",
                                                            "normal": "#0072B2"}
    assert top["layer"][1]["mark"]["color"] == "#fafafa"                  # value labels readable in dark mode
    assert "bits" in {t["field"] for t in bottom["encoding"]["tooltip"]}


def test_block_spec_of_the_worked_example():
    values, X, want = blocks.EXAMPLES["e2m1"]
    steps = blocks.explain_block(values, "e2m1")
    spec = charts.block_spec(blocks.block_table(steps), steps.X, np.array(E2M1))
    points = spec["datasets"]["values"]
    after = points[points["series"] == "after: X · P"].sort_values("element")
    before = points[points["series"] == "before: V"].sort_values("element")
    assert after["value"].tolist() == want and before["value"].tolist() == values     # ARCHITECTURE.md section 7
    assert after["V"].tolist() == values                                 # the tooltip shows both ends
    # the 15 levels X·P a block with X = 1 can take
    assert sorted(spec["datasets"]["levels"]["level"]) == sorted([-v for v in E2M1[1:]] + E2M1)
    rule = layers_of(spec)[0]
    assert rule["mark"]["type"] == "rule" and rule["mark"]["strokeDash"]          # "dotted lines" in the caption
    segment, dots = layers_of(spec)[1], layers_of(spec)[2]
    assert segment["mark"]["type"] == "rule" and segment["encoding"]["y2"]["field"] == "XP"
    shapes = dots["encoding"]["shape"]["scale"]
    assert dict(zip(shapes["domain"], shapes["range"])) == {"before: V": "circle", "after: X · P": "diamond"}
    strokes = dots["encoding"]["stroke"]["scale"]
    assert dict(zip(strokes["domain"], strokes["range"]))["after: X · P"] == "#D55E00"     # red diamonds
    # MXFP8 has no level lines (255 of them would hide the points)
    s8 = blocks.explain_block(blocks.EXAMPLES["e4m3"][0], "e4m3")
    spec8 = charts.block_spec(blocks.block_table(s8), s8.X)
    assert "levels" not in spec8["datasets"] and len(layers_of(spec8)) == 2
    assert sorted(spec8["datasets"]["values"].query("series == 'after: X · P'")["value"]) == \
        sorted(blocks.EXAMPLES["e4m3"][2])


def test_scales_spec_counts_every_block():
    model = wide_micro()
    spec = charts.scales_spec(weights.layer_scale_exponents(model, 1))
    d = spec["datasets"]["scales"]
    assert d.groupby("matrix")["blocks"].sum().to_dict() == {m: 16 * 4 for m in weights.MATRICES}   # 16 experts x 4
    # the exponents of blocks sized 2^-3 .. 2^3 apart: a contiguous axis, one bar per matrix in each group
    bars = layers_of(spec)[0]["encoding"]
    domain = bars["x"]["scale"]["domain"]
    assert domain == list(range(min(domain), max(domain) + 1)) and set(d["exponent"]) <= set(domain)
    assert bars["xOffset"]["field"] == "matrix" and bars["y"]["field"] == "blocks"
    assert dict(zip(bars["color"]["scale"]["domain"], bars["color"]["scale"]["range"])) == \
        {"w_gate": "#0072B2", "w_up": "#E69F00", "w_down": "#009E73"}
    row = d.iloc[0]
    assert row["X"].startswith("2") and float(row["X"].split("= ")[1]) == 2.0 ** row["exponent"]


def test_errors_spec_labels_exact_rows():
    model = wide_micro()
    e = weights.layer_errors(model, 1)
    cols = ["MXFP4, blocks of 32", "MXFP4, blocks of 128", "MXFP8, blocks of 32"]
    spec = charts.errors_spec(e, cols)
    d = spec["datasets"]["errors"]
    assert len(d) == 3 * len(e)
    routed = d[d["stored as"] == "MXFP4"]
    exact = routed[routed["format"] != "MXFP4, blocks of 128"]
    assert len(exact) == 6 and (exact["text"] == "0 (exact)").all() and (exact["percent"] == 0).all()
    router = d[(d["tensor"] == "router") & (d["format"] == "MXFP4, blocks of 32")].iloc[0]
    assert router["percent"] == pytest.approx(100 * e.set_index("tensor").loc["router", cols[0]])
    assert router["text"] == f"{router['percent']:.2f}%" and router["matrix"] == "router (bf16)"
    bars = layers_of(spec)[0]["encoding"]
    assert bars["y"]["sort"][0] == f"{e['tensor'].iloc[0]} ({e['stored as'].iloc[0]})"   # the layer's order
    assert bars["yOffset"]["field"] == "format" and bars["color"]["scale"]["domain"] == cols
    assert bars["x"]["scale"]["domain"][1] == pytest.approx(1.3 * 100 * e[cols].to_numpy().max())


def test_behaviour_spec_in_percent():
    per_layer = {"prompt": pd.DataFrame({"layer": [1, 2, 3], "changed": [0.0, 0.25, 0.5]}),
                 "held-out": pd.DataFrame({"layer": [1, 2, 3], "changed": [0.125, 0.125, 1.0]})}
    spec = charts.behaviour_spec(per_layer, 16)
    d = spec["datasets"]["behaviour"]
    assert d[d["text"] == "prompt"]["changed"].tolist() == [0, 25, 50]
    assert d[d["text"] == "held-out"]["changed"].tolist() == [12.5, 12.5, 100]
    enc = spec["encoding"]
    assert enc["y"]["title"] == "top-16 choices changed (%)" and enc["y"]["scale"]["zero"]
    assert enc["color"]["scale"]["domain"] == ["prompt", "held-out"]
    assert spec["mark"]["type"] == "line" and spec["mark"]["point"]


def test_k3_bytes_spec_in_terabytes():
    spec = charts.k3_bytes_spec(weights.k3_bytes_table(), "light")
    d = spec["datasets"]["bytes"].set_index(["bar", "part"])
    routed_bf16 = d.loc[("all in bf16", "routed experts")]
    routed_k3 = d.loc[("K3: routed experts MXFP4, rest bf16", "routed experts")]
    # 2,722.74B routed-expert values: 2 bytes each in bf16, 4.25 bits in MXFP4 (the accounting, K3 report)
    assert routed_bf16["TB"] == pytest.approx(2722.74e9 * 2 / 1e12, rel=1e-5)
    assert routed_k3["TB"] == pytest.approx(2722.74e9 * 4.25 / 8 / 1e12, rel=1e-5)
    assert routed_k3["text"] == "1.45 TB" and routed_bf16["text"] == "5.45 TB"
    rest = d.loc[("K3: routed experts MXFP4, rest bf16", "everything else (bf16)")]
    assert rest["start"] == routed_k3["end"] and rest["text"] == "113 GB"      # stacked after the experts
    # the bars end at the totals: 5,559.0 GB and 1,559.9 GB
    assert d.loc[("all in bf16", "everything else (bf16)"), "end"] == pytest.approx(5.5590, abs=1e-4)
    assert rest["end"] == pytest.approx(1.5599, abs=1e-4)
    assert spec["layer"][0]["encoding"]["x"]["scale"]["domain"][1] == pytest.approx(5.5590 * 1.12, abs=1e-3)
