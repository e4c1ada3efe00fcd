"""AppTest of the three "Mixture of experts" pages: SiTU-GLU vs SwiGLU, Load balancing lab, Expert
parallelism (widgets, link parameters, bad input, and one real distributed run from the button)."""
import base64
import json

import numpy as np
import pytest

from tests.conftest import markdown_tables, open_app_page, outside_code, vega_datasets

open_page = open_app_page


def figures(at):
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def values(arr):
    """Plotly 7 sends numeric arrays as {"dtype", "bdata"}: decode them."""
    if isinstance(arr, dict) and "bdata" in arr:
        return np.frombuffer(base64.b64decode(arr["bdata"]), dtype=np.dtype(arr["dtype"]))
    return np.asarray(arr)


def test_situ_page_curves_crossing_and_chain():
    at = open_page("views/situ_glu.py")
    charts = lambda: {json.loads(el.proto.spec)["usermeta"]["chart"]: el for el in at.get("vega_lite_chart")}
    assert list(charts()) == ["situ_output", "situ_factors", "situ_derivatives", "situ_grid", "situ_hist", "situ_chain"]
    assert not at.get("plotly_chart")
    out = vega_datasets(charts()["situ_output"])
    assert out["crossings"]["g"].tolist() == [pytest.approx(4.5284, abs=1e-3)]               # u = 100
    assert np.abs(out["curves"]["situ"]).max() <= 100 and out["curves"]["swiglu"].max() > 448
    hist = vega_datasets(charts()["situ_hist"])["bins"]
    assert set(hist["activation"]) == {"SiTU-GLU", "SwiGLU"}
    assert hist.groupby("activation")["count"].sum().nunique() == 1     # the same hidden values, counted twice
    chain_el = charts()["situ_chain"]
    chain = vega_datasets(chain_el)["layers"]
    assert chain["variant"].nunique() == 4 and chain["layer"].max() == 92
    spec = json.loads(chain_el.proto.spec)
    assert any(layer["encoding"]["y"]["scale"].get("type") == "log" for layer in spec["layer"]
               if layer["mark"]["type"] == "line")
    # the two summaries as Markdown tables: a row per activation, then a row per variant of the chain (its 4)
    tables = [m.value.splitlines() for m in at.markdown if m.value.startswith("| ")]
    assert [t[0].split(" | ")[0] for t in tables] == ["| activation", "| variant"]
    assert len(tables[0]) == 2 + 2 and len(tables[1]) == 2 + 4
    # a wider range and a negative up value: the crossing moves, nothing breaks
    at.slider(key="situ_range").set_value(1000).run()
    at.slider(key="situ_up").set_value(-3).run()
    assert not at.exception
    cross = vega_datasets(charts()["situ_output"])["crossings"]
    assert cross["g"].tolist() == [pytest.approx(448 / 3, rel=1e-6)] and cross["value"].tolist() == [-448.0]
    assert at.query_params["range"] == ["1000"] or at.query_params["range"] == "1000"


def test_situ_page_clamps_bad_link_values():
    at = open_page("views/situ_glu.py", {"range": "5000", "up": "abc", "layer": "0", "chain": "99"})
    notes = " ".join(i.value for i in at.info)
    assert "5000" in notes and "abc" in notes and "layer" in notes
    assert at.slider(key="situ_range").value == 1000 and at.slider(key="situ_up").value == 100
    assert at.select_slider(key="situ_layer").value == 1
    assert not at.error


def test_balance_page_runs_every_method():
    at = open_page("views/balance.py", {"m": "1024", "steps": "4"})
    charts = {json.loads(el.proto.spec)["usermeta"]["chart"]: el for el in at.get("vega_lite_chart")}
    assert set(charts) == {"balance_steps", "balance_load", "balance_hist", "balance_weights"}
    steps = vega_datasets(charts["balance_steps"])["steps"]
    assert set(steps["method"]) == {"Quantile Balancing, exact", "Sign rule (DeepSeek-V3)",
                                    "Auxiliary loss", "No balancing", "Quantile Balancing, histogram"}
    assert sorted(set(steps["step"])) == [1, 2, 3, 4]
    table = markdown_tables(at)[0].set_index("method")
    assert table.loc["Quantile Balancing, exact", "max/mean at last step"] < \
        0.2 * table.loc["No balancing", "max/mean at last step"]
    assert len(vega_datasets(charts["balance_load"])["loads"]) == 896       # one bar per expert
    checks = markdown_tables(at)[1].set_index("check")["max difference"]
    assert checks.iloc[1] < 1e-12 < checks.iloc[2]                    # QB bias: identical weights
    text = " ".join(m.value for m in at.markdown)
    assert "steps" in text and "exact minimiser" in text


