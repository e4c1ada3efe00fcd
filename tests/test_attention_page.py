"""AppTest of the Hybrid attention & memory page: its charts and series, the memory chart's K3 point
against the accounting, measured cache counts, and bad prompts and link parameters."""
import json

import pytest

from model import memory
from model.config import K3Config
from tests.conftest import markdown_tables, open_app_page, vega_datasets

PAGE = "views/attention.py"
CHARTS = ["attention_stack", "attention_state", "attention_cache", "attention_memory", "attention_planes"]


def charts(at) -> dict[str, tuple[dict, dict]]:
    """The page's Vega-Lite charts by name: (spec, datasets as data frames), in page order."""
    out = {}
    for el in at.get("vega_lite_chart"):
        spec = json.loads(el.proto.spec)
        out[spec["usermeta"]["chart"]] = (spec, vega_datasets(el))
    return out


def hybrid_curve(at):
    curves = charts(at)["attention_memory"][1]["curves"]
    return curves[curves["design"] == "K3 hybrid"].sort_values("tokens")


def open_page(params: dict | None = None):
    return open_app_page(PAGE, params)


@pytest.fixture(scope="module")
def page():
    return open_page()


def test_every_chart_is_there_with_its_series(page):
    c = charts(page)
    assert list(c) == CHARTS and not page.get("plotly_chart")
    stack, layers = c["attention_stack"][0], c["attention_stack"][1]["layers"]
    assert stack["layer"][0]["encoding"]["color"]["scale"]["domain"] == [
        "Kimi Delta Attention: fixed-size state (69 layers)", "gated MLA: cache grows per token (24 layers)"]
    assert len(layers) == 93 and (layers["kind"].str.startswith("gated MLA")).sum() == 24
    assert len(c["attention_state"][1]["state"]) == 16 * 16                  # the tiny model's d_k x d_v
    memory_spec, memory_data = c["attention_memory"]
    assert memory_spec["layer"][2]["encoding"]["color"]["scale"]["domain"] == [
        "K3 hybrid: 69 KDA states + 24 MLA latent caches", "all MLA: 93 latent caches", "all MHA: 93 layers, 96 heads x 128"]
    assert sorted(memory_data["crossovers"]["versus"]) == ["all MHA", "all MLA"]
    assert len(c["attention_planes"][1]["planes"]) == 7
    assert not page.error


def test_memory_chart_k3_point_at_the_published_context_equals_the_accounting(page):
    hybrid = hybrid_curve(page)
    assert hybrid["tokens"].iloc[-1] == 1_048_576
    assert hybrid["bytes"].iloc[-1] == memory.hybrid(K3Config.full()).nbytes(1_048_576) == 29_223_346_176
    at = charts(page)["attention_memory"][1]["at_context"].set_index("design")
    assert at.loc["K3 hybrid", "bytes"] == 29_223_346_176 and at["tokens"].eq(1_048_576).all()
    metrics = {m.label: m.value for m in page.metric}
    assert metrics["K3 hybrid at 1M tokens"] == "29.2 GB"
    assert metrics["all MHA at 1M tokens"] == "4.8 TB"


def test_batch_slider_scales_the_curves(page):
    page.slider(key="att_batch").set_value(4).run()
    assert hybrid_curve(page)["bytes"].iloc[-1] == 4 * 29_223_346_176
    assert "batch 4" in charts(page)["attention_memory"][0]["layer"][2]["encoding"]["y"]["title"]
    assert page.query_params["batch"] == ["4"] or page.query_params["batch"] == "4"
    page.slider(key="att_batch").set_value(1).run()


def test_state_keeps_its_size_while_the_cache_grows(page):
    T = len(page.select_slider(key="att_read").options)        # tokens read: 1..T
    sizes, written, rows = set(), [], set()
    for t in (1, T):
        page.select_slider(key="att_read").set_value(t).run()
        c = charts(page)
        state = c["attention_state"][1]["state"]
        sizes.add((state["key"].nunique(), state["value"].nunique(), len(state)))
        cache = c["attention_cache"][1]["cache"]
        written.append(cache["token"].nunique())
        assert len(cache) == 20 * t                                           # 16 latent + 4 rope values a row
        rows.add(len(c["attention_cache"][0]["layer"][0]["encoding"]["y"]["scale"]["domain"]))
    assert sizes == {(16, 16, 256)}
    assert written == [1, T] and rows == {T}                                  # every token has a row, written or not


