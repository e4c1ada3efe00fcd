"""Data and figures of the Hybrid attention & memory page (app/attention.py, app/charts/attention.py),
on the K3 config and on a micro model (fast), with every expectation worked out independently."""
import numpy as np
import pytest
import torch

from app import theme
from app.attention import (
    compression_planes,
    context_grid,
    crossovers,
    decode_counts,
    kda_layer_input,
    kda_state_trajectory,
    memory_curves,
    mla_cache_rows,
    schedule,
)
from app.charts.attention import cache_spec, memory_spec, planes_spec, stack_spec, state_spec
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
    # the 1,683,456 fixed values are the state (96 x 128 x 128) and the conv tail (3 x 3 x 96 x 128), not the state alone
    assert 96 * 128 * 128 + 3 * 3 * 96 * 128 == 1_683_456
    assert "576 values per token" in s.loc[3, "keeps"] and "1,683,456 values, its state and conv tail" in s.loc[0, "keeps"]
    assert "1,683,456-value state" not in s.loc[0, "keeps"]
    assert s.loc[3, "where"] == "layer 3 (position 4 of 93)" and s.loc[3, "name"] == "gated MLA"
    spec = stack_spec(s, "dark")
    assert spec["usermeta"]["chart"] == "attention_stack"
    squares = spec["datasets"]["layers"]
    colour = spec["layer"][0]["encoding"]["color"]["scale"]
    assert colour["domain"] == ["Kimi Delta Attention: fixed-size state (69 layers)",
                                "gated MLA: cache grows per token (24 layers)"]
    assert colour["range"] == [theme.KDA, theme.MLA]
    assert squares["kind"].value_counts().tolist() == [69, 24] and len(squares) == 93
    last = squares[squares["layer"] == 92].iloc[0]
    assert (last["unit"], last["slot"], last["kind"]) == (23, 0, colour["domain"][1])     # the final MLA, alone
    notes = spec["datasets"]["notes"].set_index("text")["unit"]
    assert notes["final MLA"] == 23 and "23 repeating units of 3 KDA + 1 MLA" in notes.index
    assert spec["layer"][1]["mark"]["color"] == theme.INK["dark"]                 # annotations readable in dark mode


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
    spec = planes_spec(p, "light")
    bars = spec["datasets"]["planes"]
    assert len(bars) == 7 and bars["cut"].max() == 100 and list(bars["plane"]) == list(p["plane"])   # first on top
    assert bars["text"].iloc[0] == "39,744 → 0 values per token: −100.0%"
    assert bars["text"].iloc[1] == "24,576 → 576 values per token per layer: −97.7%"
    assert bars["text"].iloc[6] == "57,344 → 57,344 values per token: no cut"
    colour = spec["layer"][0]["encoding"]["color"]["scale"]
    assert dict(zip(colour["domain"], colour["range"]))["MLA latent"] == theme.MLA
    assert spec["layer"][0]["encoding"]["x"]["scale"]["domain"] == [0, 175]       # room for the labels


def _tick_label(axis: dict, value: float) -> str:
    """What the axis' labelExpr (names[indexof(powers, round(log(v) / log(base)))]) shows at a tick."""
    import ast
    import re
    names, powers, base = re.fullmatch(r"(\[.*\])\[indexof\((\[.*\]), round\(log\(datum.value\) / log\((\d+)\)\)\)\]",
                                       axis["labelExpr"]).groups()
    return ast.literal_eval(names)[ast.literal_eval(powers).index(round(np.log(value) / np.log(int(base))))]


def test_memory_spec_series_and_marks():
    spec = memory_spec(memory_curves(FULL, 2), crossovers(FULL, 2), 4096, 2)
    lines = spec["layer"][2]
    assert lines["mark"]["type"] == "line"
    assert lines["encoding"]["color"]["scale"]["domain"] == [
        "K3 hybrid: 69 KDA states + 24 MLA latent caches", "all MLA: 93 latent caches", "all MHA: 93 layers, 96 heads x 128"]
    x, y = lines["encoding"]["x"], lines["encoding"]["y"]
    assert x["scale"]["type"] == "log" and y["scale"]["type"] == "log" and "batch 2" in y["title"]
    cross = spec["datasets"]["crossovers"].set_index("versus")
    assert 2_922 < cross.loc["all MLA", "tokens"] < 2_923 and 51 < cross.loc["all MHA", "tokens"] < 52
    assert cross.loc["all MLA", "label"] == "hybrid = all MLA at 2,923 tokens"
    at = spec["datasets"]["at_context"].set_index("design")
    assert list(at["tokens"]) == [4096] * 3
    assert at.loc["K3 hybrid", "bytes"] == 2 * 2 * (116_158_464 + 13_824 * 4096)      # batch 2, bf16
    assert at.loc["all MHA", "bytes"] == 2 * 2 * 93 * 24_576 * 4096
    assert spec["datasets"]["context"]["tokens"].tolist() == [4096]
    # the tick labels name the ticks (a labelExpr that picks the wrong name can fail silently in the browser)
    assert [_tick_label(x["axis"], v) for v in (1, 16, 1024, 65_536, 2 ** 20)] == ["1", "16", "1K", "64K", "1M"]
    assert [_tick_label(y["axis"], v) for v in (1e6, 1e9, 1e12)] == ["1.0 MB", "1.0 GB", "1.0 TB"]
    assert min(y["axis"]["values"]) >= y["scale"]["domain"][0] and max(y["axis"]["values"]) <= y["scale"]["domain"][1]
    hover = spec["layer"][3]
    assert hover["mark"]["opacity"] == 0 and [t["field"] for t in hover["encoding"]["tooltip"]] == ["design", "tokens", "cache"]


def test_state_and_cache_specs():
    s = state_spec(np.diag([1.0, -0.5, 0.0, 0.25]), 2.0, "t")
    cells = s["datasets"]["state"]
    assert len(cells) == 16 and s["width"] == s["height"]                   # square cells, d_k = d_v
    diag = cells[cells["key"] == cells["value"]].sort_values("key")["S"].tolist()
    assert diag == [1.0, -0.5, 0.0, 0.25] and cells[cells["key"] != cells["value"]]["S"].eq(0).all()
    colour = s["encoding"]["color"]["scale"]
    assert colour["domain"] == [-2.0, 2.0]                                  # fixed: colours compare across tokens
    assert colour["scheme"] == "redblue" and colour["reverse"]              # blue < 0 < red
    rows = np.arange(30, dtype=float).reshape(6, 5)
    c = cache_spec(rows, 2, 4, ["a", "b", "\n", "d", "e", "f"], "t")
    cache = c["datasets"]["cache"]
    assert len(cache) == 10 and sorted(cache["token"].unique()) == [1, 2]   # only 2 rows written so far
    assert cache.sort_values(["token", "column"])["value"].tolist() == list(range(10))
    assert set(cache[cache["column"] < 4]["part"]) == {"latent c"} and set(cache[cache["column"] == 4]["part"]) == {"k_rope"}
    y = c["layer"][0]["encoding"]["y"]
    assert y["scale"]["domain"] == ["0 a", "1 b", "2 ↵", "3 d", "4 e", "5 f"]  # every token has its row; positions from 0
    assert c["datasets"]["split"]["x"].tolist() == [3.5]                     # between the latent and k_rope
    assert c["layer"][0]["encoding"]["color"]["scale"]["domain"] == [-29.0, 29.0]
