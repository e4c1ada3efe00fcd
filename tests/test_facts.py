"""One test per statement issue 15 corrected: each asserts against a value from a paper, the published
config or an independent closed form, so that the wrong statement fails if it comes back."""
import math

import pytest

from app import balance, glossary, overview, parallel, tour
from app.attnres import AFFORDABLE_SOURCE, PAPER, affordability, affordability_note, depth_attention_macs, growth_at, growth_note
from app.charts.balance import steps_spec
from model.config import K3Config

K3 = K3Config.full()


# ---- 1. Block AttnRes links at a fixed block size grow like L^2 / (2S), not linearly --------------------

def test_block_links_grow_quadratically_at_a_fixed_block_size():
    rows = {r["layers"]: r for r in growth_at(12, (100, 200, 400, 800))}
    # independent closed form for one read per layer: sum over 0-based blocks n of S_n (n + 2), minus N
    def by_hand(L, S):
        sizes = [min(S, L - i) for i in range(0, L, S)]
        return sum(s * (n + 2) for n, s in enumerate(sizes)) - len(sizes)
    assert rows[100]["block"] == by_hand(100, 12) == 559
    assert rows[200]["block"] == by_hand(200, 12) == 1951
    # doubling L multiplies the links by ~4 (quadratic), and they approach L^2 / (2S)
    assert rows[800]["block"] / rows[400]["block"] == pytest.approx(4, rel=0.05)
    assert rows[800]["block"] / (800 ** 2 / 24) == pytest.approx(1, rel=0.1)
    note = growth_note(12)
    assert "559" in note and "1,951" in note and "L²/(2S)" in note
    assert "about linearly" not in note and "grow linearly only if the number of blocks is held fixed" in note


# ---- 2 and 8 (claim 14). Who calls Full affordable, and how cheap its arithmetic is -----------------------

def test_full_attnres_arithmetic_share_against_a_closed_form():
    a = affordability(K3)
    L, d = 93, 7168
    full_links = L * (2 * L + 1) + (2 * L + 1)                  # docs/ARCHITECTURE.md section 1 table
    assert full_links == 17_578 and a["full_links"] == full_links
    assert a["full_macs"] == depth_attention_macs(L, d) == 2 * d * full_links   # 2.52e8
    assert a["share"] == pytest.approx(2 * d * full_links / 104_189_530_208)
    assert 0.0023 < a["share"] < 0.0025                         # ~0.24% of the active weights' MACs
    assert (a["full_vectors"], a["block_vectors"]) == (2 * L + 1, 9)
    assert a["full_bytes"] == 187 * 7168 * 2 and a["block_bytes"] == 9 * 7168 * 2


def test_the_affordability_sentence_is_the_k3_reports_and_gives_its_reason():
    assert "2607.24653" in AFFORDABLE_SOURCE and "2.2" in AFFORDABLE_SOURCE
    assert "2603.15031" in PAPER                              # the preprint keeps its own label
    note = affordability_note(K3)
    assert AFFORDABLE_SOURCE in note and "memory" in note and "pipeline" in note and "0.24%" in note
    assert "AttnRes paper" not in note


# ---- 3 (claim 10). Eight GPUs is the article's example; K3's experts do not fit on 8 H200s -----------------

def test_k3_routed_experts_do_not_fit_on_eight_h200s():
    routed = parallel.routed_expert_bytes(K3)
    # independent: 896 experts x 3 matrices x 3584 x 3072 values x 92 layers at 4.25 bits
    by_hand = 896 * 3 * 3584 * 3072 * 92 * 4.25 / 8
    assert routed == pytest.approx(by_hand)
    assert routed == pytest.approx(1.45e12, rel=0.01)
    assert routed > 8 * 141e9
    note = parallel.example_note(8)
    assert "illustration" in note and "names no expert-parallel size" in note and "1.45 TB" in note
    assert f"at least {math.ceil(by_hand / 141e9)}" in note


# ---- 4. K3's quantisation-aware training is post-training only; the STE is the project's ----------------

def test_glossary_says_k3_qat_is_post_training_and_the_ste_is_ours():
    t = glossary.by_slug("mxfp4")
    text = t.short + " " + t.more
    assert "SFT and RL" in text and "4.1" in text
    assert "this project's choice" in text
    assert "a straight-through estimator), and the live model does the same" not in text
    assert not any("as K3" in (x.short + x.more) for x in glossary.TERMS)