def test_measured_cache_counts_match_the_accounting(page):
    df = markdown_tables(page)[0]
    assert df["stage"].tolist() == ["prefill (the page's cached forward, not timed)", "decode step 1",
                                    "decode step 2", "decode step 3"]
    assert df["step (s)"].dtype == float and df["step (s)"].isna().tolist() == [True, False, False, False]
    assert df["equal"].all()
    assert df["KDA measured"].eq(69 * 800).all()
    T = int(df["tokens"].iloc[0])
    assert df["MLA measured"].tolist() == [24 * 20 * (T + s) for s in range(4)]


def test_empty_prompt_gets_a_message_and_the_k3_scale_charts_stay(page):
    page.segmented_control(key="prompt_preset").set_value("own").run()
    page.text_area(key="prompt_text").set_value("   ").run()
    assert not page.exception
    assert any("empty" in i.value for i in page.info)
    assert list(charts(page)) == ["attention_stack", "attention_memory", "attention_planes"]
    page.text_area(key="prompt_text").set_value("<b>x</b> " * 300).run()
    assert not page.exception and list(charts(page)) == CHARTS


def test_bad_link_parameters_are_clamped_with_a_notice():
    at = open_page({"kda": "3", "head": "zz", "ctx": "1000", "batch": "99999", "read": "-4"})
    notes = " ".join(i.value for i in at.info)
    assert "KDA layer 3 is not available" in notes and "showing 2" in notes     # layer 3 is MLA -> KDA 2
    assert "not a whole number" in notes                                       # head=zz
    assert at.select_slider(key="att_ctx").value == 1024
    assert at.slider(key="att_batch").value == 256
    assert at.select_slider(key="att_read").value == 1           # read -4 -> the first token
    assert at.query_params["kda"] in ("2", ["2"])


def test_captions_and_labels_follow_the_controls_and_read_for_people(page):
    """Issue 45 item 9 / issue 48: the state's caption names the token the slider picks; at a 1-token context the
    metrics say "1 token" and compare with the hybrid as a fraction, never "0.0x"."""
    full = K3Config.full()
    kda = full.kda_heads * full.kda_head_dim ** 2 + (full.kda_conv - 1) * 3 * full.kda_heads * full.kda_head_dim
    hybrid_1 = full.n_kda * kda + full.n_mla * (full.kv_lora_rank + full.qk_rope_dim)     # values at 1 token
    mla_1 = full.num_layers * (full.kv_lora_rank + full.qk_rope_dim)
    T = len(page.select_slider(key="att_read").options)
    for t in sorted({1, 2, T}):
        page.select_slider(key="att_read").set_value(t).run()
        captions = " ".join(c.value for c in page.caption)
        assert f"values after {t} token{'' if t == 1 else 's'} read, as after every token" in captions
        assert f"{t} row{'' if t == 1 else 's'} so far" in captions
        assert "after token 1 and after token" not in captions
    page.select_slider(key="att_ctx").set_value(1).run()
    labels = [m.label for m in page.metric]
    assert "K3 hybrid at 1 token" in labels and not any("1 tokens" in x for x in labels)
    captions = " ".join(c.value for c in page.caption)
    assert "0.0x" not in captions and f"1/{hybrid_1 / mla_1:,.0f} of the hybrid" in captions
    page.select_slider(key="att_ctx").set_value(2 ** 20).run()
    assert not page.exception


def test_tokens_read_is_this_pages_own_control_not_the_shared_token(page):
    """Moving "Tokens read so far" changed the token the Routing explorer and Attention Residuals show."""
    page.select_slider(key="att_read").set_value(2).run()
    assert page.query_params["read"] in ("2", ["2"])
    assert "token" not in page.query_params                        # the shared token was not set by it
