"""Routing explorer: which 16 of the 896 experts each token uses, layer by layer, and what happens
when the routing is changed. Every value comes from the live model's trace.

The prompt is drawn by a full run; everything below it is three fragments, one inside the other: the explorer
(the token chips and the re-routing controls that change what the panel shows: dense, the knock-out and force
lists, reset) holds the results (top-k, the bias, the scope, and everything that follows the token and the
re-routing: the sparsity, what the re-routing changed, the fingerprint), which hold the layer view (the
layer's controls, grid, linked view and expert panel). A top-k key, the bias or the scope reruns the results,
a token chip too (by a keyed rerun), a layer key or an expert click only the layer view (and the results when a
re-routing starts at the layer); dense, the lists and reset rerun the explorer."""
import time
from dataclasses import dataclass
from typing import Any

import streamlit as st

from app import lessons_ui, state, ui
from app import routing as rt
from app import routing_text as words
from app.assets import AssetError
from app.charts.routing import fingerprint_table
from app.live import forward, live
from app.parallel import shard_note
from app.routing_cache import heldout, heldout_ready, heldout_soon, heldout_table, layer_run, prefetch_neighbours
from app.routing_sparsity import sparsity
from app.routing_view import build_ahead, layer_ahead, layer_view_of, marks_of, run_view
from app.text import chip_label, chip_labels, md_escape

lv = live()
cfg = lv.model.cfg
E, LAST = cfg.n_routed_experts, cfg.num_layers - 1
DEFAULT_LAYER = 46
SHARD_NOTE = shard_note()       # the 8 bands are the article's illustration; K3's experts need at least 11 H200s
ui.page_header(
    "Routing explorer",
    "In every layer but the first, a router scores all **896 experts** for each token and sends the "
    "token to the best **16** of them (plus 2 shared experts every token uses); change the routing "
    "here and the live model re-runs, so you see what the choice does downstream.",
    "click a token chip, then click a glowing square to see which other tokens that expert serves; "
    "then knock it out and watch the next-token prediction move.",
)
view = state.page(
    *ui.PROMPT, ui.TOKEN,
    state.Int("layer", DEFAULT_LAYER, "layer", lo=0, hi=LAST),
    state.Int("k", cfg.top_k, "top-k", lo=1, hi=rt.MAX_TOP_K),
    state.Flag("bias", True, "balancing-bias"),
    state.Flag("dense", False, "dense"),
    state.Ints("ko", [], "knocked-out experts", lo=0, hi=E - 1, most=rt.MAX_LISTED),
    state.Ints("force", [], "forced experts", lo=0, hi=E - 1, most=rt.MAX_LISTED, ordered=True),
    state.Choice("scope", "from", "scope", options=tuple(rt.SCOPES)),
    state.Choice("colour", "probability", "colouring", options=tuple(rt.COLOURINGS)),
    state.Int("expert", None, "expert", lo=0, hi=E - 1),
    state.Flag("play", False, "play", link=False),
)
if view["layer"] > 0:           # the expert panel's held-out table comes last: routed meanwhile, while the page draws
    heldout_soon()
prompt = ui.prompt_input(view)
if prompt is None:
    st.stop()


# ---- callbacks: what a button does to the view ------------------------------------------------------------
# Three fragments, each inside the one before: EXPLORER (the token chips; dense, the knock-out and force lists,
# reset: what changes the re-routing panel itself) holds RESULTS (top-k, the bias, the scope, and all that follows
# the token and the re-routing), which holds LAYER_VIEW (the layer's controls, grid, linked view and expert panel).
# A control reruns the smallest of them that holds everything it changes: a top-k key redraws neither the 64
# token chips nor the panel's other controls (same-run A/B: ~60-70 ms of the browser's ~430 ms per key). A
# callback that changes what an outer fragment shows reruns that one by its key (a keyed rerun costs one more,
# empty run first, ~15-25 ms, so a fragment's own controls live in it).
EXPLORER, RESULTS, LAYER_VIEW = "routing_explorer", "routing_results", "routing_layer_view"


def current_settings() -> tuple[rt.Rerouting, list[str]]:
    """The re-routing the controls ask for, checked against the config (with notes on what was changed)."""
    return rt.normalise(rt.Rerouting(view["k"], view["bias"], view["dense"], tuple(view["ko"]), tuple(view["force"]),
                                     view["scope"]), cfg)


def rerouted_now() -> bool:
    return current_settings()[0].override(cfg) is not None


def layer_moved() -> None:
    """A re-routing starts at the viewed layer, so what it changed (drawn by the results, with the sparsity)
    moves with the layer: rerun the results. Without one, the layer view reruns alone (its own widgets)."""
    if rerouted_now():
        st.rerun(RESULTS)


