"""Data and figures of the Attention Residuals page (app/attnres.py, app/charts/attnres.py): link-count
series, the bookkeeping count, source membership, the retrieval computation on a micro model."""
import math

import numpy as np
import pytest
import torch

from app.attnres import (
    VIEWS,
    bookkeeping_links,
    boundary_rows,
    count_table,
    depth_matrix,
    depth_memory,
    full_variant,
    link_series,
    retrieval,
    source_members,
    vectors_by_block_size,
)
from app.charts.attnres import depth_heatmap_spec, links_spec, retrieval_spec, vectors_spec
from model.config import K3Config
from model.k3 import K3Model


def micro_model(random_queries: bool, seed: int = 0) -> K3Model:
    torch.manual_seed(seed)
    model = K3Model(K3Config.micro()).eval().requires_grad_(False)
    if random_queries:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(".proj"):
                    p.copy_(torch.randn_like(p))
    return model


def run(model, T=7, seed=1):
    ids = torch.randint(0, model.cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(seed))
    with torch.inference_mode():
        return model(ids)


# ---- link counts --------------------------------------------------------------------------------

def test_link_series_gives_the_published_table_at_93():
    per = link_series(12, "per-layer").set_index("layers")
    two = link_series(12, "two-reads").set_index("layers")
    assert (per.loc[93, "Full"], per.loc[93, "Block"]) == (4_371, 493)
    assert (two.loc[93, "Full"], two.loc[93, "Block"]) == (17_578, 1_003)
    assert per.index.min() == 1 and per.index.max() == 200
    assert per["Full"].is_monotonic_increasing and per["Block"].is_monotonic_increasing
    # Both grow quadratically at a fixed block size, Block S times slower (L^2/2 vs L^2/(2S)): the ratio
    # approaches S = 12 from below, and Block itself is not linear (doubling L nearly quadruples it)
    assert 8 < per.loc[93, "Full"] / per.loc[93, "Block"] < per.loc[200, "Full"] / per.loc[200, "Block"] < 12
    assert per.loc[200, "Block"] / per.loc[100, "Block"] > 3.4
    # one layer: a single read of the embedding, whatever the mode
    assert per.loc[1, "Full"] == per.loc[1, "Block"] == 1


@pytest.mark.parametrize("L,bs", [(1, 12), (7, 2), (13, 12), (93, 12), (93, 5), (93, 1), (93, 93)])
@pytest.mark.parametrize("view", list(VIEWS))
def test_bookkeeping_count_equals_the_closed_form(L, bs, view):
    v = VIEWS[view]
    r, o = v["reads_per_layer"], v["output_read"]
    from model.attnres import link_count
    assert bookkeeping_links(L, bs, r, o) == link_count(L, bs, r, o)
    assert bookkeeping_links(L, None, r, o) == link_count(L, None, r, o)


def test_count_table_rows_agree_and_include_live_counts_only_for_two_reads():
    t = count_table("two-reads", 12, 93, live_block=1_003, live_full=17_578)
    assert len(t) == 3 and t["Full"].eq(17_578).all() and t["Block"].eq(1_003).all()
    assert len(count_table("per-layer", 12, 93, 1_003, 17_578)) == 2


# ---- who holds what -----------------------------------------------------------------------------

def test_source_members_follow_the_block_bookkeeping():
    m = source_members("block", 12, 93)
    r50 = m["L50.attn"]
    assert list(r50) == ["emb", "block 1", "block 2", "block 3", "block 4", "partial"]
    assert set(r50["block 2"]) == {(i, mod) for i in range(12, 24) for mod in ("attn", "ffn")}
    assert set(r50["partial"]) == {(48, "attn"), (48, "ffn"), (49, "attn"), (49, "ffn")}
    # layer 24's first read runs before the seal: layers 12..23 are still the partial sum
    assert list(m["L24.attn"]) == ["emb", "block 1", "partial"] and len(m["L24.attn"]["partial"]) == 24
    assert list(m["L24.ffn"])[-2:] == ["block 2", "partial"] and m["L24.ffn"]["partial"] == ((24, "attn"),)
    assert list(m["out"]) == ["emb"] + [f"block {k}" for k in range(1, 8)] + ["partial"]
    assert list(m["L0.attn"]) == ["emb"]
    full = source_members("full", 1, 93)
    assert len(full["L50.attn"]) == 1 + 2 * 50 and full["L50.attn"]["L12.ffn"] == ((12, "ffn"),)


# ---- retrieval ----------------------------------------------------------------------------------

