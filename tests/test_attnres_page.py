"""AppTest of the Attention Residuals page: link counts shown for L = 93 in both views, live counts
beside the closed forms, the heatmap, the retrieval answer, memory, and bad link parameters."""
import json
import math
from pathlib import Path

import pytest

from tests.conftest import markdown_tables, open_app_page, outside_code, vega_datasets

PAGE = "views/attnres.py"


def open_page(params: dict | None = None):
    return open_app_page(PAGE, params)


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


def charts(at) -> dict:
    """The page's Vega-Lite charts by name: (spec, datasets as data frames)."""
    out = {}
    for el in at.get("vega_lite_chart"):
        spec = json.loads(el.proto.spec)
        out[spec["usermeta"]["chart"]] = (spec, vega_datasets(el))
    return out


@pytest.fixture(scope="module")
def page():
    return open_page()


def test_link_counts_at_93_in_both_views(page):
    m = metrics(page)
    assert (m["Full AttnRes at L = 93"], m["Block AttnRes at L = 93"]) == ("4,371", "493")
    page.segmented_control(key="ar_view").set_value("two-reads").run()
    m = metrics(page)
    assert (m["Full AttnRes at L = 93"], m["Block AttnRes at L = 93"]) == ("17,578", "1,003")
    # three ways of counting agree, the live forward's trace among them
    table = markdown_tables(page)[0]
    assert len(table) == 3 and "live model" in table["count"].iloc[2]
    assert table["Full"].tolist() == [17_578] * 3 and table["Block"].tolist() == [1_003] * 3
    page.segmented_control(key="ar_view").set_value("per-layer").run()
    assert markdown_tables(page)[0]["Full"].tolist() == [4_371] * 2


def test_charts_and_series(page):
    assert not page.get("plotly_chart")
    found = charts(page)
    assert list(found) == ["attnres_links", "attnres_heatmap", "attnres_retrieval", "attnres_vectors"]
    spec, data = found["attnres_links"]
    assert sorted(set(data["links"]["design"])) == ["Block AttnRes (blocks of 12)", "Full AttnRes"]
    assert data["k3"]["links"].tolist() == [4_371, 493]               # one read per layer, the published table
    # the affordability remark is the K3 report's (section 2.2), not the AttnRes paper's
    assert "K3 report, section 2.2" in data["region"]["label"].iloc[0]
    weights = found["attnres_retrieval"][1]["weights"]
    assert sorted(set(weights["design"])) == ["Block AttnRes", "Full AttnRes"]
    assert weights.groupby("design")["layer"].agg(["min", "max"]).values.tolist() == [[0, 49]] * 2   # layer 50 reads 0..49
    assert found["attnres_retrieval"][1]["hit"]["layer"].tolist() == [12, 12]
    vectors = found["attnres_vectors"][1]
    assert sorted(set(vectors["vectors"]["design"])) == ["Block AttnRes", "Full AttnRes"]
    assert vectors["chosen"]["vectors"].tolist() == [9]


def test_heatmap_shows_every_read_and_switches_to_full(page):
    spec, data = charts(page)["attnres_heatmap"]
    assert "187 reads x 9 sources" in spec["title"]["text"]
    # one cell per link: as many as the closed form counts for two reads per layer plus the output read
    assert len(data["cells"]) == 1_003
    page.segmented_control(key="ar_mode").set_value("Full").run()
    spec, data = charts(page)["attnres_heatmap"]
    assert "187 reads x 187 sources" in spec["title"]["text"]
    assert len(data["cells"]) == 17_578
    assert len(data["row_bounds"]) == len(data["col_bounds"]) == 7       # block boundaries on rows and columns
    assert data["row_bounds"]["read"].tolist() == [f"L{12 * k}.attn" for k in range(1, 8)]
    page.segmented_control(key="ar_mode").set_value("Block").run()