def token_moved() -> None:
    """Everything that follows the token is in the results; the chips themselves are already drawn."""
    st.rerun(RESULTS)


def step_layer(delta: int) -> None:
    view.set("layer", min(max(view["layer"] + delta, 0), LAST))
    layer_moved()


def on_play() -> None:
    if view["play"] and view["layer"] >= LAST:
        view.set("layer", 1)                              # start over from the first MoE layer
        layer_moved()


def reset_routing() -> None:
    view.reset("k", "bias", "dense", "ko", "force", "scope")


def knock_out(expert: int) -> None:
    view.set("expert", expert)           # the panel stays on this expert (else it follows the token's first one)
    view.set("ko", sorted(set(view["ko"]) | {expert}))
    view.set("force", [e for e in view["force"] if e != expert])
    st.rerun(EXPLORER)                   # the re-routing panel shows the lists: the whole explorer reruns


def force(expert: int) -> None:
    view.set("expert", expert)           # the panel stays on this expert (else it follows the token's first one)
    view.set("force", [e for e in view["force"] if e != expert] + [expert])
    view.set("ko", [e for e in view["ko"] if e != expert])
    st.rerun(EXPLORER)


def restore(expert: int) -> None:
    view.set("expert", expert)           # the panel stays on this expert (else it follows the token's first one)
    view.set("ko", [e for e in view["ko"] if e != expert])
    view.set("force", [e for e in view["force"] if e != expert])
    st.rerun(EXPLORER)


def grid_clicked() -> None:
    clicked = rt.expert_from_selection(st.session_state.get("routing_grid"))
    if clicked is not None:
        view.set("expert", clicked)


@st.fragment(key=EXPLORER)
def explorer(prompt) -> None:
    """The token chips and the re-routing panel's list controls, and the results inside (everything that follows
    the token and the re-routing)."""
    T = len(prompt.ids)
    chips = chip_labels(prompt.pieces)
    ui.token_index(view, prompt.ids, st.pills, "Token: click one to follow it through the layers", list(range(T)),
                   format_func=chips.__getitem__, help=ui.TOKEN_HELP, on_change=token_moved)
    nav = st.container()                                  # the layer's controls (the layer view's)
    left, right = st.columns([7, 4], gap="medium")
    with right:
        with st.container(border=True):
            st.markdown("**Re-route the model**")
            view.draw(st.toggle, "dense", "Dense: light every expert", help=words.DENSE_HELP)
            routing_top = st.container()                      # top-k and the bias (the results')
            view.draw_ids("ko", f"Knock out experts (ids 0–{E - 1})", placeholder="e.g. 12, 40; or click a square "
                          "and use the panel below", help="ids separated by commas or spaces; Enter applies")
            view.draw_ids("force", f"Force experts: always chosen (ids 0–{E - 1})", placeholder="e.g. 7",
                          help="ids separated by commas or spaces; Enter applies. With more of them than top-k, the "
                               "first ones are kept")
            routing_scope = st.container()                    # the scope (the results')
            if not st.session_state.get(ui.K_PRESENT):          # it explains the controls, which presenter mode hides
                st.caption("The change applies to every token of the prompt. Layers before the one you view keep "
                           "their routing, so the model re-runs only from this layer on (from layer 1 when you view "
                           "layer 0). \"This layer only\" shows the knock-on effect: later layers route differently "
                           "because their input changed.")
            st.button("Reset routing", key="routing_reset", on_click=reset_routing, icon=":material/restart_alt:")
            said = st.container()                             # the settings in words, and notes (the results')
    sparsity = st.container()                  # full width under both columns: no empty area left of it
    boxes = Boxes(nav, left, routing_top, routing_scope, said, sparsity, *(st.container() for _ in range(4)))
    results(prompt, boxes)


@dataclass(frozen=True)
class Boxes:
    """The explorer's containers that the results and the layer view draw into."""
    nav: Any
    left: Any
    routing_top: Any
    routing_scope: Any
    said: Any
    sparsity: Any
    shares: Any
    outcome: Any
    below: Any
    fingerprint: Any


