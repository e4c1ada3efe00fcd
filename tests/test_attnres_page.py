"""AppTest of the Attention Residuals page: link counts shown for L = 93 in both views, live counts
beside the closed forms, the heatmap, the retrieval answer, memory, and bad link parameters."""
import json

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
    assert at.select_slider(key="ar_token").value == len(at.select_slider(key="ar_token").options) - 1


def test_the_count_table_says_how_many_ways_it_counts():
    at = open_page()
    assert at.expander[0].label.startswith("Counted two ways") and len(markdown_tables(at)[0]) == 2
    at = open_page({"view": "two-reads"})
    table = markdown_tables(at)[0]
    assert at.expander[0].label.startswith("Counted three ways") and len(table) == 3
    assert table["Block"].nunique() == 1 and table["Full"].nunique() == 1       # the three counts agree