def test_retrieval_answers_for_full_and_block(page):
    m = metrics(page)
    full, block = float(m["Full: weight of layer 12's outputs"]), float(m["Block: weight reaching layer 12"])
    assert 0 < full < 1 and 0 < block < 1
    captions = " ".join(c.value for c in page.caption)
    assert "sits in **block 2**" in captions
    page.slider(key="ar_reader").set_value(20).run()                   # same block as layer 12
    assert not page.exception
    assert "sits in **partial**" in " ".join(c.value for c in page.caption)
    page.slider(key="ar_reader").set_value(5).run()                    # layer 12 comes later
    assert any("cannot read layer 12" in i.value for i in page.info)
    page.slider(key="ar_reader").set_value(50).run()


def test_block_size_slider_recomputes_counts_and_memory(page):
    page.slider(key="ar_bs").set_value(93).run()
    m = metrics(page)
    assert m["Block AttnRes at L = 93"] == "185"     # one block: layer 0 reads emb alone, 92 reads see emb + partial
    assert m["Full, K3 scale: per token"] == "2.7 MB" and m["Block, K3 scale: per token"] == "28.7 KB"   # 2 vectors x 7168 x 2 B
    table = markdown_tables(page)[0]
    assert len(table) == 2 and table["Block"].nunique() == 1
    found = charts(page)                                            # the charts follow the slider
    assert found["attnres_links"][1]["k3"]["links"].tolist() == [4_371, 185]
    assert "Block AttnRes (blocks of 93)" in set(found["attnres_links"][1]["links"]["design"])
    assert found["attnres_vectors"][1]["chosen"][["block size", "vectors"]].values.tolist() == [[93, 2]]
    page.slider(key="ar_bs").set_value(12).run()
    assert metrics(page)["Block, K3 scale: per token"] == "129.0 KB"
    assert metrics(page)["Block, live instance: per token"] == "288 values"     # 9 x d = 32              # 9 x 7168 x 2 bytes


def test_bad_link_parameters_are_clamped_with_a_notice():
    at = open_page({"bs": "500", "view": "<script>x</script>", "reader": "0", "token": "9999"})
    notes = " ".join(i.value for i in at.info)
    assert "block size 500 is outside 1–93" in notes and "not available here: showing" in notes     # bs, token
    assert "<script>" not in outside_code(notes)
    assert at.slider(key="ar_bs").value == 93 and at.slider(key="ar_reader").value == 1
    assert at.segmented_control(key="ar_view").value == "per-layer"
    assert at.pills(key="ar_token").value == len(at.pills(key="ar_token").options) - 1    # the chips, as every page


def test_the_count_table_says_how_many_ways_it_counts():
    at = open_page()
    assert at.expander[0].label.startswith("Counted two ways") and len(markdown_tables(at)[0]) == 2
    at = open_page({"view": "two-reads"})
    table = markdown_tables(at)[0]
    assert at.expander[0].label.startswith("Counted three ways") and len(table) == 3
    assert table["Block"].nunique() == 1 and table["Full"].nunique() == 1       # the three counts agree


# ---- issue 48 review: every statement checked against the K3 report (sec 2.2, Eq. 8-10) and the closed forms ----

def by_hand_links(L: int, S: int | None, reads: int, output: bool) -> int:
    """Links counted read by read (not with model.depth_counts): Full, read j of layer i sees the embedding and
    the reads*i + j earlier outputs; Block, a read sees the embedding, the sealed blocks and the partial sum,
    except a block's first read (before its seal), and the output read sees every block and the embedding."""
    total = 0
    for i in range(L):
        for j in range(reads):
            if S is None:
                total += 1 + reads * i + j
            else:
                n = i // S                              # 0-based block of layer i
                first = i % S == 0 and j == 0
                total += n + 1 if first else n + 2
    if output:
        total += 1 + reads * L if S is None else math.ceil(L / S) + 1
    return total


