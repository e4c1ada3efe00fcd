"""Quantization lab data and charts (app/quant_lab.py, app/charts/quant_lab.py): grids and block scales
against ARCHITECTURE.md section 7's worked examples, layer scales and errors, and behaviour metrics
from real forward passes of small models (change the quantisation and the numbers change)."""
import numpy as np
import pytest
import torch

from app import quant_lab as ql
from app.charts import quant_lab as charts
from model.config import K3Config
from model.k3 import K3Model
from model.quant import block_scale_exponents, mx_fake_quant

E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6]


def test_e2m1_grid_and_bits():
    g = ql.grid_frame("e2m1")
    assert g["value"].tolist() == E2M1
    assert g["bits"].tolist() == ["0 00 0", "0 00 1", "0 01 0", "0 01 1", "0 10 0", "0 10 1", "0 11 0", "0 11 1"]
    assert g["kind"].tolist() == ["zero", "subnormal"] + ["normal"] * 6


def test_e4m3_grid():
    g = ql.grid_frame("e4m3")
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
    values, X, want = ql.EXAMPLES[fmt]
    s = ql.explain_block(values, fmt)
    assert s.X == X                                    # e2m1: 7.9 -> floor(log2) 2 - emax 2 = 0; e4m3: 9 - 8 = 1
    assert s.dequantised.tolist() == want
    assert s.floor_log2 - s.emax == s.scale_exp
    assert np.all(np.isin(np.abs(s.grid), ql.grid_frame(fmt)["value"].to_numpy()))   # P is on the grid


def test_block_scale_follows_amax():
    # amax 0.07 -> floor(log2 0.07) = -4 -> E = -6 (E2M1), -12 (E4M3)
    v = [0.07, -0.01, 0.002] + [0.0] * 29
    assert ql.explain_block(v, "e2m1").scale_exp == -6
    assert ql.explain_block(v, "e4m3").scale_exp == -12
    assert block_scale_exponents(torch.tensor(v), "e2m1").tolist() == [-6]
    z = ql.explain_block([0.0] * 32, "e2m1")
    assert z.floor_log2 is None and np.all(z.dequantised == 0)
    with pytest.raises(ValueError):
        ql.explain_block([1.0] * 33, "e2m1")
    with pytest.raises(ValueError):
        ql.explain_block([np.nan], "e2m1")


def test_codes_of_the_worked_example():
    codes = ql.e2m1_codes(ql.EXAMPLES["e2m1"][0])
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
            for name in ql.MATRICES:
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
    s = ql.layer_scale_exponents(model, 1)
    assert set(s["matrix"]) == set(ql.MATRICES)
    assert s.groupby("matrix")["blocks"].sum().tolist() == [16 * 4] * 3          # 16 experts x 4 blocks each
    e = ql.layer_errors(model, 1).set_index("tensor")
    routed = e[e["stored as"] == "MXFP4"]
    assert len(routed) == 3
    assert (routed["MXFP4, blocks of 32"] == 0).all() and (routed["MXFP8, blocks of 32"] == 0).all()
    assert (routed["MXFP4, blocks of 128"] > 0).all()                            # coarser scales lose levels
    bf16 = e[e["stored as"] == "bf16"]
    assert "router" in bf16.index and (bf16["MXFP4, blocks of 32"] > bf16["MXFP8, blocks of 32"]).all()
    assert ql.experts_already_mxfp4(model, 1)
    assert not ql.experts_already_mxfp4(K3Model(K3Config.micro()).eval(), 1)


def test_variant_tensors_touch_only_their_part(model):
    assert ql.variant_tensors(model, "act") == {}
    router = ql.variant_tensors(model, "router")
    assert router and all(k.endswith("ffn.router.weight") for k in router)
    coarse = ql.variant_tensors(model, "coarse")
    assert coarse and all(k.endswith(("w_gate", "w_up", "w_down")) for k in coarse)
    everything = ql.variant_tensors(model, "all")
    assert "head.weight" in everything and "embed.weight" not in everything
    assert not any(k.endswith(("w_gate", "w_up", "w_down")) and ".shared." not in k for k in everything)
    with pytest.raises(ValueError):
        ql.variant_tensors(model, "fp2")


def test_behaviour_changes_with_the_quantisation_and_not_without(model):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.randint(0, model.cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    ref = ql.run(model, ids, None)
    same = ql.compare(ref, ql.run(model, ids, None))
    assert same.kl_mean == 0 and same.top1 == 1 and same.changed == 0
    for variant in ql.VARIANTS:
        c = ql.compare(ref, ql.run(model, ids, variant))
        assert c.kl_mean > 0, variant                       # a real forward with different numbers
        assert 0 <= c.top1 <= 1 and 0 <= c.changed <= 1
        assert len(c.per_layer) == len(model.cfg.moe_layers)
        assert c.kl.shape == (2 * 16,)
    # the shared model is never written
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_compare_counts_changed_choices_by_hand():
    logp = np.log(np.full((1, 2, 4), 0.25))
    a = ql.Behaviour(logp, np.array([[[[0, 1], [2, 3]]]]), (1,))
    b = ql.Behaviour(logp, np.array([[[[1, 0], [2, 0]]]]), (1,))                # token 0 same set, token 1 one swap
    c = ql.compare(a, b)
    assert c.per_layer["changed"].tolist() == [0.25]
    assert c.kl_mean == 0


def test_heldout_ids_shape():
    class Tok:
        def encode(self, text):
            return list(range(len(text)))
    ids = ql.heldout_ids(Tok(), rows=2, chunk=128)
    assert ids.shape == (2, 128)


def test_k3_bytes_table_and_summary():
    t = ql.k3_bytes_table().set_index("component")
    assert t.loc["routed experts", "bits per value"] == 4.25
    assert t.loc["routed experts", "bytes, K3"] == pytest.approx(2722.74e9 * 4.25 / 8, rel=1e-5)
    assert t.loc["router", "K3 stores it as"].startswith("bf16 (published")
    assert t.loc["embedding", "K3 stores it as"] == "bf16 (assumed)"
    s = ql.k3_bytes_summary()
    assert s["bf16"] / s["k3"] == pytest.approx(5559.0 / 1559.9, rel=1e-3)


def test_figures_build():
    g = charts.grids_figure(ql.grid_frame("e2m1"), ql.grid_frame("e4m3"))
    assert g.layout.xaxis2.type == "log" and len(g.data) >= 4
    steps = ql.explain_block(ql.EXAMPLES["e2m1"][0], "e2m1")
    f = charts.block_figure(ql.block_table(steps), steps.X, np.array(E2M1))
    assert {t.name for t in f.data} >= {"before: V", "after: X · P"}
    model = wide_micro()
    assert len(charts.scales_figure(ql.layer_scale_exponents(model, 1)).data) == 3
    e = ql.layer_errors(model, 1)
    cols = ["MXFP4, blocks of 32", "MXFP4, blocks of 128", "MXFP8, blocks of 32"]
    assert len(charts.errors_figure(e, cols).data) == 3
    assert len(charts.k3_bytes_figure(ql.k3_bytes_table()).data) == 2
