"""Quantization lab: the MX grids, how a block of 32 picks its scale, the live experts' block scales,
what rounding does to the live model, and K3's weight memory by precision."""
import numpy as np
import streamlit as st

from app import live as lv_mod
from app import state, ui
from app.charts.quant_lab import behaviour_spec, block_spec, errors_spec, scales_spec, superscript
from app.quant_lab import (
    BLOCK,
    COARSE_BLOCK,
    EXAMPLES,
    FORMAT_NAMES,
    GB_COLUMNS,
    HELDOUT_CHUNK,
    HELDOUT_ROWS,
    MATRICES,
    SOURCES,
    VARIANT_HOW,
    VARIANTS,
    block_table,
    blocks_per_tensor,
    cached_heldout_comparison,
    cached_layer_errors,
    cached_layer_scales,
    cached_prompt_comparison,
    cached_spec,
    e2m1_codes,
    explain_block,
    grids_caption,
    k3_bytes_summary,
    k3_gb_table,
    weight_block,
)
from app.text import fmt_bytes, fmt_params
from model.config import K3Config
from model.quant import E2M1_GRID, FORMATS, bits_per_value, element_grid, packed_bytes

ELEMENT_MAX = {f: f"{FORMATS[f].max:g}" for f in FORMATS}

TINY = K3Config.tiny()
view = state.page(
    *ui.PROMPT,
    state.Choice("source", "shared", "block source", options=tuple(SOURCES)),
    state.Choice("fmt", "e2m1", "format", options=tuple(FORMAT_NAMES)),
    state.Choice("layer", TINY.moe_layers[len(TINY.moe_layers) // 2], "layer", options=tuple(TINY.moe_layers)),
    state.Choice("matrix", "w_gate", "matrix", options=tuple(MATRICES)),
    state.Int("expert", 0, "expert", lo=0, hi=TINY.n_routed_experts - 1),
    state.Index("block", 0, "block"),
    state.Choice("variant", "act", "experiment", options=tuple(VARIANTS)),
    prefix="quant",
)
K3 = k3_bytes_summary()
ui.page_header(
    "Quantization lab",
    f"K3 stores its routed experts, {K3['routed_params'] / (K3['routed_params'] + K3['other_params']):.0%} of its "
    "weights, in **MXFP4**: 4-bit values that share one power-of-two "
    f"scale per block of 32, so a weight costs **{K3['bits']:g} bits** instead of 16; this page shows how a block "
    "is rounded "
    "and what the rounding does to the live model.",
    "watch a shared-expert block (stored in bf16) snap to 15 levels, then switch to a routed expert: its values "
    "already sit on the grid. Further down, switch the experiment to \"router weights in MXFP4\" and see how many "
    "expert choices change.",
)
lv = lv_mod.live()
model, cfg = lv.model, lv.model.cfg
theme_type = st.context.theme.type

# ---- the grids -------------------------------------------------------------------------------------
st.subheader("Two tiny number formats")
st.latex(r"X = 2^{\lfloor \log_2 \max_i |V_i| \rfloor - e_{\max}}, \qquad P_i = \mathrm{round}_{\text{grid}}(V_i / X), "
         r"\qquad \hat V_i = X \cdot P_i")
ui.vega_chart(cached_spec("grids", theme_type), grids_caption(),
              alt="Two strip plots: the 15 E2M1 values on a linear axis, and the positive E4M3 values on a log axis.",
              key="quant_grids")

# ---- one block -------------------------------------------------------------------------------------
@st.fragment
def block_sections() -> None:
    theme_type = st.context.theme.type          # read here: a fragment's rerun does not rerun the page
    st.subheader("How a block of 32 picks its scale")
    c1, c2 = st.columns([3, 2])
    source = view.draw(c1.segmented_control, "source", "Block from", format_func=SOURCES.get)
    fmt = view.draw(c2.segmented_control, "fmt", "Format", format_func=FORMAT_NAMES.get)
    n_blocks = blocks_per_tensor(model, "routed" if source == "example" else source)
    c1, c2, c3, c4 = st.columns([3, 2, 1, 1])
    layer = view.draw(c1.select_slider, "layer", "MoE layer")
    matrix = view.draw(c2.segmented_control, "matrix", "Matrix", disabled=source == "example")
    with c3:
        expert = view.draw_number("expert", f"Expert (0–{cfg.n_routed_experts - 1})", disabled=source != "routed")
    with c4:
        block = view.draw_number("block", f"Block (0–{n_blocks - 1})", hi=n_blocks - 1, disabled=source == "example")

    if source == "example":
        values = EXAMPLES[fmt][0]
        where = f"docs/ARCHITECTURE.md §7's {FORMAT_NAMES[fmt]} example ({len(values)} values; a short block)"
    else:
        values = weight_block(model, layer, matrix, source, int(block), int(expert))
        where = (f"layer {layer}, routed expert {expert}, {matrix}, values {block * BLOCK}–{block * BLOCK + len(values) - 1} "
                 "of its [out, in] matrix read row by row (a block: whole rows of inputs)" if source == "routed" else
                 f"layer {layer}, shared experts' {matrix}, values {block * BLOCK}–{block * BLOCK + len(values) - 1} of "
                 "its row-major flattening")
    steps = explain_block(values, fmt)
    if steps.floor_log2 is None:
        st.info("This block is all zeros: its scale is the smallest E8M0 value and every code is 0.")
    else:
        st.markdown(
            f"**{where}.** The largest magnitude is amax = {steps.amax:.6g}, so ⌊log₂ amax⌋ = {steps.floor_log2}. "
            f"The largest {fmt.upper()} value is {ELEMENT_MAX[fmt]} (e_max = {steps.emax}: it lies in "
            f"[2{superscript(steps.emax)}, "
            f"2{superscript(steps.emax + 1)})), so the block's scale is E = {steps.floor_log2} − {steps.emax} = "
            f"**{steps.scale_exp}**, X = 2{superscript(steps.scale_exp)} = {steps.X:.6g}, stored as one byte "
            f"(E + 127 = {steps.scale_exp + 127}). Then amax / X lies in [2{superscript(steps.emax)}, "
            f"2{superscript(steps.emax + 1)}): each value is divided by X, rounded to the nearest grid value (ties to the "
            "even code; above the largest value it saturates) and multiplied back.")
    table = block_table(steps, e2m1_codes(values) if fmt == "e2m1" else None)
    grid = np.array(E2M1_GRID) if fmt == "e2m1" else None
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
    ui.vega_chart(block_spec(table, steps.X, grid), caption,
                  alt="Scatter of one block's 32 values before and after MX quantisation, with the grid levels.",
                  key="quant_block_fig")
    with st.expander("The block, value by value"):
        ui.table(table, {c: ".6g" for c in ("value V", "V / X", "on the grid P", "X · P", "error")})
        if fmt == "e2m1":
            st.caption("4-bit code: sign, 2 exponent bits, 1 mantissa bit, as model.quant.pack_mxfp4 writes it "
                       f"(two codes per byte, plus the scale byte: {packed_bytes(BLOCK)} bytes per block of {BLOCK}, "
                       f"{bits_per_value('e2m1'):g} bits a value).")

    # ---- a layer's scales and errors ---------------------------------------------------------------------
    st.subheader(f"Live: every block scale of layer {layer}'s routed experts")
    scales = cached_layer_scales(layer)
    n_scale = int(scales["blocks"].sum())
    lo, hi = int(scales["exponent"].min()), int(scales["exponent"].max())
    ui.vega_chart(scales_spec(scales, theme_type),
                  f"The {n_scale:,} blocks of layer {layer}'s three expert tensors ({cfg.n_routed_experts} experts × "
                  f"{cfg.expert_width * cfg.expert_hidden // BLOCK} blocks × 3 matrices), by the exponent of their scale: "
                  f"from 2{superscript(lo)} to 2{superscript(hi)}. One scale for the whole tensor would have to fit the largest "
                  "block, and a block k powers of two smaller would then use only the bottom of its grid (in E2M1, two powers "
                  "of two down leave just 0, ±0.5, ±1 and ±1.5). Computed: the E8M0 bytes "
                  "model.quant.pack_mxfp4 writes for the live weights (the same bytes the checkpoint stores).",
                  alt="Bar chart of the number of MXFP4 blocks per scale exponent, for the gate, up and down expert tensors.",
                  key="quant_scales")
    errors, already = cached_layer_errors(layer)
    err_cols = ["MXFP4, blocks of 32", f"MXFP4, blocks of {COARSE_BLOCK}", "MXFP8, blocks of 32"]
    kept = errors[errors["stored as"] == "bf16"]
    ui.vega_chart(errors_spec(errors, err_cols, theme_type),
                  "Relative error of rounding each weight matrix of the layer. "
                  + ("The routed experts show 0 for MXFP4 and MXFP8 with blocks of 32: their stored values are already "
                     "MXFP4, and rounding is idempotent. " if already else
                     "The routed experts are not on the MXFP4 grid here (the model is a random fallback), so they round too. ")
                  + f"Blocks of {COARSE_BLOCK} (one scale for a whole expert matrix of the live instance) do lose information. "
                  + (f"The bf16 matrices K3 keeps in higher precision would be off by {kept[err_cols[0]].min():.0%}–"
                     f"{kept[err_cols[0]].max():.0%} of their size in MXFP4, but by {kept[err_cols[2]].min():.1%}–"
                     f"{kept[err_cols[2]].max():.1%} in MXFP8." if len(kept) else ""),
                  alt="Grouped horizontal bars: relative quantisation error per weight matrix of one layer for three formats.",
                  key="quant_errors", table=lambda: errors)

block_sections()

# ---- behaviour -----------------------------------------------------------------------------------------
@st.fragment
def behaviour_section() -> None:
    st.subheader("What rounding does to the live model")
    st.markdown(
        "The checkpoint's routed experts are **already MXFP4** (packed on disk), so there is no full-precision copy of "
        "them to compare with. Each experiment changes one thing and compares with the same **reference: the weights "
        "as stored, activations in float32** (`forward(quant=False)`).")
    prompt = ui.prompt_input(view)
    variant = view.draw(st.segmented_control, "variant", "Experiment", format_func=VARIANTS.get)
    st.caption(f"**What is compared:** {VARIANT_HOW[variant]}")
    if prompt is not None:
        with st.spinner("Running the live model twice on the prompt and on the held-out sample…"):
            cp = cached_prompt_comparison(prompt.ids, variant)
            ch = cached_heldout_comparison(variant)
        n_held = HELDOUT_ROWS * HELDOUT_CHUNK
        cols = st.columns(3)
        for col, (label, p, h, fmt_) in zip(cols, (
                ("Top-1 next token agrees", cp.top1, ch.top1, "{:.1%}"),
                ("KL(reference ‖ variant), mean", cp.kl_mean, ch.kl_mean, "{:.3g} nats"),
                (f"Top-{cfg.top_k} expert choices changed", cp.changed, ch.changed, "{:.1%}"))):
            with col.container(border=True):
                st.metric(label + " · prompt", fmt_.format(p))
                st.caption(f"held-out sample ({n_held} tokens): **{fmt_.format(h)}**")
        ui.vega_chart(behaviour_spec({f"your prompt ({len(prompt.ids)} tokens)": cp.per_layer,
                                      f"held-out sample ({n_held} tokens)": ch.per_layer}, cfg.top_k),
                      f"For every MoE layer, the share of the {cfg.top_k} routed experts per token that differ from the "
                      "reference. A change compounds: once a layer routes differently its output differs, so every later "
                      "layer sees a different input, which is why the lines tend to rise with depth. Computed from real "
                      "forward passes of the live model (two per text); the held-out sample is text it never trained on "
                      f"(assets/heldout_sample.txt, its first {n_held} tokens in rows of {HELDOUT_CHUNK}).",
                      alt="Line chart of the share of top-16 expert choices that change, per MoE layer, for the prompt and "
                          "held-out text.", key="quant_behaviour")
        st.caption("KL: how far the next-token distribution moves, in nats (0 = identical), averaged over positions. "
                   "The live instance is tiny and briefly trained: at K3's scale the numbers differ, but the method is "
                   "the one a quantisation study uses.")

behaviour_section()

# ---- K3 scale ----------------------------------------------------------------------------------------
st.subheader("At K3 scale: weight memory by precision")
c1, c2, c3 = st.columns(3)
c1.metric("All weights in bf16", fmt_bytes(K3["bf16"]),
          help=f"Derived: {fmt_params(K3['routed_params'] + K3['other_params'])} parameters × 2 bytes.")
c2.metric("K3: MXFP4 routed experts, rest bf16", fmt_bytes(K3["k3"]),
          help=f"Derived: {fmt_params(K3['routed_params'])} routed-expert values × {K3['bits']:g} bits / 8 + "
               f"{fmt_params(K3['other_params'])} other parameters × 2 bytes.")
c3.metric("Saving", f"{K3['bf16'] / K3['k3']:.2f}x",
          help=f"bf16 bytes / K3 bytes; storing every weight at {K3['bits']:g} bits would give 16 / {K3['bits']:g} = "
               f"{16 / K3['bits']:.2f}x.")
ui.vega_chart(cached_spec("k3_bytes", theme_type),
              f"Routed experts are {K3['routed_params'] / (K3['routed_params'] + K3['other_params']):.1%} of K3's "
              f"{fmt_params(K3['routed_params'] + K3['other_params'])} parameters, so storing them at {K3['bits']:g} bits "
              f"(4-bit codes + one 8-bit scale per 32) takes the weights from {fmt_bytes(K3['bf16'])} to "
              f"{fmt_bytes(K3['k3'])}. The other {fmt_params(K3['other_params'])} stay in bf16 and are still "
              f"{fmt_bytes(2 * K3['other_params'])}. Per token, the active weights read are {fmt_bytes(K3['active_k3'])} "
              f"(vs {fmt_bytes(K3['active_bf16'])} in bf16): the input of the decode-latency bound on the MoE vs Mixture "
              "of Agents page.",
              alt="Stacked bars of K3's weight memory, all bf16 versus MXFP4 routed experts.", key="quant_k3_bytes")
ui.table(k3_gb_table(), {"parameters": ",d", "bits per value": ".2f", **{c: ",.1f" for c in GB_COLUMNS.values()}})
st.caption("Which parts K3 keeps in higher precision: attention, latent projections, shared experts and router "
           f"(published: K3 report sec 4.1.4; docs/ARCHITECTURE.md §7); expert activations run in MXFP8 ({K3['bits_mxfp8']:g} "
           "bits; the report says MXFP8, and E4M3 elements are what K3's serving kernels take). "
           "For the "
           "embedding, LM head, dense layer-0 FFN and norms the report gives no format: bf16 is our assumption. "
           "Parameter counts computed by the accounting (model/accounting.py); bytes derived as parameters × bits / 8.")
