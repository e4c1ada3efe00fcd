"""The Overview's data and figures: built from the config and accounting, sources on every row."""
import json

import numpy as np
import pytest

from app.charts.overview import STAR, breakdown_spec, frontier_spec, growth_spec, stack_spec
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
    spec = stack_spec(s, 8)
    squares, blocks = spec["datasets"]["squares"], spec["datasets"]["blocks"]
    assert len(squares) == 2 * 93 and squares["layer"].nunique() == 93
    assert squares["kind"].value_counts().to_dict() == {
        "LatentMoE FFN (92)": 92, "Kimi Delta Attention (69)": 69, "gated MLA (24)": 24, "dense FFN (1)": 1}
    assert list(blocks["label"]) == [f"block {b}" for b in range(1, 9)]
    assert (blocks["end"] - blocks["start"]).tolist() == [12] * 7 + [9]      # blocks tile the 93 layers
    assert blocks["start"].iloc[0] == -0.5 and blocks["end"].iloc[-1] == 92.5
    # the squares' colour has its legend: no other layer shares the colour channel (a shared channel merges
    # the scales, and the shading's legend=None then hid the legend)
    colour_layers = [layer for layer in spec["layer"] if "color" in layer["encoding"]]
    assert len(colour_layers) == 1 and colour_layers[0]["encoding"]["color"]["legend"]


def test_frontier_table_sources_and_computed_k3():
    df = frontier_table()
    assert df["source"].str.len().min() > 5
    k3 = df[df["origin"] == "computed"]
    assert len(k3) == 1 and k3["total_b"].iloc[0] == pytest.approx(2779.5, rel=1e-3)
    assert "Kimi K3" not in set(df.loc[df["origin"] == "published", "model"])
    ds = df.set_index("model")
    assert ds.loc["DeepSeek-V3", "total_b"] == 671 and ds.loc["DeepSeek-V3", "active_b"] == 37
    spec = frontier_spec(df)
    x, y = spec["layer"][0]["encoding"]["x"], spec["layer"][0]["encoding"]["y"]
    assert x["scale"]["type"] == "log" and y["scale"]["type"] == "log"
    models = spec["datasets"]["models"]
    assert len(models) == len(df) and (models["origin"] == "Kimi K3, computed by our accounting").sum() == 1
    lines = spec["datasets"]["lines"]                           # each dotted line keeps its share throughout
    assert np.allclose(lines["active"] / lines["total"], np.repeat([0.01, 0.03, 0.1, 0.3], 2))
    assert STAR in json.dumps(spec["layer"][2]["encoding"]["shape"])


def test_k2_to_k3_ratios():
    df = k2_vs_k3().set_index("metric")
    assert df.loc["Routed experts", "ratio"] == pytest.approx(896 / 384)
    assert df.loc["Context (tokens)", "ratio"] == 8
    # 16 x 3584 == 8 x 7168: latent dispatch keeps K2's per-token volume
    assert df.loc["Values a token sends to its experts", "ratio"] == 1
    assert df.loc["Total parameters (B)", "K2"] == pytest.approx(1026.4, abs=0.1)
    panels = growth_spec(k2_vs_k3())["datasets"]["growth"]
    assert panels["panel"].nunique() == len(df) and len(panels) == 2 * len(df)
    k3_experts = panels[(panels["metric"] == "Routed experts") & (panels["model"] == "K3")]
    assert k3_experts["value"].tolist() == [896] and k3_experts["panel"].iloc[0].endswith("×2.33")
    assert "1.04T" in k2_published_note() and "1,026.4B" in k2_published_note()


def test_breakdown_shares():
    df = breakdown(K3Config.full())
    assert df["share of total"].sum() == pytest.approx(1)
    assert df["share of active"].sum() == pytest.approx(1)
    for which in ("total", "active"):
        bars = breakdown_spec(df, which)["datasets"]["breakdown"]
        assert np.isclose(bars["percent"].sum(), 100) and bars["percent"].is_monotonic_decreasing
    bars = breakdown_spec(df, "active")["datasets"]["breakdown"]
    assert "embedding" not in set(bars["component"])              # a lookup: no active parameters


def test_text_helpers():
    assert fmt_params(2_779_484_393_568) == "2.8T" and fmt_params(104_189_530_208) == "104.2B"
    escaped = md_escape("<b>**x**</b>\x00" + "a" * 200)
    assert "<b>" not in escaped and "\\*\\*" in escaped and "\x00" not in escaped and len(escaped) < 200


def test_markdown_table_keeps_its_columns_and_makes_cells_inert():
    import re

    import pandas as pd

    from app.text import md_table
    df = pd.DataFrame({"token": ["a|b", "<script>x</script>", "**bold** `c`", "", "&lt;"], "p": ["0.5"] * 5})
    long = " ".join(["a sentence of the comparison"] * 20)                    # ~580 characters: shown whole
    assert md_table(pd.DataFrame({"c": [long]})).splitlines()[2] == "| " + long + " |"
    lines = md_table(df).splitlines()
    assert len(lines) == 2 + len(df) and lines[0] == "| token | p |" and set(lines[1]) <= set("|- ")
    for line in lines:                       # every row splits into the header's two columns at unescaped pipes
        assert len(re.split(r"(?<!\\)\|", line)) == 4
    body = "\n".join(lines[2:])
    assert "<script>" not in body and "**" not in body.replace("\\*", "") and "`" not in body.replace("\\`", "")
    assert "\\&lt;" in body and "\u00a0" in lines[5]         # an entity stays as typed; an empty cell keeps its place


def test_every_headline_card_keeps_its_row_height():
    # a card whose lines wrap is taller than the others in its row (the Layers card was): in the wide
    # layout a card's line holds about 29 characters at the sidebar's default width (1,400 px window)
    from app.overview import headlines
    for h in headlines():
        assert len(f"✓ matches published {h.published_text}") <= 29, h.label
        assert len(h.detail) <= 29, h.label


def test_table_cells_are_written_as_the_page_asks_and_read_back():
    import math

    import pandas as pd

    from app.text import cell_text, md_table, text_table
    from tests.conftest import markdown_table
    assert cell_text(None) == cell_text(math.nan) == "–" and cell_text(True) == "yes" and cell_text(False) == "no"
    assert cell_text(3.0) == "3" and cell_text(2.5) == "2.5" and cell_text(17578.0, ",d") == "17,578"
    assert cell_text(0.1234, ".1%") == "12.3%" and cell_text(4.2e-17, ".2e") == "4.20e-17"
    assert cell_text(7, lambda v: f"{v} tokens") == "7 tokens"
    import numpy as np
    assert cell_text(np.float32("nan")) == cell_text(pd.NA) == "–" and cell_text(np.bool_(True)) == "yes"
    assert cell_text(np.float32(1234.0), ",d") == "1,234" and cell_text(np.int64(5)) == "5"
    df = pd.DataFrame({"name": ["a|b", "<b>x</b>"], "count": [17578, 3], "share": [0.5, math.nan], "ok": [True, False]})
    shown, right = text_table(df, {"count": ",d", "share": ".2f"})
    assert right == ["count", "share"]                                  # numbers align right, text left
    text = md_table(shown, right=right)
    assert text.splitlines()[1] == "| --- | ---: | ---: | --- |"
    back = markdown_table(text)
    assert back["name"].tolist() == ["a|b", "<b>x</b>"]                 # escaped on the page, the same text read back
    assert back["count"].tolist() == [17578, 3] and back["ok"].tolist() == [True, False]
    assert back["share"].iloc[0] == 0.5 and math.isnan(back["share"].iloc[1])
    assert markdown_table("Just a sentence.") is None