@st.fragment(key=RESULTS)
def results(prompt, boxes: Boxes) -> None:
    """Top-k, the bias and the scope, and everything that follows the token and the re-routing: the layer view,
    the sparsity, what the re-routing changed, the fingerprint. The token and the settings are read from the
    view, since a token chip reruns this alone (its arguments are those of the explorer's last run)."""
    token = view["token"]
    piece = prompt.pieces[token]
    layer = view["layer"]
    with boxes.routing_top:
        view.draw(st.slider, "k", "Experts per token (top-k)", disabled=view["dense"])
        view.draw(st.toggle, "bias", "Balancing bias (selection only)",
                  help="Quantile Balancing's bias is added to the scores to pick experts; the output "
                       "weights always use the raw scores")
    with boxes.routing_scope:
        scope = view.draw(st.radio, "scope", "Apply the change at", format_func=rt.SCOPES.get,
                          horizontal=True)
    settings, notes = current_settings()
    with boxes.said:
        if st.session_state.get(ui.K_PRESENT):            # the controls are hidden: say what they are set to
            st.markdown("  \n".join(settings.describe(cfg)))        # our words and numbers only
        for n in notes:
            st.warning(n, icon=":material/rule:")

    cards = words.sparsity_cards(sparsity(settings, layer, cfg))
    with boxes.sparsity:
        st.markdown("**Sparsity with these settings** (computed by the parameter accounting)")
        c_k, c_w, c_a = st.columns(3, gap="medium")
    for col, label, (value, help_, caption) in ((c_k, "Experts per token", cards.experts),
                                                (c_w, "Expert weights used", cards.weights),
                                                (c_a, "Active parameters per token at K3 scale", cards.active)):
        with col:
            st.metric(label, value, help=help_)
            st.caption(caption)
    boxes.shares.caption(cards.shares)

    plan, base, run = layer_run(prompt.ids, layer, settings)
    with boxes.outcome:
        st.subheader("What the re-routing changed")
        c_changed, c_pred = st.columns(2, gap="medium")
        with c_changed:                    # always the chart (kept in the browser), empty until something changes
            if plan is None:
                note, caption = words.unchanged_note(settings.override(cfg) is not None)
                start = LAST + 1                                              # no rows
            else:
                note, start = None, plan[0]

            rv = run_view(base, run, token, start, note, st.context.theme.type, plan is not None)
            if plan is not None:
                caption = words.changed_caption(rv.diff, plan[0], scope)
            # what a lesson's question may be read from: this student's own re-routing of their own sentence
            lessons_ui.publish("rerouted_layers", words.rerouted_layers(rv.diff) if plan is not None else 0)
            ui.vega_chart(rv.changed, caption,
                          alt="Bar chart of changed expert choices per layer for the chosen token.", key="routing_changed")
        with c_pred:
            ui.vega_chart(rv.predictions,
                          f"The live model's five most likely next tokens after “{chip_label(piece)}”, with the model's "
                          "own routing (left) and with your re-routing (right"
                          + (")." if plan is not None else ": the same until you change the routing)."),
                          alt="Two bar charts of the top-5 next-token probabilities before and after re-routing.",
                          key="routing_predictions")

    with boxes.fingerprint:
        st.subheader(f"The routing fingerprint of “{chip_label(piece)}”")
        # the spec only (its image is ~0.2 MB); the CSV's numbers are read again from the run if asked for
        ui.vega_chart(rv.fingerprint,
                      f"Each row is one of the {len(cfg.moe_layers)} mixture-of-experts layers, each column one of the {E} "
                      "experts; grey is the router's probability, the coloured cells are the experts the token used "
                      "(your re-routing included): point at a row for that layer's chosen experts, most probable "
                      "first (every cell's number is in the CSV). The pattern changes from layer to layer: each "
                      "layer has its own router and its own experts.",
                      alt="Heatmap of router probability over layers and experts for the chosen token, chosen experts marked.",
                      key="routing_fingerprint", table=lambda: fingerprint_table(*rt.fingerprint(run, token)))
    # last, into the containers above: its own slowest part, the held-out table, ends it
    layer_view(prompt, token, settings, boxes.nav, boxes.left, boxes.below)