def test_uniform_reads_give_the_counting_answer():
    # zero-initialised queries weight every source equally, so the answer is known by counting
    model = micro_model(random_queries=False)
    out_b, out_f = run(model), run(full_variant(model))
    f = retrieval(out_f, "L4.attn", 3).set_index("layer")
    assert f.loc[1, "weight"] == pytest.approx(2 / 9)            # emb + 8 module outputs, 2 of them layer 1
    assert f.loc[1, "source"] == "L1.attn + L1.ffn" and f.loc[1, "share"] == 1
    b = retrieval(out_b, "L4.attn", 3).set_index("layer")       # emb, block 1 (L0, L1), partial (L2, L3)
    assert b.loc[1, "source"] == "block 1" and b.loc[1, "source weight"] == pytest.approx(1 / 3)
    assert b.loc[0, "share"] + b.loc[1, "share"] == pytest.approx(1)
    assert b.loc[2, "source"] == "partial"
    assert retrieval(out_b, "L4.ffn", 3).set_index("layer").loc[1, "source weight"] == pytest.approx(1 / 4)


def test_block_share_is_the_norm_share_of_the_block():
    model = micro_model(random_queries=True)
    out = run(model)
    b = retrieval(out, "L5.attn", 2).set_index("layer")
    n = {i: sum(out.trace.outputs[(i, m)][0, 2].norm().item() for m in ("attn", "ffn")) for i in range(6)}
    assert b.loc[0, "share"] == pytest.approx(n[0] / (n[0] + n[1]), rel=1e-5)
    assert b.loc[2, "share"] == pytest.approx(n[2] / (n[2] + n[3]), rel=1e-5)
    # every layer's effective weight plus the embedding's is the whole read
    assert b["weight"].sum() == pytest.approx(1, abs=1e-5)


def test_full_weights_equal_a_direct_recomputation_of_the_read():
    model = micro_model(random_queries=True)
    out = run(full_variant(model))
    tok, r = 4, 4
    srcs = [out.trace.depth.blocks[0]] + [out.trace.outputs[(i, m)] for i in range(r) for m in ("attn", "ffn")]
    with torch.inference_mode():
        _, a = model.layers[r].q_attn(srcs)                  # [1, T, 9], independently of the trace
    f = retrieval(out, f"L{r}.attn", tok).set_index("layer")
    for layer in range(r):
        assert f.loc[layer, "weight"] == pytest.approx(float(a[0, tok, 1 + 2 * layer] + a[0, tok, 2 + 2 * layer]),
                                                       rel=1e-5)
    assert f["weight"].sum() == pytest.approx(1, abs=1e-5)
    with pytest.raises(ValueError):
        retrieval(out, "L99.attn", 0)


def test_full_variant_shares_weights_and_leaves_the_block_model_alone():
    model = micro_model(random_queries=True)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    other = full_variant(model)
    assert other.cfg.attnres == "full" and model.cfg.attnres == "block"
    assert other.layers[2].q_attn.proj.data_ptr() == model.layers[2].q_attn.proj.data_ptr()
    out_f, out_b = run(other), run(model)
    assert out_f.trace.link_count == 6 * 13 + 13 == 91          # L(2L+1) + (2L+1) at L = 6
    assert out_b.trace.link_count != out_f.trace.link_count
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not any(p.requires_grad for p in other.parameters())


# ---- heatmap, memory, figures -------------------------------------------------------------------

def test_depth_matrix_rows_are_distributions_with_partial_last():
    model = micro_model(random_queries=True)
    out = run(model)
    z, rows, cols = depth_matrix(out, 5)
    assert z.shape == (13, len(cols)) and rows[0] == "L0.attn" and rows[-1] == "out"
    assert cols[0] == "emb" and cols[-1] == "partial"
    np.testing.assert_allclose(np.nansum(z, 1), 1, atol=1e-5)
    assert np.isnan(z[0, 1:]).all()                              # layer 0's first read sees the embedding only
    assert boundary_rows(rows, 2) == [4, 8]                      # L2.attn, L4.attn
    spec = depth_heatmap_spec(z, rows, cols, [4, 8], [], "t")
    cells = spec["datasets"]["cells"]
    # one cell per candidate source of a read (none where the read had no such source): as many cells as the
    # forward's own trace counted links
    assert len(cells) == np.isfinite(z).sum() == out.trace.link_count
    np.testing.assert_allclose(cells.groupby("read")["weight"].sum(), 1, atol=1e-5)
    assert set(cells.loc[cells["read"] == "L0.attn", "source"]) == {"emb"}
    assert spec["datasets"]["row_bounds"]["read"].tolist() == ["L2.attn", "L4.attn"]
    assert spec["datasets"]["col_bounds"].empty
    assert spec["layer"][0]["mark"]["type"] == "rect" and spec["title"]["text"] == "t"
    assert [l["mark"]["strokeDash"] for l in spec["layer"][1:]] == [[2, 2]] * 2          # dotted, as the caption says


