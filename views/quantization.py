"""Quantization lab: the MX grids, how a block of 32 picks its scale, the live experts' block scales,
what rounding does to the live model, and K3's weight memory by precision."""
import streamlit as st

from app import live as lv_mod
from app import state, ui
from app.charts.quantization import behaviour_spec, block_spec, errors_spec, scales_spec
from app.quantization_behaviour import VARIANTS
from app.quantization_cache import (
    cached_heldout_comparison,
    cached_layer_errors,
    cached_layer_scales,
    cached_prompt_comparison,
    cached_spec,
)
from app.quantization_text import (
    ERROR_COLUMNS,
    FORMAT_NAMES,
    SOURCES,
    VARIANT_HOW,
    behaviour_view,
    block_view,
    errors_caption,
    grids_caption,
    memory_view,
    scales_caption,
)
from app.quantization_weights import GB_COLUMNS, MATRICES, blocks_per_tensor, k3_bytes_summary, k3_gb_table
from model.config import K3Config

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
MEMORY = memory_view(K3)
ui.page_header(
    "Quantization lab",
    f"K3 stores its routed experts, {MEMORY.routed_share:.0%} of its "
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

    bv = block_view(model, source, fmt, layer, matrix, block, expert)
    if bv.explanation is None:
        st.info("This block is all zeros: its scale is the smallest E8M0 value and every code is 0.")
    else:
        st.markdown(bv.explanation)
    ui.vega_chart(block_spec(bv.table, bv.steps.X, bv.levels), bv.caption,
                  alt="Scatter of one block's 32 values before and after MX quantisation, with the grid levels.",
                  key="quant_block_fig")
    with st.expander("The block, value by value"):
        ui.table(bv.table, {c: ".6g" for c in ("value V", "V / X", "on the grid P", "X · P", "error")})
        if bv.codes_note:
            st.caption(bv.codes_note)

    # ---- a layer's scales and errors ---------------------------------------------------------------------
    st.subheader(f"Live: every block scale of layer {layer}'s routed experts")
    scales = cached_layer_scales(layer)
    ui.vega_chart(scales_spec(scales, theme_type), scales_caption(scales, layer, cfg),
                  alt="Bar chart of the number of MXFP4 blocks per scale exponent, for the gate, up and down expert tensors.",
                  key="quant_scales")
    errors, already = cached_layer_errors(layer)
    ui.vega_chart(errors_spec(errors, ERROR_COLUMNS, theme_type), errors_caption(errors, already),
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
        bh = behaviour_view(cp, ch, len(prompt.ids), cfg.top_k)
        for col, (label, value, held) in zip(st.columns(3), bh.cards):
            with col.container(border=True):
                st.metric(label, value)
                st.caption(held)
        ui.vega_chart(behaviour_spec(bh.series, cfg.top_k), bh.caption,
                      alt="Line chart of the share of top-16 expert choices that change, per MoE layer, for the prompt and "
                          "held-out text.", key="quant_behaviour")
        st.caption("KL: how far the next-token distribution moves, in nats (0 = identical), averaged over positions. "
                   "The live instance is tiny and briefly trained: at K3's scale the numbers differ, but the method is "
                   "the one a quantisation study uses.")

behaviour_section()

# ---- K3 scale ----------------------------------------------------------------------------------------
st.subheader("At K3 scale: weight memory by precision")
for col, (label, value, help_) in zip(st.columns(3), MEMORY.cards):
    col.metric(label, value, help=help_)
ui.vega_chart(cached_spec("k3_bytes", theme_type), MEMORY.caption,
              alt="Stacked bars of K3's weight memory, all bf16 versus MXFP4 routed experts.", key="quant_k3_bytes")
ui.table(k3_gb_table(), {"parameters": ",d", "bits per value": ".2f", **{c: ",.1f" for c in GB_COLUMNS.values()}})
st.caption("Which parts K3 keeps in higher precision: attention, latent projections, shared experts and router "
           f"(published: K3 report sec 4.1.4; docs/ARCHITECTURE.md §7); expert activations run in MXFP8 ({K3['bits_mxfp8']:g} "
           "bits; the report says MXFP8, and E4M3 elements are what K3's serving kernels take). "
           "For the "
           "embedding, LM head, dense layer-0 FFN and norms the report gives no format: bf16 is our assumption. "
           "Parameter counts computed by the accounting (model/accounting.py); bytes derived as parameters × bits / 8.")
