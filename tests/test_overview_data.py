"""The Overview's data and figures: built from the config and accounting, sources on every row."""
import numpy as np
import pytest

from app.charts.overview import breakdown_figure, frontier_figure, growth_figure, stack_figure
from app.overview import breakdown, frontier_table, headlines, k2_published_note, k2_vs_k3, layer_stack
from app.text import fmt_params, md_escape
from model.config import K3Config


def test_headlines_reproduce_every_published_figure():
    hs = headlines()
    assert len(hs) == 8 and all(h.holds for h in hs)
    # the check can fail: a config with one layer type swapped no longer matches
    cfg = K3Config.full()
    wrong = cfg.with_(layer_types=("kda",) * 93)
    assert not next(h for h in headlines(wrong) if h.label == "Layers").holds
    assert not next(h for h in headlines(cfg.with_(top_k=8)) if h.label == "Active per token").holds


def test_layer_stack_has_every_layer_and_block():
    cfg = K3Config.full()
    s = layer_stack(cfg)
    assert len(s) == 93 and (s["attention"] == "KDA").sum() == 69 and (s["attention"] == "MLA").sum() == 24
    assert (s["ffn"] == "dense").sum() == 1 and s.loc[0, "ffn"] == "dense"
    assert s.groupby("block").size().tolist() == [12] * 7 + [9]
    assert "position 93 of 93" in s.loc[92, "hover"] and "MLA" in s.loc[92, "hover"]
    fig = stack_figure(s, 8)
    assert sum(len(t.x) for t in fig.data) == 2 * 93
    assert sum(1 for a in fig.layout.annotations if a.text.startswith("block")) == 8


def test_frontier_table_sources_and_computed_k3():
    df = frontier_table()
    assert df["source"].str.len().min() > 5
    k3 = df[df["origin"] == "computed"]
    assert len(k3) == 1 and k3["total_b"].iloc[0] == pytest.approx(2779.5, rel=1e-3)
    assert "Kimi K3" not in set(df.loc[df["origin"] == "published", "model"])
    ds = df.set_index("model")
    assert ds.loc["DeepSeek-V3", "total_b"] == 671 and ds.loc["DeepSeek-V3", "active_b"] == 37
    fig = frontier_figure(df)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"


def test_k2_to_k3_ratios():
    df = k2_vs_k3().set_index("metric")
    assert df.loc["Routed experts", "ratio"] == pytest.approx(896 / 384)
    assert df.loc["Context (tokens)", "ratio"] == 8
    # 16 x 3584 == 8 x 7168: latent dispatch keeps K2's per-token volume
    assert df.loc["Values a token sends to its experts", "ratio"] == 1
    assert df.loc["Total parameters (B)", "K2"] == pytest.approx(1026.4, abs=0.1)
    assert len(growth_figure(k2_vs_k3()).data) == len(df)
    assert "1.04T" in k2_published_note() and "1,026.4B" in k2_published_note()


def test_breakdown_shares():
    df = breakdown(K3Config.full())
    assert df["share of total"].sum() == pytest.approx(1)
    assert df["share of active"].sum() == pytest.approx(1)
    fig = breakdown_figure(df, "active")
    assert np.isclose(sum(fig.data[0].x), 100)


def test_text_helpers():
    assert fmt_params(2_779_484_393_568) == "2.8T" and fmt_params(104_189_530_208) == "104.2B"
    escaped = md_escape("<b>**x**</b>\x00" + "a" * 200)
    assert "<b>" not in escaped and "\\*\\*" in escaped and "\x00" not in escaped and len(escaped) < 200
