"""What the Quantization lab says, and the records each of its sections draws: the fixed explanations, and the
captions and numbers built from the controls' values and the computed data (no Streamlit: the page reads its
controls, calls these and draws)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from app.charts.quantization import superscript
from app.quantization_behaviour import HELDOUT_CHUNK, HELDOUT_ROWS, Comparison
from app.quantization_blocks import BLOCK, EXAMPLES, BlockSteps, block_table, e2m1_codes, explain_block, grid_counts
from app.quantization_weights import COARSE_BLOCK, weight_block
from app.text import fmt_bytes, fmt_params
from model.config import K3Config
from model.k3 import K3Model
from model.quant import E2M1_GRID, FORMATS, bits_per_value, element_grid, packed_bytes

FORMAT_NAMES = {"e2m1": "MXFP4 (E2M1 elements)", "e4m3": "MXFP8 (E4M3 elements)"}
SOURCES = {"routed": "routed expert (MXFP4)", "shared": "shared experts (bf16)", "example": "worked example"}
ELEMENT_MAX = {f: f"{FORMATS[f].max:g}" for f in FORMATS}
_LIVE, _K3 = K3Config.tiny(), K3Config.full()


def act_blocks_note(live: K3Config = _LIVE, k3: K3Config = _K3, block: int = BLOCK) -> str:
    """How the MXFP8 activations are blocked, in the live instance and in K3: model.moe rounds each token's
    row on its own (mx_fake_quant per_row), and a row no longer than a block is one block of its own length."""
    rows = (live.expert_width, live.expert_hidden)
    if max(rows) > block:                       # not the tiny instance: say it in blocks of 32
        here = " and ".join(f"{-(-n // block)} blocks of {block}" for n in rows)
    else:
        here = (f"each row is one block of its own, {rows[0]} and {rows[1]} values long, with its own scale "
                f"(not a block of {block})")
    return (f"In the live instance a token's latent row (the experts' input) holds {rows[0]} values and an expert's "
            f"hidden row {rows[1]}: {here}. K3's rows, {k3.expert_width:,} and {k3.expert_hidden:,} values wide, "
            f"are {k3.expert_width // block} and {k3.expert_hidden // block} blocks of {block}, each block with its "
            "own scale.")


VARIANT_HOW = {
    "act": "forward(quant=True) against forward(quant=False). quant=True rounds the experts' inputs and hidden "
           "activations to MXFP8, every token's row on its own, and re-quantises the expert weights to MXFP4, "
           "which changes nothing because they are already MXFP4 values (checked below). So the only difference "
           "is the MXFP8 activations. " + act_blocks_note(),
    "coarse": "the stored MXFP4 expert weights re-quantised with one E8M0 scale per 128 values (a whole expert "
              "matrix of the live instance) instead of per 32: a coarser format, all else the same. A finer "
              "format cannot be tried: the information below MXFP4 was discarded when the checkpoint was saved.",
    "router": "the router's weights (bf16 in the checkpoint; K3 keeps the router in higher precision) rounded to "
              "MXFP4 with blocks of 32 inputs; experts and activations unchanged.",
    "all": "every weight matrix the checkpoint keeps in bf16 (attention, router, latent projections, shared "
           "experts, the dense layer-0 FFN, the LM head) rounded to MXFP4 with blocks of 32; the embedding table, "
           "norms and convolution taps stay as they are.",
}


# ---- the value grids ------------------------------------------------------------------------------

def grids_caption() -> str:
    """The caption of the two grids, every count read off element_grid."""
    e2, e4 = grid_counts("e2m1"), grid_counts("e4m3")
    lo, hi = e4["full_binades"]
    return (f"E2M1 has only {e2['distinct']} distinct values (0 and ±0.5 … ±{e2['max']:g}; of its {e2['codes']} "
            f"codes the last is −0): halfway between 4 and 6 there is nothing. E4M3 has {e4['positive']} positive "
            f"values: {e4['per_binade']} in every power of two from 2{superscript(lo)} to 2{superscript(hi)} "
            f"({hi - lo + 1} of them), {e4['top_count']} in [2{superscript(e4['top_exp'])}, {e4['max']:g}] (the "
            f"code that would be {2 ** (e4['top_exp'] + 1) - 2 ** (e4['top_exp'] - 3):g} means NaN) and "
            f"{e4['subnormals']} subnormals below 2{superscript(lo)}; between neighbouring normal values the "
            f"relative step stays between {e4['gap_min']:.1%} and {e4['gap_max']:.1%}. Hover a tick for its bit "
            "pattern. Computed: model.quant.element_grid (OCP Microscaling v1.0, Table 1).")


# ---- one block ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BlockView:
    """One block as the page shows it: where it comes from, its steps, its table, the grid levels to draw (E2M1
    only), the explanation of its scale (None for a block of zeros) and the chart's caption."""
    where: str
    steps: BlockSteps
    table: pd.DataFrame
    levels: np.ndarray | None
    explanation: str | None
    caption: str
    codes_note: str | None