@st.fragment(key=LAYER_VIEW)
def layer_view(prompt, token: int, settings: rt.Rerouting, nav, left, below):
    """What follows the layer (and the expert in the panel): the layer's controls, its grid, the linked view
    and the expert panel, drawn into the explorer's containers with the token and the re-routing the
    results passed. The results draw it last, and its own slowest part (the held-out table) comes last in it, so
    that on a fresh server the charts are not kept waiting for the held-out routing."""
    T = len(prompt.ids)
    piece = prompt.pieces[token]
    with nav:
        layer = view.draw(st.slider, "layer", "Layer", on_change=layer_moved,
                          help="0 is the dense layer; 1–92 are mixture-of-experts layers")
        c_prev, c_next, c_play, c_colour = st.columns([2, 2, 2, 5], vertical_alignment="bottom")
        c_prev.button("Back", icon=":material/chevron_left:", key="routing_prev", help="previous layer",
                      on_click=step_layer, args=(-1,), width="stretch", disabled=layer == 0)
        c_next.button("Next", icon=":material/chevron_right:", key="routing_next", help="next layer",
                      on_click=step_layer, args=(1,), width="stretch", disabled=layer == LAST)
        with c_play:
            view.draw(st.toggle, "play", "Play", on_change=on_play,
                      help="step the token through the layers, about one per second")
        with c_colour:
            colour_by = view.draw(st.segmented_control, "colour", "Colour the grid by",
                                  format_func={"probability": "probability", "load": "load"}.get,
                                  help="the router's probability for this token, or how many tokens of "
                                       "the whole prompt chose each expert")
        plan, base, run = layer_run(prompt.ids, layer, settings)     # its spinner under the layer's controls

    grid = expert = None
    with left:
        if layer == 0:
            st.info("**Layer 0 is dense**: every token uses the whole feed-forward network (one SiTU-GLU, hidden "
                    f"{cfg.dense_hidden} here, 33,792 in K3), so there is no router and no expert to choose. "
                    "Move the layer slider to 1–92 to see the 896 experts.", icon=":material/info:")
        else:
            lv_ = layer_view_of(prompt, run, layer, token, marks_of(settings, layer), colour_by, view.get("expert"))
            grid, expert = lv_.grid, lv_.expert
            said = words.grid_text(grid, layer, colour_by, SHARD_NOTE)
            st.container(key="routing_grid_title").markdown(f"**Layer {layer}: the experts of “{chip_label(piece)}”**")
            ui.vega_chart(lv_.grid_spec, said.caption, alt=said.alt, key="routing_grid", on_select=grid_clicked,
                          selection_mode="pick")
            st.container(key="routing_grid_chosen").caption(said.chosen)

    held_slot = None
    with below:
        if layer > 0:
            st.subheader(f"Which tokens does each expert serve? Layer {layer}, point and see")

            st.vega_lite_chart(ui.arrow_spec(lv_.linked), width="content", key="routing_linked")
            st.caption("Point at a square: the tokens of your prompt that chose that expert light up; point at a "
                       "token: its experts are outlined. Your browser answers this alone, without asking the server, "
                       "so it is instant. Colour: how many of the prompt's tokens chose each expert here (with your "
                       "re-routing).")

        if expert is not None:
            st.subheader(f"Expert {expert} at layer {layer}")
            view.draw_number("expert", f"Expert in the panel, 0–{E - 1} (or click a square in the grid)",
                             value=expert)      # the token's first expert here, until one is picked
            st.markdown(words.expert_line(grid, expert, T))
            with st.container(horizontal=True):          # one block, where columns would be five
                st.button(f"Knock out {expert}", key="routing_knock", on_click=knock_out, args=(expert,),
                          disabled=expert in settings.knocked_out, icon=":material/block:")
                st.button(f"Force {expert}", key="routing_force_one", on_click=force, args=(expert,),
                          disabled=expert in settings.forced, icon=":material/push_pin:")
                st.button(f"Restore {expert}", key="routing_restore", on_click=restore, args=(expert,),
                          disabled=expert not in settings.knocked_out + settings.forced, icon=":material/undo:")
            t1, t2 = st.columns(2, gap="medium")
            with t1:
                st.markdown("**Tokens of the prompt that score it highest**")
                st.markdown(lv_.prompt_table)
            held_slot = t2.empty()
            held_slot.caption("Routing the held-out sample…")
            st.caption("Held-out text: a 3 KB sample of the validation split (Python docstrings, a manual page, source "
                       "code) that the model never trained on, routed with the model's own settings. Tokens that share "
                       "an expert show what it specialises in — often a kind of word piece or a position in code.")

    # from the model's own routing, the first nudge's answer, computed while the server is idle, and what the page
    # would show of it
    if layer > 0 and not view["play"] and plan is None:
        picked, theme = view.get("expert"), st.context.theme.type
        near = [layer_ahead(prompt, token, n, colour_by, picked) for n in (layer + 1, layer - 1) if 1 <= n <= LAST]
        prefetch_neighbours(prompt.ids, layer, settings, expert,
                               then=build_ahead(prompt, token, layer, colour_by, picked, theme),
                               first=near[:1], last=near[1:])

    if held_slot is not None:                       # last: it waits for the held-out routing on a fresh server
        with held_slot.container():
            try:
                if heldout_ready():
                    held = heldout()
                else:
                    with st.spinner("Routing the held-out sample once (about 1,000 tokens, a few seconds)…"):
                        held = heldout()
            except AssetError as e:                 # the rest of the page does not need it
                held = None
                st.caption(f":material/block: The held-out text is unavailable: {md_escape(str(e), 200)}.")
            if held is not None:
                st.markdown(words.heldout_heading(held, layer, expert))
                st.markdown(heldout_table(layer, expert))
    if view["play"]:
        time.sleep(1.0)
        if layer < LAST:
            view.set("layer", layer + 1)
        else:
            view.set("play", False)
        # with a re-routing, what it changed (the results') follows the layer too
        st.rerun(scope="app" if plan is not None else "fragment")


with st.spinner("Running the live model on the prompt (93 layers)…"):
    forward(prompt.ids)
explorer(prompt)
