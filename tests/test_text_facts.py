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

from app import glossary, layer, model_card, parallel, quant_lab, routing, situ, tour
from model.config import K3Config
from model.quant import element_grid

ROOT = Path(__file__).resolve().parent.parent
K3, TINY = K3Config.full(), K3Config.tiny()


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
    cap = quant_lab.grids_caption()
    assert f"{len(pos)} positive values" in cap
    assert "8 in every power of two from 2⁻⁶ to 2⁷" in cap and "7 in [2⁸, 448]" in cap
    assert "7 subnormals" in cap and "8 subnormals" not in cap
    e2 = element_grid("e2m1").numpy()
    assert f"only {2 * (e2 > 0).sum() + 1} distinct values" in cap           # 15
    assert "8 subnormals" not in read("views/quant.py") and "grids_caption()" in read("views/quant.py")


# ---- 2 and 3. "Exploding internal activations" (sec 2.3), and "Stable" = three components, two failure modes ----

STABLE_TEXTS = {
    "glossary": lambda: glossary.by_slug("stable-latentmoe").more,
    "ARCHITECTURE": lambda: flat(read("docs/ARCHITECTURE.md")),
}


def test_no_page_says_the_routed_path_diverged_or_blew_up():
    for path in ("views/situ.py", "app/situ.py", "app/layer.py", "app/glossary.py", "app/tour.py",
                 "docs/ARCHITECTURE.md"):
        text = flat(read(path))
        assert not re.search(r"diverged at scale|blew up|blow up", text), path
    assert "exploding internal activations" in situ.REPORT_ON_CHAIN and "2.3" in situ.REPORT_ON_CHAIN
    assert "REPORT_ON_CHAIN" in read("views/situ.py")
    assert "exploding internal activations" in tour.stop_for("situ-glu").why


def test_stable_latentmoe_is_three_components_for_two_failure_modes():
    moe_up = next(s for s in layer._moe_steps(_layer_data(), 0, TINY) if s.key == "moe_up")
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
    read_ = layer.Read(["emb"], r(T, 1, d), np.ones((T, 1), np.float32), r(T, d), r(T, d), np.ones(d, np.float32))
    ffn = {"z": r(T, l), "expert_hidden": r(T, k, f), "expert_out": r(T, k, l), "u": r(T, l), "u_normed": r(T, l),
           "routed": r(T, d), "shared": r(T, d), "out": r(T, d)}
    idx = np.stack([rng.permutation(E)[:k] for _ in range(T)])
    route = {"scores": rng.random((T, E)).astype(np.float32), "indices": idx,
             "weights": np.full((T, k), 1 / k, np.float32), "cutoff": np.zeros(T, np.float32),
             "bias": np.zeros(E, np.float32)}
    return layer.LayerData(1, "kda", True, {"attn": read_, "ffn": read_}, {}, ffn, {}, None, {}, None, route)


# ---- 4. SwiGLU's gate derivative: near 1 only for large positive g, 0 for negative g ----------------------------

def test_swiglu_gate_derivative_is_described_on_both_sides():
    g = torch.tensor([-20.0, -10.0, 20.0], dtype=torch.float64, requires_grad=True)
    (d,) = torch.autograd.grad(F.silu(g).sum(), g)
    assert abs(d[0]) < 1e-6 and abs(d[1]) < 1e-3 and d[2] == pytest.approx(1, abs=1e-6)
    cap = situ.derivative_caption()
    assert "near 1 only for large positive g" in cap and "goes to 0 for negative g" in cap
    assert "under 0.001" in cap and "1.0000 at g = 20" in cap
    peak_g, peak = situ.swish_derivative_peak()
    assert 1.09 < peak < 1.11 and 2.3 < peak_g < 2.5 and f"{peak:.2f}" in cap
    assert "stay near 1 (gate)" not in flat(read("views/situ.py"))


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
    note = quant_lab.VARIANT_HOW["act"]
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
    assert "weighted by its router score" in routing.DENSE_HELP and "Eq. 13" in routing.DENSE_HELP
    for path in ("views/routing.py", "app/routing.py"):
        assert "dense model of the same total size" not in read(path), path
    assert "help=rt.DENSE_HELP" in read("views/routing.py")


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
            if not name.endswith("claims.py"):
                assert "K3 report" in flat(before), (name, numbers, before[-80:])
    assert seen >= 20
    assert cited_equations("K3 report Eq. 8–10, sec 2.2")[0][1] == {8, 9, 10}
    assert cited_equations("Eq. 2 and Eq. 5")[0][1] == {2, 5}


def test_architecture_cites_the_report_equations_and_no_sentence_says_they_are_unknown():
    arch = flat(read("docs/ARCHITECTURE.md"))
    for path in ("docs/ARCHITECTURE.md", "app/layer.py", "app/glossary.py", "model/config.py"):
        assert not re.search(r"(do not|don't) give (its|the) equation numbers|equation numbers are not known|"
                             r"none are quoted", flat(read(path))), path
    for numbers, sec in (("1-6", "2.1.1"), ("7", "2.1.2"), ("8-10", "2.2"), ("12", "2.3.2"), ("14", "2.3.3")):
        assert f"Eq. {numbers}" in arch and sec in arch, numbers
    cited = set().union(*(n for _, n, _ in cited_equations(arch)))
    assert cited == set(range(1, 15))


def test_every_layer_step_cites_the_report_equation_and_section_beside_the_docs():
    pattern = re.compile(r"^K3 report (Eq\. \d+(–\d+)?( and Eq\. \d+)?, )?sec \d+(\.\d+)*")
    for key, cite in layer.CITE.items():
        assert pattern.match(cite), key
        assert "docs/ARCHITECTURE.md §" in cite, key
    with_eq = {k for k, c in layer.CITE.items() if layer.report_ref(c).startswith("K3 report Eq.")}
    assert set(layer.CITE) - with_eq == {"mla_latent"}           # its latent is in the report's text, unnumbered
    assert layer.report_ref(layer.CITE["router"]) == "K3 report Eq. 13, sec 2.3.3"
    assert layer.report_ref(layer.CITE["dense"]) == "K3 report Eq. 12, sec 2.3.2"


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
    assert "stores these activations" not in flat(read("views/situ.py"))
    assert "MXFP8_NOTE" in read("views/situ.py")
    assert "says nothing about storing" in situ.MXFP8_NOTE and "4.1.4" in situ.MXFP8_NOTE
    assert situ.SOURCE == "K3 report Eq. 12, sec 2.3.2"


# ---- 19. The 8 x 112 grid is the article's illustration; K3's experts need at least 11 H200s -------------------

def test_routing_grid_caption_labels_the_shards_as_the_articles():
    least = math.ceil(parallel.routed_expert_bytes(K3) / 141e9)
    assert least == 11
    note = parallel.shard_note(K3)
    assert "illustration" in note and "names no expert-parallel size" in note and f"at least {least} H200s" in note
    src = flat(read("views/routing.py"))
    assert "an 8-device deployment would hold" not in src and "{SHARD_NOTE}" in src