def block_view(model: K3Model, source: str, fmt: str, layer: int, matrix: str, block: int, expert: int) -> BlockView:
    """The block the controls pick (SOURCES: a routed expert's, the shared experts', or section 7's example) in the
    element format `fmt`."""
    if source == "example":
        values = EXAMPLES[fmt][0]
        where = f"docs/ARCHITECTURE.md §7's {FORMAT_NAMES[fmt]} example ({len(values)} values; a short block)"
    else:
        values = weight_block(model, layer, matrix, source, block, expert)
        where = (f"layer {layer}, routed expert {expert}, {matrix}, values {block * BLOCK}–{block * BLOCK + len(values) - 1} "
                 "of its [out, in] matrix read row by row (a block: whole rows of inputs)" if source == "routed" else
                 f"layer {layer}, shared experts' {matrix}, values {block * BLOCK}–{block * BLOCK + len(values) - 1} of "
                 "its row-major flattening")
    steps = explain_block(values, fmt)
    explanation = None if steps.floor_log2 is None else (
        f"**{where}.** The largest magnitude is amax = {steps.amax:.6g}, so ⌊log₂ amax⌋ = {steps.floor_log2}. "
        f"The largest {fmt.upper()} value is {ELEMENT_MAX[fmt]} (e_max = {steps.emax}: it lies in "
        f"[2{superscript(steps.emax)}, "
        f"2{superscript(steps.emax + 1)})), so the block's scale is E = {steps.floor_log2} − {steps.emax} = "
        f"**{steps.scale_exp}**, X = 2{superscript(steps.scale_exp)} = {steps.X:.6g}, stored as one byte "
        f"(E + 127 = {steps.scale_exp + 127}). Then amax / X lies in [2{superscript(steps.emax)}, "
        f"2{superscript(steps.emax + 1)}): each value is divided by X, rounded to the nearest grid value (ties to the "
        "even code; above the largest value it saturates) and multiplied back.")
    caption = (
        "Blue dots: the values before; red diamonds: after rounding. "
        + ("Dotted lines are the 15 levels X·P this block can take. " if fmt == "e2m1" else "")
        + ("These routed-expert weights come from the checkpoint, which stores them as MXFP4 already: re-quantising "
           "them to MXFP4 changes nothing (the diamonds sit on the dots), and to MXFP8 neither, since every E2M1 "
           "value times its scale is also an E4M3 value times a finer scale. That is why the other sources exist: "
           "shared-expert weights are stored in bf16, so their rounding is real."
           if source == "routed" and steps.unchanged else
           f"Mean |error| {np.abs(steps.error).mean():.3g}, largest {np.abs(steps.error).max():.3g} "
           f"(relative to amax: {np.abs(steps.error).max() / max(steps.amax, 1e-30):.1%}). Small values are hit "
           f"hardest: anything below X × {float(element_grid(fmt)[1]) / 2:g} in size becomes 0."))
    e2m1 = fmt == "e2m1"
    codes_note = ("4-bit code: sign, 2 exponent bits, 1 mantissa bit, as model.quant.pack_mxfp4 writes it "
                  f"(two codes per byte, plus the scale byte: {packed_bytes(BLOCK)} bytes per block of {BLOCK}, "
                  f"{bits_per_value('e2m1'):g} bits a value).") if e2m1 else None
    return BlockView(where, steps, block_table(steps, e2m1_codes(values) if e2m1 else None),
                     np.array(E2M1_GRID) if e2m1 else None, explanation, caption, codes_note)


# ---- a layer's scales and errors ---------------------------------------------------------------------

ERROR_COLUMNS = ["MXFP4, blocks of 32", f"MXFP4, blocks of {COARSE_BLOCK}", "MXFP8, blocks of 32"]


def scales_caption(scales: pd.DataFrame, layer: int, cfg: K3Config) -> str:
    """`scales`: app.quantization_weights.layer_scale_exponents's blocks per exponent."""
    n_scale = int(scales["blocks"].sum())
    lo, hi = int(scales["exponent"].min()), int(scales["exponent"].max())
    return (f"The {n_scale:,} blocks of layer {layer}'s three expert tensors ({cfg.n_routed_experts} experts × "
            f"{cfg.expert_width * cfg.expert_hidden // BLOCK} blocks × 3 matrices), by the exponent of their scale: "
            f"from 2{superscript(lo)} to 2{superscript(hi)}. One scale for the whole tensor would have to fit the largest "
            "block, and a block k powers of two smaller would then use only the bottom of its grid (in E2M1, two powers "
            "of two down leave just 0, ±0.5, ±1 and ±1.5). Computed: the E8M0 bytes "
            "model.quant.pack_mxfp4 writes for the live weights (the same bytes the checkpoint stores).")


