"""Data and figures of the Hybrid attention & memory page (app/attention.py, app/charts/attention.py),
on the K3 config and on a micro model (fast), with every expectation worked out independently."""
import numpy as np
import pytest
import torch

from app.attention import (compression_planes, context_grid, crossovers, decode_counts, kda_layer_input,
                           kda_state_trajectory, memory_curves, mla_cache_rows, schedule)
from app.charts.attention import cache_figure, memory_figure, planes_figure, stack_figure, state_figure
from model.config import K3Config
from model.k3 import K3Model

FULL = K3Config.full()


@pytest.fixture(scope="module")
def micro():
    torch.manual_seed(0)
    cfg = K3Config.micro()
    model = K3Model(cfg).eval().requires_grad_(False)
    with torch.no_grad():                      # non-trivial depth weights, so the read matters
        for p in model.parameters():
            if p.dim() == 1 and p.shape[0] == cfg.d_model:
                p.add_(0.3 * torch.randn_like(p))
    ids = torch.randint(0, cfg.vocab_size, (1, 9))
    with torch.inference_mode():
        out = model(ids)
    return model, out


def test_schedule_is_three_kda_then_one_mla_plus_a_final_mla():
    s = schedule(FULL)
    assert len(s) == 93 and (s["kind"] == "KDA").sum() == 69 and (s["kind"] == "MLA").sum() == 24
    units = s[s["unit"] < 23]
    assert all(tuple(g) == ("KDA", "KDA", "KDA", "MLA") for _, g in units.groupby("unit")["kind"])
    assert units.groupby("unit").size().eq(4).all() and units["unit"].nunique() == 23
    last = s[s["unit"] == 23]
    assert last["layer"].tolist() == [92] and last["kind"].tolist() == ["MLA"]
    assert "576 values per token" in s.loc[3, "hover"] and "1,683,456-value state" in s.loc[0, "hover"]
    fig = stack_figure(s)
    assert [len(t.x) for t in fig.data] == [69, 24]


@pytest.mark.parametrize("layer", [0, 2, 4])
def test_recorded_kda_input_reproduces_the_recorded_layer_output(micro, layer):
    model, out = micro
    with torch.inference_mode():
        x = kda_layer_input(model, out, layer)
        # independently: the pre-attention read of the residual state entering the layer, then the norm
        state = out.trace.snapshots[layer].copy()
        state.record = False
        state.begin_layer(layer)
        h, _ = state.read(model.layers[layer].q_attn)
        y, _ = model.layers[layer].attn(x)
    torch.testing.assert_close(x, model.layers[layer].attn_norm(h), rtol=0, atol=1e-6)
    torch.testing.assert_close(y, out.trace.outputs[(layer, "attn")], rtol=1e-5, atol=1e-6)
    assert len(out.trace.reads) == 2 * 6 + 1          # the shared trace was not touched


def test_kda_state_trajectory_has_fixed_size_and_ends_at_the_cached_state(micro):
    model, out = micro
    traj = kda_state_trajectory(model, out, 4)
    cfg = model.cfg
    assert traj.states.shape == (9, cfg.kda_heads, cfg.kda_head_dim, cfg.kda_head_dim)
    assert traj.final_error < 1e-5
    # each token changes the state (the delta rule writes); the size never does
    assert all(np.abs(traj.states[t] - traj.states[t - 1]).max() > 0 for t in range(1, 9))
    with pytest.raises(ValueError, match="not a KDA layer"):
        kda_layer_input(model, out, 3)


def test_mla_cache_rows_are_the_cached_latent_and_rope(micro):
    model, out = micro
    rows = mla_cache_rows(out, 3)
    c = out.cache.layers[3]
    assert rows.shape == (9, model.cfg.kv_lora_rank + model.cfg.qk_rope_dim)
    np.testing.assert_array_equal(rows[:, :model.cfg.kv_lora_rank], c.latent[0].numpy())
    with pytest.raises(ValueError):
        mla_cache_rows(out, 0)