def test_memory_per_token_at_k3_scale():
    m = depth_memory(93, 12, 7168).set_index("design")
    assert m.loc["Full", "vectors"] == 187 and m.loc["Block", "vectors"] == 9
    assert m.loc["Full", "bytes"] == 187 * 7168 * 2 and m.loc["Block", "bytes"] == 9 * 7168 * 2
    v = vectors_by_block_size(93).set_index("block size")
    assert v.loc[12, "blocks"] == 8 and v.loc[1, "vectors"] == 94 and v.loc[93, "vectors"] == 2
    spec = vectors_spec(v.reset_index(), 187, 12, 7168)
    chosen, lines = spec["datasets"]["chosen"], spec["datasets"]["vectors"]
    assert chosen["vectors"].tolist() == [9] and chosen["label"].tolist() == ["9 vectors = 64,512 values"]   # 9 x 7,168
    full = lines[lines["design"] == "Full AttnRes"]
    block = lines[lines["design"] == "Block AttnRes"].set_index("block size")
    assert full["vectors"].tolist() == [187] * 93
    assert (block.loc[1, "vectors"], block.loc[12, "vectors"], block.loc[93, "vectors"]) == (94, 9, 2)
    hover = spec["datasets"]["vectors_hover"].set_index("block size")
    assert (hover.loc[12, "full"], hover.loc[12, "blocks"], hover.loc[12, "block"]) == (187, 8, 9)   # the band at 12
    assert spec["layer"][0]["data"]["name"] == "vectors_hover"                 # the bands beneath the lines
    layers = [l for l in spec["layer"] if l["mark"]["type"] == "line"]
    assert layers[1]["mark"]["interpolate"] == "step-after"                  # Block drawn as steps
    assert layers[0]["encoding"]["y"]["scale"]["type"] == "log"
    assert "type" not in layers[0]["encoding"]["x"].get("scale", {})          # block size on a linear axis


def test_link_and_retrieval_figures():
    spec = links_spec(link_series(12, "two-reads"), 93, 12)
    links, k3 = spec["datasets"]["links"], spec["datasets"]["k3"]
    assert sorted(set(links["design"])) == ["Block AttnRes (blocks of 12)", "Full AttnRes"]
    assert k3["links"].tolist() == [17_578, 1_003] and set(k3["label"]) == {"K3: L = 93"}    # the published table
    assert k3["text"].tolist() == ["17,578", "1,003"]
    by_design = links.set_index(["design", "layers"])["links"]
    assert by_design[("Full AttnRes", 200)] == 200 * 401 + 401                # L(2L+1) + (2L+1) at L = 200
    # pointing reads a band of depths with both designs' links; on the log axis a band ends half-way in log
    bands = spec["datasets"]["links_hover"].set_index("layers")
    assert bands.loc[200, "full"] == 200 * 401 + 401 and bands.loc[93, "block"] == 1_003
    assert bands.loc[93, "x0"] == pytest.approx(math.sqrt(92 * 93)) and bands.loc[93, "x1"] == pytest.approx(math.sqrt(93 * 94))
    assert not any(p["select"].get("nearest") for l in spec["layer"] for p in l.get("params", []))
    line = next(l for l in spec["layer"] if l["mark"]["type"] == "line")
    assert line["encoding"]["x"]["scale"]["type"] == "log" and line["encoding"]["y"]["scale"]["type"] == "log"
    region = spec["datasets"]["region"].iloc[0]
    assert (region["start"], region["end"]) == (1, 100)
    assert "K3 report, section 2.2" in region["label"]                          # not the AttnRes paper
    rule = next(l for l in spec["layer"] if l["mark"]["type"] == "rule")
    assert rule["data"]["name"] == "k3" and rule["mark"]["strokeDash"]         # dashed at K3's depth
    model = micro_model(random_queries=True)
    prof = {"Full": retrieval(run(full_variant(model)), "L4.attn", 0), "Block": retrieval(run(model), "L4.attn", 0)}
    rf = retrieval_spec(prof, 1, 4)
    weights = rf["datasets"]["weights"]
    assert sorted(set(weights["design"])) == ["Block AttnRes", "Full AttnRes"]
    assert sorted(set(weights["layer"])) == [0, 1, 2, 3]                       # the embedding (layer -1) left out
    hit = rf["datasets"]["hit"].set_index("design")["weight"]
    assert hit["Full AttnRes"] == pytest.approx(prof["Full"].set_index("layer").loc[1, "weight"])
    assert hit["Block AttnRes"] == pytest.approx(prof["Block"].set_index("layer").loc[1, "weight"])
    assert rf["datasets"]["marker"]["label"].tolist() == ["layer 1"]
    assert rf["layer"][2]["encoding"]["y"]["scale"]["type"] == "log"