# ---- 5 (claim 9). MXFP8 scales every block: the bound is on the hidden value -----------------------------

def test_e4m3_definition_says_the_limit_binds_only_without_a_scale():
    t = glossary.by_slug("e4m3")
    assert "448" in t.short and "own power-of-two scale" in t.more
    assert "inside FP8's largest value" not in tour.stop_for("situ-glu").why
    assert "MXFP8" in tour.stop_for("situ-glu").why


# ---- 6. K2's 1.04T and MTP: an inference, and not K3's rule -----------------------------------------------

def test_mtp_note_is_labelled_an_inference_and_counts_k3s_mtp_layer():
    from model.accounting import count_params, mtp_layer
    note = overview.k2_published_note()
    assert "our inference" in note
    k3_mtp = mtp_layer(K3).total
    assert 29e9 < k3_mtp < 31e9                                 # the "~30B"
    assert f"{k3_mtp / 1e9:,.1f}B" in note
    # K3's published 2.78T is matched without the MTP layer, K2's 1.04T only with it
    assert round(count_params(K3).total / 1e12, 2) == 2.78
    assert round((count_params(K3).total + k3_mtp) / 1e12, 2) != 2.78
    k2 = K3Config.kimi_k2()
    assert round((count_params(k2).total + mtp_layer(k2).total) / 1e12, 2) == 1.04
    mtp = glossary.by_slug("mtp").more
    assert "inference" in mtp and "counts none" not in mtp


# ---- 11. K3 is not the sparsest model of the Overview's table ---------------------------------------------

def test_frontier_note_names_the_sparser_models():
    df = overview.frontier_table()
    note = overview.frontier_note(df)
    assert "the sparse end" not in note
    # Table values (docs/REFERENCES.md): K2 32.6 / 1040, DeepSeek-V4-Pro 49 / 1600, both below K3's share
    assert 32.6 / 1040 < 104.19 / 2779.5 and 49 / 1600 < 104.19 / 2779.5
    assert "Kimi K2 (3.13%)" in note and "DeepSeek-V4-Pro (3.06%)" in note


# ---- 12. The growth ratios and Table 1's, both in the caption -----------------------------------------------

def test_growth_caption_gives_table_1_ratios_and_why():
    cap = overview.growth_caption()
    assert f"x{2.78 / 1.04:.2f}" in cap and f"x{104.2 / 32.6:.2f}" in cap        # x2.67, x3.20
    assert "x2.71" in cap and "x3.29" in cap and "MTP" in cap


# ---- 14. The latent width is published; E4M3 comes from the serving kernels ----------------------------------

def test_glossary_latent_is_published_and_mxfp8_names_the_kernels():
    assert "published" in glossary.by_slug("latent").short
    more = glossary.by_slug("mxfp8").more
    assert "serving kernels" in more and "says only MXFP8" in more


# ---- Load balancing lab: one reference line, the goal, explained ----------------------------------------------

def test_balance_chart_draws_only_the_floor_and_the_goal_note_explains_the_numbers():
    import pandas as pd
    df = pd.DataFrame({"step": [1, 2], "method": ["x", "x"], "max/mean": [2.0, 1.6], "cv": [0.3, 0.2],
                       "dead": [0, 0]})
    spec = steps_spec(df, 1.57)
    rules = [(i, layer) for i, panel in enumerate(spec["hconcat"]) for layer in panel["layer"]
             if layer["mark"]["type"] == "rule"]
    assert len(rules) == 1 and rules[0][0] == 0                       # one reference line, on max/mean
    assert spec["datasets"]["goal"].to_dict("records") == [{"floor": 1.57, "label": "goal: noise floor 1.57"}]
    setup = balance.Setup(n_experts=896, top_k=16, tokens=2048)
    floor = balance.noise_floor(2048, 16, 896)
    note = balance.goal_note(setup, floor)
    assert "goal is the floor" in note and f"{floor:.2f}" in note
    assert f"{balance.LIVE_TARGET:g}" in note and f"{balance.noise_floor(65_536, 16, 896):.2f}" in note


# ---- shared experts, the MLA gate and router training are said in words ------------------------------------------

def test_glossary_explains_shared_experts_the_gate_and_router_training():
    assert "Why" in glossary.by_slug("shared-expert").more
    gate = glossary.by_slug("output-gate")
    assert "sigmoid" in gate.short and "per channel" in gate.short
    assert "trained by the language-model loss" in glossary.by_slug("router").more
