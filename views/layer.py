"""Inside one layer: one token followed down one K3 layer, step by step, every equation filled in with the live
model's numbers and every shape beside K3's.

The prompt is drawn by a full run; the token, the layer and the walk below them are one fragment, so
choosing another token or layer reruns only the walk."""
import streamlit as st

from app import layer as ly
from app import state, ui
from app.charts.layer import step_figure
from app.layer_data import FULL, PART_TITLES, Step, block_of
from app.layer_steps_ffn import gradient_step
from app.live import forward, live
from app.model_card import kept_and_shrunk
from app.text import chip_labels

lv = live()
cfg = lv.model.cfg
LAST = cfg.num_layers - 1
DEFAULT_LAYER = 5
SCALE_SHORT = kept_and_shrunk()["short"]     # its widths, head counts and vocabulary shrunk (from the configs)
KINDS = {"kda": "Kimi Delta Attention", "mla": "gated MLA"}
NEXT_MLA = cfg.layer_types.index("mla", DEFAULT_LAYER)
ui.page_header(
    "Inside one layer",
    f"Follow one token down one of K3's **{FULL.num_layers} layers**: a read over depth, attention (Kimi Delta "
    f"Attention or gated MLA), a second read, and the FFN ({FULL.top_k} of {FULL.n_routed_experts} experts plus "
    f"{FULL.n_shared_experts} shared; one dense network in layer 0), each step with its equation filled in with "
    "this token's numbers from the live model.",
    f"compare layer {DEFAULT_LAYER} ({KINDS[cfg.layer_types[DEFAULT_LAYER]]}) with layer {NEXT_MLA} (gated MLA), then "
    "click an earlier token in part 4–5 to see which router scores the loss would raise.",
)
view = state.page(*ui.PROMPT, ui.TOKEN, state.Int("layer", DEFAULT_LAYER, "layer", lo=0, hi=LAST),
                  state.Choice("part", "attention", "part of the layer", options=tuple(ly.VIEWS)))
prompt = ui.prompt_input(view)
if prompt is None:
    st.stop()
pieces = list(prompt.pieces)


def step_layer(delta: int) -> None:
    view.set("layer", min(max(view["layer"] + delta, 0), LAST))


def pick_token(t: int) -> None:
    view.set("token", t)


def pick_part(part: str) -> None:
    view.set("part", part)


def shapes_table(shapes) -> str:
    rows = ["| tensor | live model | K3 | K3's value is |", "|---|---|---|---|"]
    rows += [f"| {s.name} | {s.here} | {s.k3} | {s.how} |" for s in shapes]
    return "\n".join(rows)


def equations(step: Step) -> None:
    """The step's equation, then the same filled in with this token's numbers: one LaTeX block (`\\\\` in a
    step's LaTeX breaks the line), so a step costs the browser one formula element, not two."""
    st.caption(f"The equation ({step.cite}), then the same with this token's numbers (computed):")
    st.latex(r"\begin{gathered}" + step.equation + r" \\[10pt] \textsf{this token:}\quad " + step.filled
             + r"\end{gathered}")


def draw(step: Step, n: int) -> None:
    with st.container(border=True):
        st.markdown(f"**{n}. {step.title}**")
        left, right = st.columns([11, 9], gap="medium")
        with left:
            ui.vega_chart(step_figure(step.key, step.data, pieces), step.caption, alt=f"Step {n}: {step.title}",
                          key=f"layer_{step.part}_{step.key}")
        with right:
            st.markdown(step.text)
            st.markdown(shapes_table(step.shapes))
        equations(step)


