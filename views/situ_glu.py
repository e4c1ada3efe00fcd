"""SiTU-GLU vs SwiGLU: a bounded activation, what it changes, and the routed path it keeps finite."""
import math

import streamlit as st

from app import export, state, ui
from app import live as lv_mod
from app.charts.situ_glu import curve_table, derivative_spec, factors_spec, output_spec
from app.charts.situ_glu_live import chain_spec, histogram_spec
from app.charts.situ_glu_plane import SURFACE_CONFIG, SURFACE_HEIGHT, grid_spec, grid_table, surface_table
from app.situ_glu import (
    CAP,
    FP8_MAX,
    MXFP8_NOTE,
    NAMES,
    REPORT_ON_CHAIN,
    SOURCE,
    cached_chain,
    cached_curves,
    cached_grid,
    cached_hidden,
    cached_surfaces,
    chain_summary,
    derivative_caption,
    histogram_summary,
    surface_caption,
    swiglu_crossings,
)
from model.config import K3Config

RANGES = list(range(1, 1001))
UPS = list(range(-1000, 1001))
PLANES = [5, 10, 25, 50, 100, 250, 500, 1000]
HIST_SCALES = [1, 2, 3, 5, 10, 20, 50]
CHAIN_SCALES = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.0, 10.0]

view = state.page(
    *ui.PROMPT,
    state.Int("range", 10, "range", lo=1, hi=1000),
    state.Int("up", 100, "up value", lo=-1000, hi=1000),
    state.Flag("full", False, "full y range"),
    state.Choice("plane", 50, "plane range", options=tuple(PLANES)),
    state.Choice("layer", 5, "layer", options=tuple(K3Config.tiny().moe_layers)),
    state.Choice("hscale", 1, "weight scale", options=tuple(HIST_SCALES)),
    state.Choice("chain", 3.0, "chain weight scale", options=tuple(CHAIN_SCALES)),
    state.Choice("metric", "max_h", "chain metric", options=("max_h", "rms_out"), key="situ_chain_metric"),
    prefix="situ",
)
ui.page_header(
    "SiTU-GLU vs SwiGLU",
    f"K3 replaces SwiGLU with **SiTU-GLU**, a gated activation whose output can never exceed **{CAP:g}** in size, "
    "whatever the weights, so the hidden value inside every expert stays bounded. " + MXFP8_NOTE,
    "drag the range out to ±1000 and watch SwiGLU leave the chart while SiTU-GLU flattens at 100; then move "
    "the chain experiment's weight scale (it starts at 3) up and down and see which variants survive 92 layers.",
)
st.latex(r"\mathrm{SiTU\text{-}GLU}(g,u)=\big[4\tanh(g/4)\,\sigma(g)\big]\cdot\big[25\tanh(u/25)\big]"
         r"\qquad \mathrm{SwiGLU}(g,u)=g\,\sigma(g)\cdot u")
st.caption("g = x W_gate and u = x W_up are the two pre-activations of a GLU feed-forward block. "
           f"Published: the form and the constants 4 and 25 ({SOURCE}; self-cited, no independent replication). "
           "Computed: every curve below, by the functions the live model runs (model/activations.py).")

def panels_width() -> int:
    """Width of the charts with panels side by side (Vega-Lite cannot stretch those to the column): the
    column without the sidebar, in presenter mode, is about a third wider."""
    return 1180 if st.session_state.get(ui.K_PRESENT) else 880