def errors_caption(errors: pd.DataFrame, already: bool) -> str:
    """`errors`: app.quantization_weights.layer_errors's rows; `already`: whether the experts are MXFP4 values."""
    kept = errors[errors["stored as"] == "bf16"]
    cols = ERROR_COLUMNS
    return ("Relative error of rounding each weight matrix of the layer. "
            + ("The routed experts show 0 for MXFP4 and MXFP8 with blocks of 32: their stored values are already "
               "MXFP4, and rounding is idempotent. " if already else
               "The routed experts are not on the MXFP4 grid here (the model is a random fallback), so they round too. ")
            + f"Blocks of {COARSE_BLOCK} (one scale for a whole expert matrix of the live instance) do lose information. "
            + (f"The bf16 matrices K3 keeps in higher precision would be off by {kept[cols[0]].min():.0%}–"
               f"{kept[cols[0]].max():.0%} of their size in MXFP4, but by {kept[cols[2]].min():.1%}–"
               f"{kept[cols[2]].max():.1%} in MXFP8." if len(kept) else ""))


# ---- behaviour -----------------------------------------------------------------------------------------

HELDOUT_TOKENS = HELDOUT_ROWS * HELDOUT_CHUNK


@dataclass(frozen=True)
class BehaviourView:
    """The experiment's three cards (label, the prompt's value, the held-out sample's caption), the per-layer
    series of the chart by name, and its caption."""
    cards: list[tuple[str, str, str]]
    series: dict[str, pd.DataFrame]
    caption: str


def behaviour_view(prompt: Comparison, held: Comparison, n_prompt: int, top_k: int) -> BehaviourView:
    """The variant against the reference on the prompt (`n_prompt` tokens) and on the held-out sample."""
    cards = []
    for label, p, h, fmt_ in (("Top-1 next token agrees", prompt.top1, held.top1, "{:.1%}"),
                              ("KL(reference ‖ variant), mean", prompt.kl_mean, held.kl_mean, "{:.3g} nats"),
                              (f"Top-{top_k} expert choices changed", prompt.changed, held.changed, "{:.1%}")):
        cards.append((label + " · prompt", fmt_.format(p),
                      f"held-out sample ({HELDOUT_TOKENS} tokens): **{fmt_.format(h)}**"))
    series = {f"your prompt ({n_prompt} tokens)": prompt.per_layer,
              f"held-out sample ({HELDOUT_TOKENS} tokens)": held.per_layer}
    caption = (f"For every MoE layer, the share of the {top_k} routed experts per token that differ from the "
               "reference. A change compounds: once a layer routes differently its output differs, so every later "
               "layer sees a different input, which is why the lines tend to rise with depth. Computed from real "
               "forward passes of the live model (two per text); the held-out sample is text it never trained on "
               f"(assets/heldout_sample.txt, its first {HELDOUT_TOKENS} tokens in rows of {HELDOUT_CHUNK}).")
    return BehaviourView(cards, series, caption)


# ---- K3 scale ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MemoryView:
    """K3's weight memory in words: the routed experts' share of the weights, three cards (label, value, help)
    and the chart's caption."""
    routed_share: float
    cards: list[tuple[str, str, str]]
    caption: str


def memory_view(k3: dict) -> MemoryView:
    """`k3`: app.quantization_weights.k3_bytes_summary()."""
    params = k3["routed_params"] + k3["other_params"]
    share = k3["routed_params"] / params
    cards = [
        ("All weights in bf16", fmt_bytes(k3["bf16"]), f"Derived: {fmt_params(params)} parameters × 2 bytes."),
        ("K3: MXFP4 routed experts, rest bf16", fmt_bytes(k3["k3"]),
         f"Derived: {fmt_params(k3['routed_params'])} routed-expert values × {k3['bits']:g} bits / 8 + "
         f"{fmt_params(k3['other_params'])} other parameters × 2 bytes."),
        ("Saving", f"{k3['bf16'] / k3['k3']:.2f}x",
         f"bf16 bytes / K3 bytes; storing every weight at {k3['bits']:g} bits would give 16 / {k3['bits']:g} = "
         f"{16 / k3['bits']:.2f}x."),
    ]
    caption = (f"Routed experts are {share:.1%} of K3's "
               f"{fmt_params(params)} parameters, so storing them at {k3['bits']:g} bits "
               f"(4-bit codes + one 8-bit scale per 32) takes the weights from {fmt_bytes(k3['bf16'])} to "
               f"{fmt_bytes(k3['k3'])}. The other {fmt_params(k3['other_params'])} stay in bf16 and are still "
               f"{fmt_bytes(2 * k3['other_params'])}. Per token, the active weights read are {fmt_bytes(k3['active_k3'])} "
               f"(vs {fmt_bytes(k3['active_bf16'])} in bf16): the input of the decode-latency bound on the MoE vs Mixture "
               "of Agents page.")
    return MemoryView(share, cards, caption)
