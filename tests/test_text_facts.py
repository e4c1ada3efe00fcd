"""One test per page statement issue 48 corrected (items 1-6, 9-11, 16-19): each asserts the new text against a
value computed here (from OCP MX's grid, the accounting, the real functions, the two configs) or against the
K3 report's own equation numbers, so that the old statement fails if it comes back."""
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from app import glossary, model_card, parallel, quantization_text, routing_text, situ_glu, tour
from app.layer_data import CITE, LayerData, Read, report_ref
from app.layer_steps_ffn import moe_steps
from model.config import K3Config
from model.quant import element_grid

ROOT = Path(__file__).resolve().parent.parent
K3, TINY = K3Config.full(), K3Config.tiny()
LAYER_TEXT = ("app/layer.py", "app/layer_data.py", "app/layer_steps_attn.py", "app/layer_steps_ffn.py")  # Inside one layer


def read(path: str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


def flat(text: str) -> str:
    """Source or markdown with every run of whitespace one space (strings wrap over lines)."""
    return " ".join(text.split())


# ---- 1. E4M3: 126 positive values, 8 per power of two from 2^-6 to 2^7, 7 in [256, 448], 7 subnormals -------

def test_e4m3_caption_counts_the_grid():
    grid = element_grid("e4m3").numpy()
    pos = grid[grid > 0]
    # OCP MX v1.0, E4M3: 14 full binades of 8, the top one (256..448) has 7 (S.1111.111 is NaN), 7 subnormals
    assert len(pos) == 14 * 8 + 7 + 7 == 126
    assert ((pos >= 256) & (pos <= 448)).sum() == 7 and (pos < 2.0 ** -6).sum() == 7
    cap = quantization_text.grids_caption()
    assert f"{len(pos)} positive values" in cap
    assert "8 in every power of two from 2⁻⁶ to 2⁷" in cap and "7 in [2⁸, 448]" in cap
    assert "7 subnormals" in cap and "8 subnormals" not in cap
    e2 = element_grid("e2m1").numpy()
    assert f"only {2 * (e2 > 0).sum() + 1} distinct values" in cap           # 15
    assert "8 subnormals" not in read("views/quantization.py") and "grids_caption()" in read("views/quantization.py")


# ---- 2 and 3. "Exploding internal activations" (sec 2.3), and "Stable" = three components, two failure modes ----

STABLE_TEXTS = {
    "glossary": lambda: glossary.by_slug("stable-latentmoe").more,
    "ARCHITECTURE": lambda: flat(read("docs/ARCHITECTURE.md")),
}


def test_no_page_says_the_routed_path_diverged_or_blew_up():
    for path in ("views/situ_glu.py", "app/situ_glu.py", *LAYER_TEXT, "app/glossary.py", "app/tour.py",
                 "docs/ARCHITECTURE.md"):
        text = flat(read(path))
        assert not re.search(r"diverged at scale|blew up|blow up", text), path
    assert "exploding internal activations" in situ_glu.REPORT_ON_CHAIN and "2.3" in situ_glu.REPORT_ON_CHAIN
    assert "REPORT_ON_CHAIN" in read("views/situ_glu.py")
    assert "exploding internal activations" in tour.stop_for("situ-glu").why


def test_stable_latentmoe_is_three_components_for_two_failure_modes():
    moe_up = next(s for s in moe_steps(_layer_data(), 0, TINY) if s.key == "moe_up")
    texts = {name: get() for name, get in STABLE_TEXTS.items()} | {"layer": moe_up.text}
    for name, text in texts.items():
        assert "three components for two failure modes" in text, name
        assert "exploding internal activations" in text, name
        assert "RMSNorm" in text and "SiTU-GLU" in text and "Quantile Balancing" in text, name


def _layer_data():
    """A tiny fake LayerData for one MoE layer of the tiny config: enough to build the FFN steps' text."""
    T, l, f, k, E, d = 2, TINY.expert_width, TINY.expert_hidden, TINY.top_k, TINY.n_routed_experts, TINY.d_model
    rng = np.random.default_rng(0)
    r = lambda *shape: rng.standard_normal(shape).astype(np.float32)          # noqa: E731
    read_ = Read(["emb"], r(T, 1, d), np.ones((T, 1), np.float32), r(T, d), r(T, d), np.ones(d, np.float32))
    ffn = {"z": r(T, l), "expert_hidden": r(T, k, f), "expert_out": r(T, k, l), "u": r(T, l), "u_normed": r(T, l),
           "routed": r(T, d), "shared": r(T, d), "out": r(T, d)}
    idx = np.stack([rng.permutation(E)[:k] for _ in range(T)])
    route = {"scores": rng.random((T, E)).astype(np.float32), "indices": idx,
             "weights": np.full((T, k), 1 / k, np.float32), "cutoff": np.zeros(T, np.float32),
             "bias": np.zeros(E, np.float32)}
    return LayerData(1, "kda", True, {"attn": read_, "ffn": read_}, {}, ffn, {}, None, {}, None, route)


# ---- 4. SwiGLU's gate derivative: near 1 only for large positive g, 0 for negative g ----------------------------

def test_swiglu_gate_derivative_is_described_on_both_sides():
    g = torch.tensor([-20.0, -10.0, 20.0], dtype=torch.float64, requires_grad=True)
    (d,) = torch.autograd.grad(F.silu(g).sum(), g)
    assert abs(d[0]) < 1e-6 and abs(d[1]) < 1e-3 and d[2] == pytest.approx(1, abs=1e-6)
    cap = situ_glu.derivative_caption()
    assert "near 1 only for large positive g" in cap and "goes to 0 for negative g" in cap
    assert "under 0.001" in cap and "1.0000 at g = 20" in cap
    peak_g, peak = situ_glu.swish_derivative_peak()
    assert 1.09 < peak < 1.11 and 2.3 < peak_g < 2.5 and f"{peak:.2f}" in cap
    assert "stay near 1 (gate)" not in flat(read("views/situ_glu.py"))


# ---- 5. One layer's experts fit on one accelerator; all 92 layers' do not --------------------------------------

def test_parallel_page_computes_the_layer_and_model_bytes():
    per_layer = K3.n_routed_experts * 3 * K3.expert_width * K3.expert_hidden * 4.25 / 8      # MXFP4, by hand
    layers = len(K3.moe_layers)
    m = parallel.expert_memory(K3)
    assert m.layer_bytes == pytest.approx(per_layer) and m.layers == layers == 92
    assert m.total_bytes == pytest.approx(per_layer * layers)
    assert per_layer < 141e9 < per_layer * layers                              # fits one H200; the model does not
    note = parallel.fit_note(K3)
    assert f"about {per_layer / 1e9:.1f} GB" in note and f"about {per_layer * layers / 1e12:.2f} TB" in note
    assert "15.7 GB" in note and "1.45 TB" in note and "would fit" in note and "do not" in note
    assert "do not fit on one accelerator" not in read("views/parallel.py")
    assert "fit_note()" in read("views/parallel.py")


# ---- 6. QB evens the experts; K3 evens the devices with MoonEP ---------------------------------------------------

def test_the_devices_are_evened_by_moonep_not_by_the_bias():
    assert "MoonEP" in parallel.DEVICE_BALANCE and "5.2.1" in parallel.DEVICE_BALANCE
    assert "redundant experts" in parallel.DEVICE_BALANCE
    assert "and so the devices" not in flat(read("views/parallel.py"))
    assert "DEVICE_BALANCE" in read("views/parallel.py")
    why = tour.stop_for("balance").why
    assert "MoonEP" in why and "5.2.1" in why and "evens the load with a bias" not in why


# ---- 9. The live instance's activation rows are one block of 16 or 8; K3's rows are blocks of 32 -----------------

def test_mxfp8_activation_blocks_in_the_live_instance_and_in_k3():
    from model.quant import _blocks, mx_fake_quant
    # the model rounds each token's row on its own (model.moe: per_row=True): a row shorter than 32 is one block
    for width in (TINY.expert_width, TINY.expert_hidden):
        assert _blocks(torch.zeros(3, width), 32, True).shape == (3, width)
    row = torch.tensor([[100.0] + [0.3] * (TINY.expert_width - 1)])
    q = mx_fake_quant(row, "e4m3", per_row=True)
    assert torch.equal(q, mx_fake_quant(row, "e4m3", block=TINY.expert_width))   # one scale for the 16
    note = quantization_text.VARIANT_HOW["act"]
    assert f"holds {TINY.expert_width} values" in note and f"hidden row {TINY.expert_hidden}" in note
    assert f"{K3.expert_width // 32} and {K3.expert_hidden // 32} blocks of 32" in note       # 112 and 96
    assert "a scale per 32 values of one token" not in note


# ---- 10. Dense: every expert weighted by its router score ---------------------------------------------------------

def test_dense_is_every_expert_weighted_by_its_score():
    from model.moe import route
    s = torch.rand(3, 896, dtype=torch.float64)
    idx, p, _ = route(s, torch.zeros(896, dtype=torch.float64), 896)
    want = s / s.sum(-1, keepdim=True)
    assert torch.allclose(p, torch.gather(want, -1, idx))
    assert "weighted by its router score" in routing_text.DENSE_HELP and "Eq. 13" in routing_text.DENSE_HELP
    for path in ("views/routing.py", "app/routing_text.py"):
        assert "dense model of the same total size" not in read(path), path
    assert "help=words.DENSE_HELP" in read("views/routing.py")


# ---- 11. Context 1,048,576: the released config's max_position_embeddings ---------------------------------------

def test_context_cites_max_position_embeddings():
    assert K3.context_length == 2 ** 20 == 1_048_576
    why = tour.stop_for("attention").why
    assert f"{K3.context_length:,}" in why and "max_position_embeddings" in why and "1M" in why
    assert "max_position_embeddings" in read("docs/ARCHITECTURE.md")
    import model.config
    assert "max_position_embeddings" in model.config.__doc__


# ---- 16. What the live instance keeps of K3, and what it shrinks (heads and vocabulary too) ----------------------

def test_kept_and_shrunk_follow_the_configs():
    d = model_card.kept_and_shrunk()
    for words, fields in model_card.KEPT_COUNTS:
        assert all(getattr(TINY, f) == getattr(K3, f) for f in fields), words
    assert f"{K3.kda_heads} → {TINY.kda_heads}" in d["shrunk"] and TINY.kda_heads != K3.kda_heads
    assert f"{K3.vocab_size:,} → {TINY.vocab_size:,}" in d["shrunk"] and TINY.vocab_size != K3.vocab_size
    kept = {r["ratio"] for r in model_card.width_ratios() if r["kept"]}
    assert kept == {"latent / model width d", "shared expert hidden / routed expert hidden",
                    "MLA key: nope / rope dimensions"}
    assert TINY.expert_hidden / TINY.expert_width != K3.expert_hidden / K3.expert_width   # not every ratio
    assert "head counts" in d["short"] and "vocabulary" in d["short"]


@pytest.mark.parametrize("path", ["views/model_card.py", "views/layer.py", "model/config.py", "docs/ARCHITECTURE.md"])
def test_no_page_says_only_the_widths_shrink(path):
    text = flat(read(path)).casefold()
    for old in ("every count and ratio", "only the widths", "counts and ratios are k3's", "shrinks only the widths"):
        assert old not in text, (path, old)


def test_tour_names_the_shrunk_heads_and_vocabulary():
    why = tour.stop_for("model-card").why
    assert f"{TINY.kda_heads} heads instead of {K3.kda_heads}" in why and f"{TINY.vocab_size:,}" in why


# ---- 17. Every "Eq. N" is the K3 report's (1-14) and says so; nothing says the numbers are unknown ---------------

EQ = re.compile(r"\bEqs?\.\s*(\d+(?:\s*(?:–|-|and|,)\s*(?:Eq\.\s*)?\d+)*)")


def eq_numbers(spec: str) -> set[int]:
    out = set()
    for a, b in re.findall(r"(\d+)(?:\s*[-–]\s*(\d+))?", spec):
        out |= set(range(int(a), int(b) + 1)) if b else {int(a)}
    return out


def cited_equations(text: str) -> list[tuple[int, set[int], str]]:
    return [(m.start(), eq_numbers(m.group(1)), text[max(0, m.start() - 160):m.start()]) for m in EQ.finditer(text)]


def test_every_equation_cited_in_app_and_views_is_the_k3_reports():
    files = sorted((ROOT / "app").rglob("*.py")) + sorted((ROOT / "views").glob("*.py"))
    seen = 0
    for f in files:
        name = str(f.relative_to(ROOT))
        for _, numbers, before in cited_equations(f.read_text(encoding="utf-8")):
            seen += 1
            assert numbers and numbers <= set(range(1, 15)), (name, numbers)
            # the Claims page keeps the report's place in a field its rendering prefixes with "K3 report"
            if not name.endswith(("claims.py", "claims_data.py", "claims_architecture.py")):
                assert "K3 report" in flat(before), (name, numbers, before[-80:])
    assert seen >= 20
    assert cited_equations("K3 report Eq. 8–10, sec 2.2")[0][1] == {8, 9, 10}
    assert cited_equations("Eq. 2 and Eq. 5")[0][1] == {2, 5}


def test_architecture_cites_the_report_equations_and_no_sentence_says_they_are_unknown():
    arch = flat(read("docs/ARCHITECTURE.md"))
    for path in ("docs/ARCHITECTURE.md", *LAYER_TEXT, "app/glossary.py", "model/config.py"):
        assert not re.search(r"(do not|don't) give (its|the) equation numbers|equation numbers are not known|"
                             r"none are quoted", flat(read(path))), path
    for numbers, sec in (("1-6", "2.1.1"), ("7", "2.1.2"), ("8-10", "2.2"), ("12", "2.3.2"), ("14", "2.3.3")):
        assert f"Eq. {numbers}" in arch and sec in arch, numbers
    cited = set().union(*(n for _, n, _ in cited_equations(arch)))
    assert cited == set(range(1, 15))


def test_every_layer_step_cites_the_report_equation_and_section_beside_the_docs():
    pattern = re.compile(r"^K3 report (Eq\. \d+(–\d+)?( and Eq\. \d+)?, )?sec \d+(\.\d+)*")
    for key, cite in CITE.items():
        assert pattern.match(cite), key
        assert "docs/ARCHITECTURE.md §" in cite, key
    with_eq = {k for k, c in CITE.items() if report_ref(c).startswith("K3 report Eq.")}
    assert set(CITE) - with_eq == {"mla_latent"}           # its latent is in the report's text, unnumbered
    assert report_ref(CITE["router"]) == "K3 report Eq. 13, sec 2.3.3"
    assert report_ref(CITE["dense"]) == "K3 report Eq. 12, sec 2.3.2"


EQUATION_TERMS = {"router": {13}, "stable-latentmoe": {11}, "latent": {11}, "situ-glu": {12}, "kda": set(range(1, 7)),
                  "delta-rule": {1}, "chunked-form": {3, 4}, "mla": {7}, "output-gate": {6, 7},
                  "attnres": {8, 9, 10}, "block": {10}, "balancing-bias": {13}, "qb": {14}}


def test_every_glossary_term_with_a_k3_equation_cites_it():
    for slug, numbers in EQUATION_TERMS.items():
        t = glossary.by_slug(slug)
        assert t.source.startswith("K3 report Eq."), slug
        cited = set().union(*(n for _, n, _ in cited_equations(t.source)))
        assert cited == numbers, (slug, cited)
    assert "term.source" in read("views/glossary.py")


# ---- 18. K3 runs its experts on MXFP8 activations; the report says nothing about storing them ------------------

def test_situ_page_does_not_say_k3_stores_mxfp8_activations():
    assert "stores these activations" not in flat(read("views/situ_glu.py"))
    assert "MXFP8_NOTE" in read("views/situ_glu.py")
    assert "says nothing about storing" in situ_glu.MXFP8_NOTE and "4.1.4" in situ_glu.MXFP8_NOTE
    assert situ_glu.SOURCE == "K3 report Eq. 12, sec 2.3.2"


# ---- 19. The 8 x 112 grid is the article's illustration; K3's experts need at least 11 H200s -------------------

def test_routing_grid_caption_labels_the_shards_as_the_articles():
    least = math.ceil(parallel.routed_expert_bytes(K3) / 141e9)
    assert least == 11
    note = parallel.shard_note(K3)
    assert "illustration" in note and "names no expert-parallel size" in note and f"at least {least} H200s" in note
    import pandas as pd
    src = flat(read("views/routing.py")) + flat(read("app/routing_text.py"))
    assert "an 8-device deployment would hold" not in src and "grid_text(grid, layer, colour_by, SHARD_NOTE)" in src
    grid = pd.DataFrame({"expert": [0, 1], "chosen": [True, False], "prob": [0.6, 0.4], "load": [1, 0],
                         "load_class": ["high", "idle"]})
    assert f"{note}." in routing_text.grid_text(grid, 5, "probability", note).caption


# ==== Issue 48, "review everything else the same way": the Overview ===============================================
# Each number below is computed here from the config's fields, a closed form, Table 1's published figures or the
# assets table, never by the page's own function; each test fails on the text the page had before the review.

from app import attention as att_page  # noqa: E402
from app import overview  # noqa: E402

TABLE_1 = {"total_b": 2780.0, "active_b": 104.2}            # K3 report Table 1: 2.78T, 104.2B


def test_overview_lead_is_computed_and_per_moe_layer():
    moe_layers = K3.num_layers - K3.first_dense_layers                                 # 92: layer 0 is dense
    text = overview.lead(K3)
    assert f"**{TABLE_1['total_b'] / 1000:.1f} trillion**" in text and f"**{TABLE_1['active_b']:.0f} billion**" in text
    assert f"in each of its {moe_layers} mixture-of-experts layers a token visits {K3.top_k} of " \
           f"{K3.n_routed_experts} routed experts, plus {K3.n_shared_experts} shared" in text
    assert "the other models' numbers are their published figures" in text
    src = flat(read("views/overview.py"))
    assert "Every number on this page" not in src and "a sparse mixture of 896 experts" not in src
    assert "lead(cfg)" in src and "try_this(cfg)" in src
    # no K3 count typed in the view: each comes from the config (the stack's title, the try-this, the alt text)
    assert not re.search(r"\b(93|896|104|2\.8|ten metrics)\b", src)
    k2 = K3Config.kimi_k2()
    assert overview.try_this(k2).endswith(f"each of the {k2.num_layers} layers is made of.")
    assert overview.stack_title(K3).startswith(f"{len(K3.layer_types)} layers")


def test_context_card_cites_the_released_configs_max_position_embeddings():
    card = next(h for h in overview.headlines(K3) if h.label == "Context")
    assert card.published == 2 ** 20 == K3.context_length
    assert "max_position_embeddings" in card.source and '"1M"' in card.source        # Table 1 gives only "1M"
    assert card.source != overview.K3_SOURCE and "no positional encoding" not in card.how
    note = overview.headline_note()
    assert "max_position_embeddings" in note and "sec 2.3" in note and "derived" in note
    assert "Published: the K3 report, Table 1." not in flat(read("views/overview.py"))


def test_active_share_card_is_derived_from_table_1_and_matches_the_frontier_note():
    derived = 100 * TABLE_1["active_b"] / TABLE_1["total_b"]                           # 3.748%
    card = next(h for h in overview.headlines(K3) if h.label == "Active share")
    assert card.published == pytest.approx(derived) and card.published_text == f"{derived:.2f}%" == "3.75%"
    assert card.computed_text == "3.75%" and card.holds and "~3.7%" not in card.verdict
    assert f"{card.computed / 100:.2%}" in overview.frontier_note()                  # one figure on the page


def test_sparsity_card_is_published_in_section_2_3():
    card = next(h for h in overview.headlines(K3) if h.label == "Sparsity")
    assert card.computed == K3.n_routed_experts / K3.top_k == 56
    assert card.source.startswith("K3 report sec 2.3") and not card.source.startswith("derived")


def test_overview_stack_caption_says_what_a_layer_attends_over():
    blocks = [min(K3.attnres_block_size, K3.num_layers - i) for i in range(0, K3.num_layers, K3.attnres_block_size)]
    cap = overview.stack_caption(K3)
    sizes = f"({blocks.count(12)} of 12 layers and one of {blocks[-1]})"
    assert f"the {len(blocks)} Attention-Residual blocks {sizes}" in cap
    assert "the embedding, the sums of the earlier blocks and the partial sum of its own block" in cap
    assert "K3 report Eq. 10, sec 2.2" in cap and "K3 report sec 2.1" in cap
    assert "attends to earlier depth" not in flat(read("views/overview.py"))
    assert f"the {len(blocks)} AttnRes blocks" in overview.stack_alt(K3)


def test_breakdown_caption_counts_parameters_not_work():
    from model.accounting import count_params
    p = count_params(K3)
    # the embedding is left out of the active count: with it the count would not match Table 1's 104.2B
    assert round(p.active / 1e9, 1) == TABLE_1["active_b"] != round((p.active + K3.vocab_size * K3.d_model) / 1e9, 1)
    cap = overview.breakdown_caption(overview.breakdown(K3), K3)
    assert "of the parameters a token uses" in cap and "per-token work" not in cap
    assert f"Table 1's {TABLE_1['active_b']:g}B" in cap
    assert "per-token work" not in flat(read("views/overview.py"))


def test_frontier_note_ranks_k3_among_the_models_of_the_table():
    import csv
    with open(ROOT / "assets" / "frontier_moe.csv", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["model"] != "Kimi K3"]
    shares = [float(r["active_b"]) / float(r["total_b"]) for r in rows]
    from model.accounting import count_params
    k3 = count_params(K3).active_share
    smaller = sum(s < k3 for s in shares)
    n = len(rows) + 1
    assert (smaller, n) == (2, 13)
    note = overview.frontier_note()
    assert f"the 3rd smallest share of the {n} models in this table" in note
    assert "among the sparsest of the field" not in note


def test_frontier_k3_row_follows_the_config(monkeypatch):
    import csv
    with open(ROOT / "assets" / "frontier_moe.csv", encoding="utf-8") as f:
        released = next(r["released"] for r in csv.DictReader(f) if r["model"] == "Kimi K3")
    other = K3.with_(top_k=8, n_shared_experts=1)
    monkeypatch.setattr(K3Config, "full", classmethod(lambda cls: other))
    row = overview.frontier_table().set_index("model").loc["Kimi K3 (computed)"]
    assert row["experts"] == f"{other.n_routed_experts} / 8 (+1)" and row["released"] == released
    assert "FRONTIER_EXPERTS" in read("views/overview.py")


def test_k2_gap_is_labelled_an_inference_and_a_remainder_not_attributed():
    from model.accounting import count_params, mtp_layer
    k2 = K3Config.kimi_k2()
    rest = 32.6e9 - count_params(k2).active - mtp_layer(k2).active                    # Table 1: K2 32.6B active
    note = overview.k2_published_note()
    assert f"remaining {rest / 1e9:,.1f}B we could not attribute" in note and "is a counting convention" not in note
    cap = overview.growth_caption()
    assert "(our inference)" in cap and "could not attribute" in cap
    assert "because K2's published" not in cap and "a convention we could not pin down" not in cap


# ==== Issue 48, "review everything else the same way": Hybrid attention & memory =================================

def _closed_form_cache(cfg, tokens):
    """Values of one sequence's decode caches, written out from the config's fields (ARCHITECTURE.md sections 2-3)."""
    kda = cfg.kda_heads * cfg.kda_head_dim ** 2 + (cfg.kda_conv - 1) * 3 * cfg.kda_heads * cfg.kda_head_dim
    mla = cfg.kv_lora_rank + cfg.qk_rope_dim
    mha = 2 * cfg.mla_heads * cfg.v_head_dim
    n_mla = sum(t == "mla" for t in cfg.layer_types)
    return {"hybrid": (cfg.num_layers - n_mla) * kda + n_mla * mla * tokens,
            "all MLA": cfg.num_layers * mla * tokens, "all MHA": cfg.num_layers * mha * tokens}


def test_attention_lead_computes_what_a_million_tokens_cost():
    c = _closed_form_cache(K3, 2 ** 20)
    text = att_page.lead(K3)
    assert f"{2 * c['hybrid'] / 1e9:.1f} GB" in text and f"{2 * c['all MLA'] / 1e9:.1f} GB" in text
    assert "576 values per token in each layer" in text and "K3 report sec 2.1" in text
    assert "which is how a million-token context fits" not in flat(read("views/attention.py"))
    assert "lead(full)" in read("views/attention.py")


def test_attention_stack_alt_counts_the_last_column_of_one():
    units = K3.num_layers // 4                                                          # 23 full units of 4
    alt = att_page.stack_alt(K3)
    assert f"{units} columns of four" in alt and "final MLA" in alt
    assert "24 columns of four" not in flat(read("views/attention.py"))


def test_kda_state_caption_follows_the_token_slider():
    for t in (1, 5, 21):
        cap = att_page.state_caption(TINY, t)
        so_far = f"{t} token{'' if t == 1 else 's'} read"        # a count: positions count from 0, a count from 1
        assert f"after {so_far}, as after every token" in cap and "K3 report Eq. 1, sec 2.1.1" in cap
        assert f"{TINY.kda_head_dim} x {TINY.kda_head_dim} = {TINY.kda_head_dim ** 2} values" in cap
    assert "after token 1 and after" not in flat(read("views/attention.py"))
    assert "state_caption(cfg, token)" in read("views/attention.py")


def test_counts_are_written_for_people():
    assert att_page.tokens(1) == "1 token" and att_page.tokens(2 ** 20) == "1M tokens"
    assert att_page.tokens(2923) == "2,923 tokens" and att_page.rows(1) == "1 row" and att_page.rows(3) == "3 rows"
    assert att_page.metric_label("K3 hybrid", 1) == "K3 hybrid at 1 token"
    assert "1 row so far, 20 values" in att_page.cache_caption(TINY, K3, 1)
    assert "= 1 token x 20" in att_page.mla_measured_caption(TINY, 20, 1)
    src = flat(read("views/attention.py"))
    assert 'at {fmt_tokens(context)} tokens"' not in src and ':,.1f}x the hybrid"' not in src   # "1 tokens", "0.0x"
    assert "three decode steps" not in src and "with all 93 layers" not in src
    assert att_page.decode_heading(1).endswith("1 decode step**")
    assert f"all {TINY.num_layers} layers" in att_page.decode_spinner(TINY, 3)


def test_ratio_to_the_hybrid_is_never_zero_point_zero():
    one = _closed_form_cache(K3, 1)
    for name, key in (("all MLA", "all MLA"), ("all MHA", "all MHA")):
        cap = att_page.metric_caption(name, 1, 1, K3)
        assert cap == f"1/{one['hybrid'] / one[key]:,.0f} of the hybrid" and "0.0x" not in cap
    assert att_page.metric_caption("all MLA", 1, 1, K3) == "1/2,169 of the hybrid"
    big = _closed_form_cache(K3, 2 ** 20)
    assert att_page.metric_caption("all MHA", 2 ** 20, 1, K3) == f"{big['all MHA'] / big['hybrid']:,.0f}x the hybrid"
    for t in att_page.CONTEXTS:
        for name in ("all MLA", "all MHA"):
            assert not re.match(r"0\.0+x", att_page.metric_caption(name, t, 1, K3)), (name, t)
    assert ':,.1f}x the hybrid"' not in flat(read("views/attention.py"))           # the old "0.0x the hybrid"


def test_crossovers_name_the_first_whole_token_count_that_is_smaller():
    c = lambda t: _closed_form_cache(K3, t)                                              # noqa: E731
    first = {name: next(t for t in range(1, 10_000) if c(t)["hybrid"] < c(t)[name]) for name in ("all MLA", "all MHA")}
    assert first == {"all MLA": 2923, "all MHA": 52}
    cap = att_page.memory_caption(K3, 1)
    assert "less than all MLA from 2,923 tokens on" in cap and "less than all MHA from 52 tokens on" in cap
    assert "this page's choice" in cap and "does not give the precision" in cap
    assert "tokens against {r.versus}" not in flat(read("views/attention.py"))       # the old "from 51 tokens"


def test_cache_key_slice_is_said_to_be_never_rotated():
    cap = att_page.cache_caption(TINY, K3, 3)
    assert "never rotated" in cap and "K3 report sec 2.1.2" in cap and "rope-slice" not in cap
    assert "rope-slice" not in flat(read("views/attention.py"))
    from app.charts.attention import cache_spec
    spec = cache_spec(np.zeros((3, 20)), 2, 16, ["a", "b", "c"], "t")
    assert "never rotated" in spec["layer"][0]["encoding"]["x"]["title"]


def test_memory_note_names_whose_kda_state_is_fp32():
    from model.k3 import K3Model
    torch.manual_seed(0)
    micro = K3Config.micro()
    model = K3Model(micro).eval()
    with torch.inference_mode():
        out = model(torch.tensor([[1, 2, 3]]))
    kda = next(c for c, t in zip(out.cache.layers, micro.layer_types) if t == "kda")
    assert kda.state.dtype == torch.float32                                             # model/kda.py keeps fp32
    state, fixed = K3.kda_heads * K3.kda_head_dim ** 2, _closed_form_cache(K3, 0)["hybrid"] // K3.n_kda
    note = att_page.memory_note(K3)
    assert "model/kda.py" in note and "as some implementations do" not in note
    assert f"{state:,} of each KDA layer's {fixed:,} fixed values" in note and "doubles the fixed part only" not in note
    assert "as some implementations do" not in flat(read("views/attention.py"))


def test_each_attnres_ratio_is_named_by_what_it_counts():
    L, S = K3.num_layers, K3.attnres_block_size
    N = -(-L // S)                                                                       # 8 blocks
    full_vec, block_vec = 2 * L + 1, N + 1                                               # 187, 9
    full_links, block_links = L * (2 * L + 1) + (2 * L + 1), 1003                        # 17,578; docstring's 1,003
    p = att_page.compression_planes(K3)
    ar = p[p["plane"] == "Block AttnRes"]
    assert ar["comparison"].iloc[0].startswith("layers per block") and "depth entries" not in ar["comparison"].iloc[0]
    text = ar["explanation"].iloc[0]
    assert f"{L} / {N} = {L / N:.1f} layers per block" in text and "claim 7" in text
    assert f"{full_vec / block_vec:.1f}x fewer vectors kept" in text
    assert "links read per token with two reads per layer and the output read" in text
    assert f"{full_links:,} → {block_links:,}, {full_links / block_links:.1f}x fewer links" in text
    assert ar["comparison"].iloc[1].startswith("vectors kept alive per token")
    mla = p[p["plane"] == "MLA latent"]["explanation"].iloc[1]
    assert "claim 6" in mla and "often quoted" not in mla


def test_memory_legend_is_read_from_the_config():
    from app.charts.attention import DESIGN_LABELS, design_labels
    k2 = K3Config.kimi_k2()
    assert design_labels(k2)["all MLA"] == f"all MLA: {k2.num_layers} latent caches"
    assert DESIGN_LABELS == design_labels(K3)
    assert '"all MLA: 93 latent caches"' not in read("app/charts/attention.py")        # typed before


def test_state_legend_is_not_named_like_the_value_axis():
    from app.charts.attention import state_spec
    spec = state_spec(np.eye(TINY.kda_head_dim), 1.0, "t")
    enc = spec["encoding"]
    assert enc["x"]["title"].startswith("value channel") and enc["color"]["title"] != "value"
    assert "S" in enc["color"]["title"]


# ---- issue 48 review: Load balancing lab (K3 report Eq. 13-14, sec 2.3.3, App. C-D; DeepSeek-V3) --------------

def test_balance_try_this_asks_for_changes_and_what_it_promises_holds():
    from app import balance, balance_sim
    view = read("views/balance.py")
    start = view.index("ui.page_header(")
    header = flat(view[start:view.index(")\n", view.index('"Load balancing lab"', start)) + 1])
    # issue 45 item 17: the old one asked for 896 experts, the default; every value it names is not the default
    assert f"set {balance.Setup.n_experts} experts" not in header and '"raise' in header
    try_this = header.split('"raise', 1)[1]
    assert "0.1" in try_this and 0.1 != balance.DEFAULT_GAMMA
    assert "32 experts" in try_this and 32 != balance.Setup.n_experts
    assert "α = 100 " in try_this and 100 != balance.DEFAULT_AUX
    assert "dotted noise floor" in try_this and "dashed noise floor" not in header     # the chart's line is dotted
    # what it asks the student to find: at 896 experts no gamma brings the sign rule near the floor, QB gets there
    setup = balance.Setup()                                             # the page's default run, 12 batches
    mark = 1.5 * balance_sim.noise_floor(setup.tokens, setup.top_k, setup.n_experts)
    qb = balance_sim.metrics(balance_sim.simulate(setup, "qb"), setup)["max/mean"]
    assert qb.iloc[1:].min() <= mark
    for gamma in (0.01, 0.1):
        sign = balance_sim.metrics(balance_sim.simulate(setup, "sign", gamma), setup)["max/mean"].to_numpy()
        assert sign.min() > mark and (np.diff(sign) > 0).any()            # never near, and it swings back up
    small = balance.Setup(n_experts=32, steps=8)
    mark32 = 1.5 * balance_sim.noise_floor(small.tokens, small.top_k, 32)
    aux = {a: balance_sim.metrics(balance_sim.simulate(small, "aux", a), small)["max/mean"].iloc[-1] for a in (100.0, 1000.0)}
    assert aux[100.0] <= mark32 < aux[1000.0]


def test_qb_sets_the_bias_for_fixed_cutoffs_not_a_balanced_batch():
    """Eq. 14 takes one batch's margins with every token's cutoff fixed: routed again with that bias, the same
    batch is not balanced (the cutoffs move), so the page may not say QB 'jumps straight to the bias that
    balances the last batch'."""
    from app import balance, balance_sim
    setup = balance.Setup()
    S = balance_sim.Scores(setup).batch(0)
    b = balance_sim.quantile_balance(S, torch.zeros(setup.n_experts), setup.top_k)
    load = torch.bincount(torch.topk(S + b, setup.top_k).indices.reshape(-1), minlength=setup.n_experts)
    assert float(load.max()) / setup.target > 1.2
    view = flat(read("views/balance.py"))
    assert "balances the last batch" not in view and "Eq. 14" in view and "App. C" in view
    runs = balance_sim.simulate_all(balance.Setup(steps=4), {"qb": 0.0, "sign": 1e-3})
    story = balance.sign_story(balance.Setup(steps=4), runs["qb"], runs["sign"])
    text = balance.sign_rule_intuition(story, 16, 4)
    assert "if every token's cutoff had stayed where it was" in text
    # the sign rule's lower bound: QB's spread over 2 gamma (a common offset never changes a top-k)
    spread = float(runs["qb"].biases[-1].max() - runs["qb"].biases[-1].min())
    assert f"at least **{math.ceil(spread / 2e-3):,} steps**" in text
    assert f"at least **{math.ceil(np.abs(runs['qb'].biases[-1]).max() / 1e-3):,} steps**" not in text


def test_goal_note_uses_the_binomial_spread():
    from app import balance, balance_sim
    setup = balance.Setup(n_experts=32, top_k=16, tokens=2048)        # k/n = 1/2: sqrt(q) would be 41% too wide
    q, p = setup.target, 16 / 32
    floor = balance_sim.noise_floor(2048, 16, 32)
    note = balance.goal_note(setup, floor)
    sd = math.sqrt(2048 * p * (1 - p))                                  # Binomial(m, k/n)
    assert f"= {sd:.1f} tokens" in note and f"√q = {math.sqrt(q):.1f}" not in note


def test_balance_table_caption_measures_qb_against_the_floor():
    import pandas as pd

    from app import balance, balance_sim
    assert "little above the floor" not in read("views/balance.py")
    setup = balance.Setup(n_experts=256, top_k=8, tokens=2048, steps=6)
    runs = balance_sim.simulate_all(setup, balance.method_params(1e-3, 1000.0))
    table = pd.concat([balance_sim.metrics(runs[m], setup) for m in balance_sim.METHODS], ignore_index=True)
    floor = balance_sim.noise_floor(2048, 8, 256)
    last = runs["qb"].loads[-1]
    qb = last.max() / (2048 * 8 / 256)                                  # by hand from the loads
    note = balance.table_note(table, floor, setup)
    assert f"Exact QB ends at {qb:.2f}" in note and f"{qb / floor - 1:.0%} above" in note
    assert "App. D" in note and "sec 2.3.3" in note


def test_balance_sources_are_cited():
    view = flat(read("views/balance.py"))
    assert "arXiv 2412.19437" in view                                   # DeepSeek-V3's gamma = 0.001
    assert "a few hundred bins per expert" in view and "(App. D)" in view    # K3 report sec 2.3.3 and App. D
    assert "K3 report Eq. 13" in view and "arXiv 2101.03961" in view     # weights from raw scores; Switch
    assert 'f"{bins:,} bins"' in view and "α = {aux:,g}" in view          # 1,000 written for people
    details = flat(read("app/balance.py"))
    assert "Each step is then coarse" not in details and "App. C" in details


# ---- issue 48 review: MoE vs Mixture of Agents (model/cost.py, MoA arXiv 2406.04692, H200 datasheet) -------------

def test_moa_try_this_asks_for_changes_and_what_it_promises_holds():
    from dataclasses import replace

    from app import moe_vs_moa
    from model import cost
    view = flat(read("views/moe_vs_moa.py"))
    assert f"set N to {moe_vs_moa.DEFAULTS['n']}" not in view                  # the old one asked for the default
    assert "slide the prompt length to 1M" in view and "double N to 16" in view
    s = moe_vs_moa.default_scenario()
    at_1m = cost.ratios(replace(s, context=2 ** 20))
    base = cost.ratios(s)
    # cache: N proposer caches, each K3's (same attention stack), against K3's one
    k3 = cost.k3_decoder()
    assert at_1m["cache"] == pytest.approx(s.n_agents * k3.cache_bytes(2 ** 20 + s.output) / k3.cache_bytes(2 ** 20 + s.output))
    assert abs(at_1m["seconds"] / base["seconds"] - 1) < 0.05             # barely moves
    s16 = moe_vs_moa.scenario(16, moe_vs_moa.matched_size(16), s.context, s.output, 4.8, "bf16")
    r16 = cost.ratios(s16)
    assert r16["seconds"] < base["seconds"] and r16["flops"] > base["flops"]


def test_moa_sweep_caption_follows_the_sweep():
    """'The FLOPs ratio shrinks at long contexts' held only for agents larger than K3's active count: with 64
    agents of 43B it rises, towards 2N + 1 token passes per answer token."""
    from app import moe_vs_moa
    assert "shrinks at long contexts" not in read("views/moe_vs_moa.py")
    assert "or the aggregator's longer context" not in read("views/moe_vs_moa.py")
    s = moe_vs_moa.scenario(64, moe_vs_moa.matched_size(64), 32_768, 1_024, 4.8, "bf16")
    sweep = moe_vs_moa.context_sweep(s)
    flops = sweep["FLOPs per answer token"]
    assert 2 * 43e9 < 2 * 104.2e9 and flops.iloc[-1] > flops.iloc[0]     # agents' 2 x 43B below K3's 2 x 104.2B
    note = moe_vs_moa.sweep_note(s, sweep)
    assert "rises" in note and f"towards {2 * 64 + 1}x" in note
    big = moe_vs_moa.default_scenario()
    big_note = moe_vs_moa.sweep_note(big, moe_vs_moa.context_sweep(big))
    assert "falls" in big_note and f"ratio is {big.n_agents} at every length" in big_note


def test_moa_ratios_are_written_for_people():
    from app import moe_vs_moa
    from app.charts import moe_vs_moa as charts
    from model.accounting import count_params
    s = moe_vs_moa.scenario(1, 39, 32_768, 1_024, 4.8, "mxfp4")
    table, _, m = moe_vs_moa.cost_table(s)
    # by hand: 39B at 4.25 bits against K3's stored bytes (routed experts 4.25 bits, the rest 16)
    p = count_params(K3)
    k3_bytes = sum(n * (4.25 if c == "routed experts" else 16) / 8 for c, n in p.breakdown.items())
    r = 39e9 * 4.25 / 8 / k3_bytes
    assert r < 0.05
    subtitles = [panel["title"]["subtitle"] for panel in charts.costs_spec(table, m.name)["hconcat"]]
    assert f"MoA / K3 = 1/{round(1 / r):,}" in subtitles and not any("0.0x" in t for t in subtitles)
    assert moe_vs_moa.fmt_ratio(8.0) == "8.0x" and moe_vs_moa.fmt_ratio(0.57) == "0.57x"
    assert '{r:,.2f}x' not in read("views/moe_vs_moa.py")


def test_moa_words_hold_for_one_agent_and_say_there_is_no_routing():
    from app import moe_vs_moa
    s = moe_vs_moa.scenario(1, 500, 8_192, 256, 4.8, "bf16")
    table, k3, m = moe_vs_moa.cost_table(s)
    q = moe_vs_moa.qualitative(s, table, k3, m).set_index("aspect")
    for aspect in ("Latency", "KV cache", "Compute"):
        assert "aggregator" not in q.loc[aspect, "Mixture of Agents"], aspect      # N = 1: no aggregation (cost.moa_cost)
    s8 = moe_vs_moa.default_scenario()
    q8 = moe_vs_moa.qualitative(s8, *moe_vs_moa.cost_table(s8)).set_index("aspect")
    assert "all 8 agents on every request" in q8.loc["Differentiability", "the number on this page"]
    assert "one choice of" not in q8.loc["Differentiability", "the number on this page"]


def test_moa_assumptions_are_sourced_and_say_what_fits():
    import math as m_

    from app import moe_vs_moa
    s = moe_vs_moa.default_scenario()
    text = " ".join(moe_vs_moa.assumptions(s))
    # MoA paper: layers of agents, three by default with Qwen1.5-110B-Chat aggregating; one layer is the page's
    assert "three layers" in text and "Qwen1.5-110B-Chat" in text and "this page's choices" in text
    assert "the most favourable choice" not in text
    # K3 applies no positional encoding in MLA (sec 2.1.2): the shared key slice is never rotated
    assert "kv_lora + rope)" not in text and "sec 2.1.2" in text and f"{K3.qk_rope_dim}-value key slice" in text
    assert "bf16, this page's assumption" in text and "sec 4.1.4" in text
    # neither side fits in one H200's 141 GB (published): K3 at its precisions, an agent at bf16
    from model.accounting import count_params
    p = count_params(K3)
    k3_bytes = sum(n * (4.25 if c == "routed experts" else 16) / 8 for c, n in p.breakdown.items())
    agent_bytes = moe_vs_moa.matched_size(8) * 1e9 * 2
    assert f"at least {m_.ceil(k3_bytes / 141e9)} H200s" in text and f"at least {m_.ceil(agent_bytes / 141e9)} (computed)" in text
    assert "divides both sides' times alike" not in text
    view = flat(read("views/moe_vs_moa.py"))
    assert "all of its weights but the embedding table" in view         # an agent's active count leaves it out
