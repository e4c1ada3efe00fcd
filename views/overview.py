"""Overview: the shape of Kimi K3 at a glance, every number computed from the config now."""
import streamlit as st

from app import state, ui
from app.charts.overview import breakdown_spec, frontier_spec, growth_spec, stack_spec
from app.overview import (breakdown, frontier_note, frontier_table, growth_caption, headlines, k2_published_note,
                          k2_vs_k3, layer_stack)
from model.config import K3Config

view = state.page(state.Choice("count", "total", "parameter count", options=("total", "active"),
                                key="breakdown_view"))
cfg = K3Config.full()
ui.page_header(
    "Kimi K3 at a glance",
    "Kimi K3 stores **2.8 trillion** parameters but uses only about **104 billion** for each token: "
    "a sparse mixture of 896 experts, of which every token visits 16. Every number on this page is "
    "computed now from K3's published configuration and set beside the published figure.",
    "hover over the layer stack to see what each of the 93 layers is made of.",
)

st.subheader("The headline numbers, recomputed")
cards = headlines(cfg)
for row in (cards[:4], cards[4:]):
    for col, h in zip(st.columns(4), row):
        with col.container(border=True):
            st.metric(h.label, h.computed_text, help=f"Computed: {h.how}. Source of the published figure: {h.source}.")
            st.caption(f"{h.detail}  \n{h.verdict}" if h.detail else h.verdict)
st.caption("Computed: from `K3Config.full()` by the parameter accounting of docs/ARCHITECTURE.md §9, the same "
           "formulas that the tests check against the real PyTorch modules. Published: the K3 report, Table 1.")

st.subheader("93 layers: three KDA, then one gated MLA")
stack = layer_stack(cfg)
ui.vega_chart(stack_spec(stack, len(cfg.attnres_blocks), st.context.theme.type),
         f"{cfg.n_kda} Kimi Delta Attention layers (fixed-size state) and {cfg.n_mla} gated MLA layers "
         f"(a compressed cache that grows with the text): three KDA then one MLA, {cfg.n_mla - 1} times, plus a final "
         f"MLA. Layer 0 has a dense FFN; the other {len(cfg.moe_layers)} are mixtures of experts. Shaded bands: the "
         f"{len(cfg.attnres_blocks)} Attention-Residual blocks ({cfg.attnres_blocks.count(cfg.attnres_block_size)} "
         f"of {cfg.attnres_block_size} layers and one of {cfg.attnres_blocks[-1]}) over which each layer attends to "
         "earlier depth.",
         alt="Chart of K3's 93 layers: attention type per layer (KDA or MLA), FFN type, and the 8 AttnRes blocks.",
         key="overview_stack")

@st.fragment
def breakdown_section() -> None:
    st.subheader("Where the parameters are")
    which = view.draw(st.segmented_control, "count", "Count", ["total", "active"],
                      format_func={"total": "stored weights", "active": "used per token"}.get)
    bd = breakdown(cfg)
    routed = bd.set_index("component").loc["routed experts"]
    ui.vega_chart(breakdown_spec(bd, which or "total", st.context.theme.type),
             f"Routed experts hold {routed['share of total']:.1%} of all weights, but a token touches only {cfg.top_k} of "
             f"the {cfg.n_routed_experts} in each layer, so they are {routed['share of active']:.1%} of the per-token work. "
             "The embedding is a table lookup, so it is not counted as active.",
             alt="Bar chart of K3's parameters by component, as a share of total or active parameters.",
             key="overview_breakdown")

breakdown_section()

st.subheader("K3 among public mixture-of-experts models")
frontier = frontier_table()
ui.vega_chart(frontier_spec(frontier, st.context.theme.type), frontier_note(frontier),
              alt="Log-log scatter of total versus active parameters for public MoE models, K3 highlighted.",
              key="overview_frontier")
ui.table(frontier[["model", "released", "total_b", "active_b", "active share", "experts", "source"]]
         .rename(columns={"total_b": "total (B)", "active_b": "active (B)"}),
         {"total (B)": ",.1f", "active (B)": ",.1f", "active share": ".1%"})

st.subheader("From Kimi K2 to K3")
growth = k2_vs_k3()
ui.vega_chart(growth_spec(growth, st.context.theme.type), growth_caption(growth),
              alt="Small multiples comparing Kimi K2 and K3 on ten metrics.", key="overview_growth")
st.caption(k2_published_note())
