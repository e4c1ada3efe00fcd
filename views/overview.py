"""Overview: the shape of Kimi K3 at a glance, K3's numbers computed from the config now beside the published ones."""
import streamlit as st

from app import state, ui
from app.charts.overview import breakdown_spec, frontier_spec, growth_spec, stack_spec
from app.overview import (
    FRONTIER_EXPERTS,
    breakdown,
    breakdown_caption,
    frontier_note,
    frontier_table,
    growth_caption,
    headline_note,
    headlines,
    k2_published_note,
    k2_vs_k3,
    layer_stack,
    lead,
    stack_alt,
    stack_caption,
    stack_title,
    try_this,
)
from model.config import K3Config

view = state.page(state.Choice("count", "total", "parameter count", options=("total", "active"),
                                key="breakdown_view"))
cfg = K3Config.full()
ui.page_header("Kimi K3 at a glance", lead(cfg), try_this(cfg))

st.subheader("The headline numbers, recomputed")
cards = headlines(cfg)
for row in (cards[:4], cards[4:]):
    for col, h in zip(st.columns(4), row):
        with col.container(border=True):
            st.metric(h.label, h.computed_text, help=f"Computed: {h.how}. Source of the published figure: {h.source}.")
            st.caption(f"{h.detail}  \n{h.verdict}" if h.detail else h.verdict)
st.caption(headline_note())

st.subheader(stack_title(cfg))
stack = layer_stack(cfg)
ui.vega_chart(stack_spec(stack, len(cfg.attnres_blocks), st.context.theme.type), stack_caption(cfg),
              alt=stack_alt(cfg), key="overview_stack")

@st.fragment
def breakdown_section() -> None:
    st.subheader("Where the parameters are")
    which = view.draw(st.segmented_control, "count", "Count",
                      format_func={"total": "stored weights", "active": "used per token"}.get)
    bd = breakdown(cfg)
    ui.vega_chart(breakdown_spec(bd, which or "total", st.context.theme.type), breakdown_caption(bd, cfg),
                  alt="Bar chart of K3's parameters by component, as a share of total or active parameters.",
                  key="overview_breakdown")

breakdown_section()

st.subheader("K3 among public mixture-of-experts models")
frontier = frontier_table()
ui.vega_chart(frontier_spec(frontier, st.context.theme.type), frontier_note(frontier),
              alt="Log-log scatter of total versus active parameters for public MoE models, K3 highlighted.",
              key="overview_frontier")
ui.table(frontier[["model", "released", "total_b", "active_b", "active share", "experts", "source"]]
         .rename(columns={"total_b": "total (B)", "active_b": "active (B)", "experts": FRONTIER_EXPERTS}),
         {"total (B)": ",.1f", "active (B)": ",.1f", "active share": ".2%"})

st.subheader("From Kimi K2 to K3")
growth = k2_vs_k3()
ui.vega_chart(growth_spec(growth, st.context.theme.type), growth_caption(growth),
              alt=f"Small multiples comparing Kimi K2 and K3 on {len(growth)} metrics.", key="overview_growth")
st.caption(k2_published_note())