# ---- curves ----------------------------------------------------------------------------------------
@st.fragment
def curves_section() -> None:
    st.subheader("The curves")
    c1, c2, c3 = st.columns([2, 2, 1])
    R = view.draw(c1.slider, "range", "Range of g and u: ±", help="The x axis runs from -R to R.")
    up = view.draw(c2.slider, "up", "Up value u for the output curve")
    full = view.draw(c3.toggle, "full", "Full y range", help="Off: the y axis stops just past 448, so SwiGLU leaves the "
                                                              "chart. On: the whole of SwiGLU's range.")
    df = cached_curves(float(R), float(up))
    cross = swiglu_crossings(float(up), FP8_MAX, -float(R), float(R))
    ui.vega_chart(output_spec(df, up, cross, full, st.context.theme.type),
                  (f"At u = {up}: SiTU-GLU stays within ±{CAP:g} for every g (its up factor is 25·tanh({up}/25) = "
                   f"{25 * math.tanh(up / 25):.2f} here, never more than 25 in size), "
                   "while SwiGLU grows linearly in g. "
                   + (f"SwiGLU crosses {FP8_MAX:g}, E4M3's largest value without a block scale, at g = "
                      f"{', '.join(f'{g:.4g}' for g in cross)} (computed by bisection on the real function)." if cross else
                      "In this range SwiGLU stays under 448 in size: widen the range or raise |u|.")),
                  alt="Line chart of SiTU-GLU and SwiGLU against the gate value at a fixed up value, with lines at ±100 "
                      "and ±448.",
                  key="situ_out", table=lambda: curve_table(df, "output"))
    ui.vega_chart(factors_spec(df, st.context.theme.type, panels_width()),
                  "Left: the gate factors. Near 0 they agree (both ≈ g/2 + g²/4); SiTU-GLU's saturates at 4, swish grows "
                  "without bound. The minimum of the SiTU-GLU gate factor is marked (computed on this grid; "
                  "docs/ARCHITECTURE.md section 4). Right: the up factors; SwiGLU passes u through unchanged, "
                  "SiTU-GLU caps it at 25. The y axes stop at three times each bound.",
                  alt="Two line charts: the gate factor of both activations against g, and the up factor against u.",
                  key="situ_factors", table=lambda: curve_table(df, "factors"))
    ui.vega_chart(derivative_spec(df, up, panels_width()), derivative_caption(),
                  alt="Three line charts of derivatives: of each factor and of the output in g at the chosen up value.",
                  key="situ_derivs", table=lambda: curve_table(df, "derivatives"))

curves_section()

def surfaces(plane: float) -> None:
    """The 3-D surfaces on the plane's range: plotly (turnable), the page's one figure that is not Vega-Lite."""
    # drawn only while open (opening it reruns this region): the browser loads and runs plotly's code (4.7 MB) for
    # the first plotly figure it draws, seconds of main-thread script (docs/PERFORMANCE.md, what a chart costs)
    box = st.expander("Turn both functions in 3-D: rotatable surfaces of SiTU-GLU and SwiGLU", key="situ_surfaces_open",
                      on_change="rerun", icon=":material/3d_rotation:")
    if not box.open:
        return
    grid, fig = cached_surfaces(plane, st.context.theme.type)
    alt = "Rotatable 3-D surfaces of SiTU-GLU and SwiGLU over the same grid of gate and up values."
    with box:
        st.plotly_chart(fig, key="situ_surfaces", config=SURFACE_CONFIG, alt=alt,
                        height=int(SURFACE_HEIGHT * (1.35 if st.session_state.get(ui.K_PRESENT) else 1)))
        st.caption(surface_caption(grid))
        st.download_button("Chart data (CSV)", data=lambda: surface_table(grid).to_csv(index=False),
                           file_name=f"{export.file_stem(alt)}.csv", mime="text/csv", key="csv_situ_surfaces",
                           on_click="ignore", type="tertiary", icon=":material/download:",
                           help="the numbers behind this chart: every point of both surfaces; the chart's toolbar "
                                "(on hover) saves the picture as PNG")


@st.fragment
def plane_section() -> None:
    st.subheader("Both functions over the whole gate × up plane")
    plane = view.draw(st.select_slider, "plane", "Plane range: g and u from − to +")
    grid = cached_grid(float(plane))
    ui.vega_chart(grid_spec(grid, panels_width()),
                  f"Colour is the value on a signed log scale shared by both panels (g and u in ±{plane}). "
                  "Dotted: |value| = 100; "
                  "dashed: |value| = 448. SiTU-GLU's plane never reaches the 448 contour and only approaches 100 in the two "
                  "corners of large positive g; SwiGLU's contours are hyperbolas g·u ≈ constant, beyond which it keeps growing.",
                  alt="Two heatmaps of SiTU-GLU and SwiGLU over gate and up values, with contours at 100 and 448.",
                  key="situ_grid", table=lambda: grid_table(grid))
    surfaces(float(plane))