def test_header_and_try_this_say_what_the_report_and_the_counts_say(page):
    L, S = 93, 12
    N = math.ceil(L / S)                                             # 8 blocks, the last one partial (sec 2.2)
    text = " ".join(m.value for m in page.markdown) + " " + " ".join(c.value for c in page.caption)
    # the weights are a softmax of a learned query against the sources, not learned weights (Eq. 8-9)
    assert "learned softmax weights" not in text and "learned query" in text and "Eq. 8-10" in text
    assert f"into {N} blocks" in text and f"only {N + 1} vectors" in text and f"instead of {2 * L + 1}" in text
    try_this = next(c.value for c in page.caption if c.value.startswith("**Try this:**"))
    # at block size 1 Block equals Full only counting one read per layer; it still keeps L + 1 vectors, not 2L + 1
    assert by_hand_links(L, 1, 1, False) == by_hand_links(L, None, 1, False) == L * (L + 1) // 2
    assert by_hand_links(L, 1, 2, True) < by_hand_links(L, None, 2, True)
    assert f"{L + 1} vectors, not {2 * L + 1}" in try_this and "one read per layer" in try_this
    assert "move between Full and plain residuals" not in try_this


def test_the_four_attnres_ratios_are_named_by_what_they_count(page):
    """Issue 45 item 10: 11.6, 20.8, 8.9 and 17.5 count layers, vectors and links (two ways)."""
    L, S = 93, 12
    N = math.ceil(L / S)
    ratios = {"layers per block": L / N, "vectors kept alive per token": (2 * L + 1) / (N + 1),
              "one read per layer": by_hand_links(L, None, 1, False) / by_hand_links(L, S, 1, False),
              "two reads per layer": by_hand_links(L, None, 2, True) / by_hand_links(L, S, 2, True)}
    assert [round(r, 1) for r in ratios.values()] == [11.6, 20.8, 8.9, 17.5]
    captions = " ".join(c.value for c in page.caption)
    for name, r in ratios.items():
        assert name in captions and f"{r:.1f}" in captions, name
    assert "Full / Block links" in metrics(page)                    # the metric names what it divides
    assert "AttnRes paper's picture" not in captions and "Eq. 8-9" in captions


def test_growth_sentence_follows_the_count_control():
    at = open_page({"view": "two-reads"})
    caption = next(c.value for c in at.caption if c.value.startswith("A link is one candidate"))
    # two reads per layer and the output read: Full ~ 2 L^2 and Block ~ L^2 / S, by hand at L = 100 and 200
    assert "2L²" in caption and "L²/S" in caption and "L²/2" not in caption
    for L in (100, 200):
        assert f"{by_hand_links(L, 12, 2, True):,} at L = {L}" in caption
    import inspect

    from model.attnres import link_count
    source_file = Path(inspect.getsourcefile(link_count)).relative_to(Path(__file__).resolve().parent.parent)
    assert f"Closed forms from {source_file.as_posix()}" in caption         # where link_count is defined
    assert "bf16, this page's assumption" in caption                    # the report gives no precision for them


def test_retrieval_heading_and_axis_follow_the_sliders():
    """Issue 45 item 8: the heading names the chosen layers; before the FFN the reading layer's own attention
    output is a source, and the axis spans it."""
    at = open_page({"reader": "30", "source": "5", "module": "ffn"})
    heads = [h.value for h in at.subheader]
    assert "Can layer 30 retrieve what layer 5 computed?" in heads
    assert "Can layer 50 retrieve what layer 12 computed?" not in heads
    spec, data = charts(at)["attnres_retrieval"]
    layers = data["weights"]["layer"]
    assert layers.min() == 0 and layers.max() == 30                   # L30.attn feeds L30's FFN read
    x = spec["layer"][2]["encoding"]["x"]
    assert "0 .. 30" in x["title"] and x["scale"]["domain"][0] < 0 and x["scale"]["domain"][1] > 30
    at.segmented_control(key="ar_module").set_value("attn").run()
    spec, data = charts(at)["attnres_retrieval"]
    assert data["weights"]["layer"].max() == 29 and "0 .. 29" in spec["layer"][2]["encoding"]["x"]["title"]
    help_ = {m.label: m.proto.help for m in at.metric}["Block: weight reaching layer 5"]
    assert help_.startswith("derived") and "heuristic" in help_        # the norm share is the app's, not the model's