def test_decode_counts_measure_real_caches(micro):
    model, out = micro
    df, new_ids = decode_counts(model, out, steps=3)
    assert df["tokens"].tolist() == [9, 10, 11, 12] and len(new_ids) == 3
    assert df["matches"].all()
    assert df["KDA values (measured)"].nunique() == 1                       # fixed
    per_token = model.cfg.n_mla * (model.cfg.kv_lora_rank + model.cfg.qk_rope_dim)   # 2 x 10
    assert df["MLA values (measured)"].diff().dropna().eq(per_token).all()  # grows by one row a token


def test_memory_curves_end_at_the_published_context_and_scale_with_batch():
    assert context_grid()[0] == 1 and context_grid()[-1] == 1_048_576
    df = memory_curves(FULL, batch=1)
    k3 = df[df["design"] == "K3 hybrid"].set_index("tokens")["bytes"]
    assert k3.loc[1_048_576] == 29_223_346_176                               # 2 x (116,158,464 + 13,824 T)
    assert k3.loc[1] == 2 * (116_158_464 + 13_824)
    mha = df[df["design"] == "all MHA"].set_index("tokens")["bytes"]
    assert mha.loc[1_048_576] == 2 * 93 * 24_576 * 1_048_576
    df8 = memory_curves(FULL, batch=8)
    assert df8["bytes"].tolist() == [8 * b for b in df["bytes"]]
    cross = crossovers(FULL).set_index("versus")["tokens"]
    assert 2_922 < cross["all MLA"] < 2_923 and 51 < cross["all MHA"] < 52


def test_compression_planes_reproduce_the_claims_and_their_caveats():
    p = compression_planes()
    assert len(p) == 7 and set(p["plane"]) == {"KDA state", "MLA latent", "Block AttnRes", "Latent dispatch"}
    kda = p[p["plane"] == "KDA state"].iloc[0]
    assert (kda["before"], kda["after"], kda["cut"]) == (69 * 576, 0, 1.0)
    assert "116,158,464 values" in kda["explanation"] and "232.3 MB" in kda["explanation"]
    mla = p[p["plane"] == "MLA latent"]
    assert mla["cut"].iloc[0] == pytest.approx(1 - 576 / 24_576) and round(mla["cut"].iloc[0], 3) == 0.977
    assert (mla["before"].iloc[1], mla["after"].iloc[1]) == (93, 24)
    assert round(mla["cut"].iloc[1], 3) == 0.742 and "75%" in mla["explanation"].iloc[1]
    ar = p[p["plane"] == "Block AttnRes"]
    assert ar["ratio"].iloc[0] == pytest.approx(11.625) and (ar["before"].iloc[1], ar["after"].iloc[1]) == (187, 9)
    lat = p[p["plane"] == "Latent dispatch"]
    assert (lat["before"].iloc[0], lat["after"].iloc[0], lat["cut"].iloc[0]) == (7168, 3584, 0.5)
    assert lat["before"].iloc[1] == lat["after"].iloc[1] == 57_344 and lat["cut"].iloc[1] == 0
    fig = planes_figure(p)
    assert len(fig.data) == 1 and len(fig.data[0].x) == 7 and max(fig.data[0].x) == 100


def test_memory_figure_series_and_marks():
    cross = crossovers(FULL, 2)
    fig = memory_figure(memory_curves(FULL, 2), cross, 4096, 2)
    names = [t.name for t in fig.data]
    assert names[:3] == ["K3 hybrid: 69 KDA states + 24 MLA latent caches", "all MLA: 93 latent caches",
                         "all MHA: 93 layers, 96 heads x 128"]
    assert "crossover" in names and len(fig.data[names.index("crossover")].x) == 2
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    marks = fig.data[-1]
    assert list(marks.x) == [4096] * 3


def test_state_and_cache_figures():
    s = state_figure(np.eye(4), 1.0, "t")
    assert np.asarray(s.data[0].z).shape == (4, 4) and s.data[0].zmid == 0
    rows = np.arange(30, dtype=float).reshape(6, 5)
    c = cache_figure(rows, 2, 4, list("abcdef"), "t")
    z = np.asarray(c.data[0].z, dtype=float)
    assert np.isfinite(z[:2]).all() and np.isnan(z[2:]).all()              # only 2 rows written so far