plane_section()

# ---- live experts ------------------------------------------------------------------------------------
st.subheader("Live: the experts' activations on your prompt")
lv = lv_mod.live()
cfg = lv.model.cfg
prompt = ui.prompt_input(view)
if prompt is not None:
    @st.fragment
    def live_experts() -> None:
        c1, c2 = st.columns(2)
        layer = view.draw(c1.select_slider, "layer", "MoE layer")
        hscale = view.draw(c2.select_slider, "hscale", "Scale the experts' W_gate and W_up by",
                           help="1 = the live weights. Larger values stand in for weights that grew in training.")
        with st.spinner("Running the live model and its experts…"):
            values = cached_hidden(prompt.ids, layer, float(hscale))
        summary = histogram_summary(values)
        n_tok = len(prompt.ids)
        ui.vega_chart(histogram_spec(values, NAMES, st.context.theme.type),
                      f"Every hidden value of the {cfg.top_k} routed experts of layer {layer} for the {n_tok} tokens "
                      f"({n_tok} × {cfg.top_k} × {cfg.expert_hidden} = {n_tok * cfg.top_k * cfg.expert_hidden:,} values): "
                      "the live "
                      "model's own gate and up pre-activations, passed through SiTU-GLU (what the model runs) and through "
                      "SwiGLU (the same experts, the activation swapped). At scale 1 the two agree closely: the bound only "
                      f"matters in the tails. Raise the scale and SwiGLU's tail passes {FP8_MAX:g} (E4M3's largest value before "
                      f"MXFP8's block scale) while SiTU-GLU's stops at {CAP:g}.",
                      alt="Overlaid histograms of the experts' hidden activations under SiTU-GLU and SwiGLU.", key="situ_hist")
        ui.table(summary, {"values": ",d", "max |h|": ".4g", "over 100": ",d", "over FP8 max 448": ",d"})
        st.caption("Computed from the live model. The gate and up pre-activations are rebuilt from the recorded "
                   "forward (the layer's FFN input, its latent projection, the routed experts' weights); the tests "
                   "check that they reproduce the layer's recorded output.")

    live_experts()

    # ---- the chain experiment ------------------------------------------------------------------------
    @st.fragment
    def chain_section() -> None:
        st.subheader("The chain experiment: why the routed path needed both fixes")
        c1, c2 = st.columns([3, 2])
        cscale = view.draw(c1.select_slider, "chain", "Scale the routed path's weights by",
                           help="Multiplies W_down, the experts' W_gate, W_up and W_down, and W_up of every layer.")
        metric = view.draw(c2.segmented_control, "metric", "Plot",
                           format_func={"max_h": "largest |hidden activation|", "rms_out": "RMS of the output"}.get)
        with st.spinner("Pushing the prompt through 92 routed paths, four ways…"):
            table = cached_chain(prompt.ids, float(cscale))
        ui.vega_chart(chain_spec(table, metric, theme_type=st.context.theme.type),
                      f"The prompt's FFN input to layer {cfg.first_dense_layers} goes through the routed path of every MoE "
                      "layer in turn (router, W_down, the top-16 experts, W_up), each layer's output feeding the next, "
                      f"with the live weights scaled by {cscale:g}. There is no residual stream and no pre-norm here, so "
                      "nothing else can absorb growth. Without the RMSNorm before W_up, SwiGLU roughly squares the size of "
                      "its input at every layer, so it compounds until it overflows. The norm resets the size at every "
                      "layer, which stops the compounding, but one layer with large weights can still pass 448. SiTU-GLU "
                      "never exceeds 100, with or without the norm. K3 uses both.",
                      alt="Log-scale line chart of activation magnitude per layer for four variants of the routed path.",
                      key="situ_chain_fig", table=lambda: table)
        ui.table(chain_summary(table, len(cfg.moe_layers)), {"largest |h| (inf: overflow)": ".3g"})
        st.caption("Computed in float64 with the live weights. The experiment is a stress test of the routed path "
                   f"alone; {REPORT_ON_CHAIN}.")

    chain_section()
