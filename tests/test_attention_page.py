"""AppTest of the Hybrid attention & memory page: its charts and series, the memory chart's K3 point
against the accounting, measured cache counts, and bad prompts and link parameters."""
import base64
import json

import numpy as np
import pytest
from tests.conftest import open_app_page

from model import memory
from model.config import K3Config

PAGE = "views/attention.py"


def values(arr):
    """A plotly 7 array from the JSON spec: a list, or {"dtype", "bdata"} (base64, little endian)."""
    if isinstance(arr, dict):
        out = np.frombuffer(base64.b64decode(arr["bdata"]), dtype=np.dtype(arr["dtype"]).newbyteorder("<"))
        shape = arr.get("shape")
        return out.reshape([int(n) for n in str(shape).split(",")]) if shape else out
    return np.asarray(arr)


def charts(at) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def trace_names(at) -> list[list[str]]:
    return [[t.get("name") for t in spec["data"]] for spec in charts(at)]


def memory_chart(at) -> dict:
    return next(s for s in charts(at)
                if any(str(t.get("name", "")).startswith("K3 hybrid") for t in s["data"]))


def open_page(params: dict | None = None):
    return open_app_page(PAGE, params)


@pytest.fixture(scope="module")
def page():
    return open_page()


def test_every_chart_is_there_with_its_series(page):
    names = trace_names(page)
    assert len(names) == 5
    assert names[0] == ["Kimi Delta Attention: fixed-size state (69 layers)",
                        "gated MLA: cache grows per token (24 layers)"]
    assert names[1] == ["KDA state"] and names[2] == ["MLA latent cache"]
    assert names[3][:4] == ["K3 hybrid: 69 KDA states + 24 MLA latent caches", "all MLA: 93 latent caches",
                            "all MHA: 93 layers, 96 heads x 128", "crossover"]
    assert names[4] == ["cut"]
    assert not page.error


def test_memory_chart_k3_point_at_the_published_context_equals_the_accounting(page):
    hybrid = memory_chart(page)["data"][0]
    x, y = values(hybrid["x"]), values(hybrid["y"])
    assert x[-1] == 1_048_576
    assert y[-1] == memory.hybrid(K3Config.full()).nbytes(1_048_576) == 29_223_346_176
    metrics = {m.label: m.value for m in page.metric}
    assert metrics["K3 hybrid at 1M tokens"] == "29.2 GB"
    assert metrics["all MHA at 1M tokens"] == "4.8 TB"


def test_batch_slider_scales_the_curves(page):
    page.slider(key="att_batch").set_value(4).run()
    y = values(memory_chart(page)["data"][0]["y"])
    assert y[-1] == 4 * 29_223_346_176
    assert page.query_params["batch"] == ["4"] or page.query_params["batch"] == "4"
    page.slider(key="att_batch").set_value(1).run()


def test_state_keeps_its_size_while_the_cache_grows(page):
    T = len(page.select_slider(key="att_token").options)       # positions 0..T-1, shown as 1..T
    sizes, written = set(), []
    for t in (1, T):
        page.select_slider(key="att_token").set_value(t - 1).run()
        specs = charts(page)
        sizes.add(values(specs[1]["data"][0]["z"]).shape if isinstance(specs[1]["data"][0]["z"], dict)
                  else np.asarray(specs[1]["data"][0]["z"]).shape)
        z = specs[2]["data"][0]["z"]
        z = np.array([[np.nan if v is None else v for v in row] for row in z], dtype=float) \
            if isinstance(z, list) else values(z)
        written.append(int(np.isfinite(z).all(axis=1).sum()))
    assert sizes == {(16, 16)}
    assert written == [1, T]


def test_measured_cache_counts_match_the_accounting(page):
    df = page.dataframe[0].value
    assert df["stage"].tolist() == ["prefill", "decode step 1", "decode step 2", "decode step 3"]
    assert df["matches"].all()
    assert df["KDA values (measured)"].eq(69 * 800).all()
    T = int(df["tokens"].iloc[0])
    assert df["MLA values (measured)"].tolist() == [24 * 20 * (T + s) for s in range(4)]


def test_empty_prompt_gets_a_message_and_the_k3_scale_charts_stay(page):
    page.segmented_control(key="prompt_preset").set_value("own").run()
    page.text_area(key="prompt_text").set_value("   ").run()
    assert not page.exception
    assert any("empty" in i.value for i in page.info)
    assert len(trace_names(page)) == 3           # stack, memory, planes
    page.text_area(key="prompt_text").set_value("<b>x</b> " * 300).run()
    assert not page.exception and len(trace_names(page)) == 5


def test_bad_link_parameters_are_clamped_with_a_notice():
    at = open_page({"kda": "3", "head": "zz", "ctx": "1000", "batch": "99999", "token": "-4"})
    notes = " ".join(i.value for i in at.info)
    assert "KDA layer 3 is not available" in notes and "showing 2" in notes     # layer 3 is MLA -> KDA 2
    assert "not a whole number" in notes                                       # head=zz
    assert at.select_slider(key="att_ctx").value == 1024
    assert at.slider(key="att_batch").value == 256
    assert at.select_slider(key="att_token").value == 0          # token -4 -> the first position
    assert at.query_params["kda"] in ("2", ["2"])