@st.fragment
def inside() -> None:
    T = len(prompt.ids)
    chips = chip_labels(pieces)
    token = ui.token_index(view, prompt.ids, st.pills, "Token: click one to follow it down the layer",
                           list(range(T)), format_func=chips.__getitem__,
                           help=ui.TOKEN_HELP)
    c_layer, c_prev, c_next = st.columns([8, 1, 1], vertical_alignment="bottom")
    with c_layer:
        layer = view.draw(st.slider, "layer", "Layer",
                          help="0-based, as in the code: MLA at 3, 7, 11, … 91 and 92; layer 0's FFN is dense")
    c_prev.button("Back", icon=":material/chevron_left:", key="layer_prev", on_click=step_layer, args=(-1,),
                  width="stretch", disabled=layer == 0, help="previous layer")
    c_next.button("Next", icon=":material/chevron_right:", key="layer_next", on_click=step_layer, args=(1,),
                  width="stretch", disabled=layer == LAST, help="next layer")
    n, first, last = block_of(layer, cfg)
    kind = cfg.layer_types[layer]
    ffn = f"dense SiTU-GLU FFN (hidden {cfg.dense_hidden})" if not cfg.is_moe(layer) else "Stable LatentMoE"
    st.markdown(f"**Layer {layer}** (position {layer + 1} of {cfg.num_layers}): {KINDS[kind]}, then {ffn}; AttnRes "
                f"block {n} (layers {first}–{last}). K3's layer {layer} is the same kind: the live instance keeps "
                f"K3's schedule, with {SCALE_SHORT} (d = {cfg.d_model} here, {FULL.d_model:,} in K3).")
    st.caption("Labels: **computed** numbers come from the live tiny model's forward on this prompt; K3's shapes "
               "are **published** in its config, or **derived** from published values as the table says.")

    with st.spinner(f"Reading layer {layer} from the live model's trace…"):
        forward(prompt.ids)
        data = ly.cached_layer(prompt.ids, layer)
    steps = ly.walk(data, token, cfg, pieces)
    part = view.draw(st.segmented_control, "part", "Show the steps of",
                     format_func=lambda v: ly.VIEWS[v][0],
                     help="the table lists every step; the steps of the part you pick are drawn below it in full")
    shown = set(ly.VIEWS[part][1])
    grad = None
    if "learn" in shown and data.moe and T > 1:
        with st.spinner("Backpropagating the prompt's next-token loss through the live model (once per prompt)…"):
            loss, grads = ly.cached_gradients(prompt.ids)
        grad = gradient_step(data, token, loss, grads[layer], cfg)
    gradient_note = (grad.headline if grad is not None else "no router in layer 0" if not data.moe
                     else "needs two tokens" if T < 2 else "pick part 4–5 (one backward pass per prompt)")
    with st.expander("The whole layer at a glance: every step, one computed number each", expanded=True):
        st.markdown(ly.layer_map(steps, shown, gradient_note))
        st.caption("▶ marks the steps drawn in full below; \"Show the steps of\" above picks which.")

    current = None
    for i, step in enumerate(steps, 1):
        if step.part not in shown:
            continue
        if step.part != current:
            current = step.part
            st.subheader(PART_TITLES[current])
        draw(step, i)

    if "learn" in shown:
        st.subheader(PART_TITLES["learn"])
        if not data.moe:
            st.info(f"Layer 0 has no router: its FFN is dense, so there is nothing to learn about routing here. Pick "
                    f"a layer from 1 to {LAST}.", icon=":material/info:")
        elif T < 2:
            st.info("The next-token loss needs at least two tokens: type a longer prompt.", icon=":material/info:")
        elif token == T - 1:
            st.info(grad.text, icon=":material/info:")
            st.button(f"Follow token {T - 2} (“{chips[T - 2]}”) instead", key="layer_earlier",
                      on_click=pick_token, args=(T - 2,), icon=":material/undo:", type="primary")
        else:
            draw(grad, len(steps) + 1)

    views = list(ly.VIEWS)
    if part != "all" and views.index(part) + 1 < len(views) - 1:
        nxt = views[views.index(part) + 1]
        st.button(f"Next: {ly.VIEWS[nxt][0]}", key="layer_next_part", on_click=pick_part, args=(nxt,),
                  icon=":material/arrow_downward:")


inside()