def test_balance_page_live_source_and_bad_input():
    at = open_page("views/balance.py", {"src": "live", "n": "16", "k": "20", "m": "1024", "steps": "3",
                                        "gamma": "-1", "view": "<b>x</b>"})
    notes = " ".join(i.value for i in at.info)
    assert "top-k" in notes.lower() or "Top-" in notes                 # k >= n: clamped with a message
    assert "<b>" not in outside_code(notes)
    assert not at.error
    assert any("live model" in c.value for c in at.caption)


def test_parallel_page_shards_and_real_run():
    at = open_page("views/parallel.py")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Experts per device"] == "112"
    charts = lambda: {json.loads(el.proto.spec)["usermeta"]["chart"]: el for el in at.get("vega_lite_chart")}
    assert set(charts()) == {"parallel_loads", "parallel_fanout", "parallel_traffic", "parallel_bytes"}
    assert not at.get("plotly_chart")
    loads = vega_datasets(charts()["parallel_loads"])["loads"]
    assert len(loads) == 92 * 8                                        # every MoE layer of the live model x 8 devices
    per_layer = loads.groupby("layer")["pairs"].sum()
    assert per_layer.nunique() == 1 and per_layer.iloc[0] % 16 == 0    # every token sends its 16 pairs somewhere
    assert loads.groupby("layer")["ratio"].mean().round(9).eq(1).all()  # relative to an even share
    traffic = vega_datasets(charts()["parallel_traffic"])["traffic"]
    assert len(traffic) == 64 and traffic["count"].sum() == per_layer.iloc[0]
    at.select_slider(key="ep_g").set_value(7).run()
    assert {m.label: m.value for m in at.metric}["Experts per device"] == "128"
    assert len(vega_datasets(charts()["parallel_loads"])["loads"]) == 92 * 7
    at.select_slider(key="ep_run_g").set_value(2).run()
    at.button(key="ep_run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.success and "equals the single-process layer" in at.success[0].value
    assert "Bytes sent, all ranks" in {m.label for m in at.metric}
    sent = vega_datasets(charts()["parallel_rank_bytes"])["ranks"]
    assert sorted(set(sent["rank"])) == [0, 1] and set(sent["part"]) == {"dispatch", "combine"}
    total = {m.label: m.value for m in at.metric}["Bytes sent, all ranks"]
    assert int(sent["bytes"].sum()) == int(total.replace(",", ""))    # the chart adds up to the measured total
    # the torchrun commands are drawn only while their expander is open (st.code's highlighter is costly to load)
    assert not at.code
    at.session_state["ep_torchrun"] = True
    at.run()
    assert len(at.code) == 1 and "torchrun --standalone --nproc-per-node 4 -m model.parallel" in at.code[0].value


def test_parallel_page_bad_link():
    at = open_page("views/parallel.py", {"g": "5", "run_g": "64", "layer": "x"})
    notes = " ".join(i.value for i in at.info)
    assert "5" in notes and "64" in notes
    assert at.select_slider(key="ep_g").value == 4                     # nearest divisor of 896
    assert at.select_slider(key="ep_run_g").value == 8


# ---- issue 48 review: what the Load balancing lab and MoE vs Mixture of Agents pages render --------------------

def test_balance_page_renders_its_reviewed_text():
    at = open_page("views/balance.py", {"m": "1024", "steps": "4", "n": "16", "k": "20"})
    captions = " ".join(c.value for c in at.caption)
    assert "from 1,000 bins" in captions and "1000 bins" not in captions          # the default 1,000 bins
    assert "Exact QB ends at" in captions and "lands a little above" not in captions
    table = markdown_tables(at)[0].set_index("method")
    assert table.loc["Auxiliary loss", "parameter"] == "α = 1,000"
    notes = " ".join(i.value for i in at.info)
    assert "more than the 16 experts there are" in notes and "leaves nothing to balance" not in notes   # k > n


def test_moa_page_caption_follows_the_match_toggle():
    at = open_page("views/moe_vs_moa.py", {"match": "0", "size": "100", "n": "4"})
    caption = next(c.value for c in at.caption if c.value.startswith("For a "))
    # 4 agents of 100B hold 400B, not K3's 2,779.5B: the old caption said "the same parameter count" regardless
    assert "the same parameter count" not in caption and "400B parameters against K3's 2,779.5B" in caption
    assert "(0.14x K3's)" in " ".join(c.value for c in at.caption)          # 400 / 2,779.5, no "0.1x"
    at = open_page("views/moe_vs_moa.py", {"n": "1", "size": "39", "match": "0", "prec": "mxfp4"})
    shown = markdown_tables(at)[0].set_index("cost")["MoA / K3"]
    assert shown["Weight memory"].startswith("1/") and not any(v.startswith("0.0") for v in shown)
    caption = next(c.value for c in at.caption if c.value.startswith("For a "))
    assert "aggregator" not in caption                                         # N = 1: a single dense model
