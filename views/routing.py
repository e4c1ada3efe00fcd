"""Routing explorer: which 16 of the 896 experts each token uses, layer by layer, and what happens
when the routing is changed. Every value comes from the live model's trace."""
import time

import streamlit as st

from app import routing as rt
from app import routing_state as rs
from app import ui
from app.charts.routing import changed_figure, fingerprint_figure, grid_figure, predictions_figure
from app.live import banner, forward, live
from app.text import fmt_params

ui.ignore_unknown_params(rs.LINK_KEYS)
ui.page_header(
    "Routing explorer",
    "In every layer but the first, a router scores all **896 experts** for each token and sends the "
    "token to the best **16** of them (plus 2 shared experts every token uses); change the routing "
    "here and the live model re-runs, so you see what the choice does downstream.",
    "click a token chip, then click a glowing square to see which other tokens that expert serves; "
    "then knock it out and watch the next-token prediction move.",
)
lv = live()
banner(lv)
cfg = lv.model.cfg
E, LAST = cfg.n_routed_experts, cfg.num_layers - 1
for note in rs.start_state(cfg):
    st.info(note, icon=":material/link_off:")

prompt = ui.prompt_input()
if prompt is None:
    st.stop()
T = len(prompt.ids)
note = rs.place_token(prompt.ids)
if note:
    st.info(note, icon=":material/link_off:")
chips = rt.chip_labels(prompt.pieces)
token = st.pills("Token: click one to follow it through the layers", list(range(T)), key=rs.K_TOKEN,
                 format_func=chips.__getitem__,
                 help="␣ is a space, ↵ a line break; a token can be part of a word.")
if token is None:                                # the chip was clicked again: stay on the previous token
    token = min(st.session_state.get("routing_token_last", T - 1), T - 1)
st.session_state["routing_token_last"] = token
piece = prompt.pieces[token]

layer = st.slider("Layer", 0, LAST, key=rs.K_LAYER,
                  help="0 is the dense layer; 1–92 are mixture-of-experts layers")
c_prev, c_next, c_play, c_colour = st.columns([2, 2, 2, 5], vertical_alignment="bottom")
c_prev.button("Back", icon=":material/chevron_left:", key="routing_prev", help="previous layer",
              on_click=rs.step_layer, args=(-1, LAST), width="stretch")
c_next.button("Next", icon=":material/chevron_right:", key="routing_next", help="next layer",
              on_click=rs.step_layer, args=(1, LAST), width="stretch")
c_play.toggle("Play", key=rs.K_PLAY, on_change=rs.on_play, args=(LAST,),
              help="step the token through the layers, about one per second")
with c_colour:
    colour_by = st.segmented_control("Colour the grid by", list(rt.COLOURINGS), key=rs.K_COLOUR,
                                     format_func={"probability": "probability", "load": "load"}.get,
                                     help="the router's probability for this token, or how many tokens of "
                                          "the whole prompt chose each expert") or "probability"

with st.spinner("Running the live model on the prompt (93 layers)…"):
    base = forward(prompt.ids)

left, right = st.columns([7, 4], gap="medium")
with right, st.container(border=True):
    st.markdown("**Re-route the model**")
    dense = st.toggle("Dense: light every expert", key=rs.K_DENSE,
                      help="what a dense model of the same total size would compute: top-k = 896")
    top_k = st.slider("Experts per token (top-k)", 1, rt.MAX_TOP_K, key=rs.K_K, disabled=dense)
    use_bias = st.toggle("Balancing bias (selection only)", key=rs.K_BIAS,
                         help="Quantile Balancing's bias is added to the scores to pick experts; the output "
                              "weights always use the raw scores")
    knocked = st.multiselect("Knock out experts", list(range(E)), key=rs.K_KO, max_selections=rt.MAX_LISTED,
                             placeholder="pick ids, or click a square and use the panel below")
    forced = st.multiselect("Force experts (always chosen)", list(range(E)), key=rs.K_FORCE,
                            max_selections=rt.MAX_LISTED, placeholder="pick ids")
    scope = st.radio("Apply the change at", list(rt.SCOPES), key=rs.K_SCOPE, format_func=rt.SCOPES.get,
                     horizontal=True)
    st.caption("The change applies to every token of the prompt. Layers before the one you view keep their "
               "routing, so the model re-runs only from this layer on (from layer 1 when you view layer 0). "
               "\"This layer only\" shows the knock-on effect: later layers route differently because their "
               "input changed.")
    st.button("Reset routing", key="routing_reset", on_click=rs.reset_routing, icon=":material/restart_alt:")
    settings, notes = rt.normalise(rt.Rerouting(top_k, use_bias, dense, tuple(knocked), tuple(forced), scope), cfg)
    for n in notes:
        st.warning(n, icon=":material/rule:")

plan = settings.plan(layer, cfg)
new = None
if plan is not None:
    with st.spinner(f"Re-running layers {plan[0]}–{LAST} with the new routing…"):
        new = rt.rerouted(prompt.ids, layer, settings)
run = new if new is not None else base

rs.take_click()
with left:
    if layer == 0:
        st.info("**Layer 0 is dense**: every token uses the whole feed-forward network (one SiTU-GLU, hidden "
                f"{cfg.dense_hidden} here, 33,792 in K3), so there is no router and no expert to choose. "
                "Move the layer slider to 1–92 to see the 896 experts.", icon=":material/info:")
        expert = None
    else:
        if rs.K_EXPERT not in st.session_state:
            st.session_state[rs.K_EXPERT] = rt.chosen_at(run, layer, token)[0]
        expert = st.session_state[rs.K_EXPERT]
        ov = settings.applies_at(layer, layer, cfg)
        grid = rt.layer_grid(run, layer, token, ov.knocked_out if ov else (), ov.forced if ov else ())
        n_chosen = int(grid["chosen"].sum())
        ui.chart(grid_figure(grid, colour_by, expert, layer, f"“{rt.plot_label(piece)}”"),
                 f"Each square is one routed expert, 28 per row; each band of 4 rows (112 experts) is one of the "
                 f"8 shards an 8-device deployment would hold. The {n_chosen} outlined, glowing squares are the "
                 "experts this token uses here"
                 + (" (colour: the router's probability for this token)." if colour_by == "probability" else
                    " (colour: how many tokens of the whole prompt chose each expert).")
                 + " Hover for the numbers; click a square to open it in the expert panel below.",
                 alt=f"Grid of {E} experts at layer {layer}, {n_chosen} chosen for the selected token.",
                 key=rs.K_GRID, on_select="rerun", selection_mode="points", width="content")

with right:
    sp = rt.sparsity(settings, layer, cfg)
    st.markdown("**Sparsity with these settings** (computed by the parameter accounting)")
    m1 = m2 = st.container()
    m1.metric("Experts per token", f"{sp['k']} of {E}", help="routed experts a token visits in one layer")
    m1.caption(f"{sp['routed_share']:.1%} of the routed experts: sparsity {sp['sparsity']:.1f}x")
    m2.metric("Expert weights used", f"{sp['expert_share_live']:.1%}",
              help="per MoE layer: (k routed + 2 shared experts) / (896 routed + 2 shared experts). The live "
                   "instance's shared experts are relatively larger than K3's.")
    m2.caption(f"per layer, live instance; {sp['expert_share_full']:.1%} at K3 scale")
    st.metric("Active parameters per token at K3 scale", fmt_params(sp["full_active"]),
              help=f"K3's accounting with k = {sp['k']} in the {sp['layers']} layers this change applies to "
                   "and 16 elsewhere.")
    st.caption(f"{sp['full_active'] / sp['full_total']:.1%} of {fmt_params(sp['full_total'])} (published at "
               f"top-16: 104.2B of 2.78T, K3 report Table 1). Live instance: {fmt_params(sp['live_active'])} of "
               f"{fmt_params(sp['live_total'])} ({sp['live_active'] / sp['live_total']:.1%}); k = {sp['k']} in "
               f"{sp['layers']} re-routed layer{'' if sp['layers'] == 1 else 's'}.")

rs.write_url({"preset": st.session_state.get("prompt_preset") or "Prose", "text": prompt.text, "token": token,
              "layer": layer, "settings": settings, "colour": colour_by, "expert": expert})

st.subheader("What the re-routing changed")
c_changed, c_pred = st.columns(2, gap="medium")
with c_changed:
    if plan is None and settings.override(cfg) is not None:
        st.info("Your change applies to no layer: layer 0 is dense and has no router. Pick a layer from 1 to 92, "
                "or apply the change to this layer and every later one.", icon=":material/alt_route:")
    elif plan is None:
        st.info("Nothing is re-routed yet: change top-k, turn the bias off, knock out or force an expert, or "
                "go dense, and this shows how many of the token's experts change in each later layer.",
                icon=":material/alt_route:")
    else:
        diff = rt.changed_choices(base, run, token, plan[0])
        moved = int((diff["dropped"] > 0).sum())
        ui.chart(changed_figure(diff, int(diff["k_before"].iloc[0])),
                 f"Per layer from {plan[0]} on: how many of the experts this token used before the change are "
                 f"no longer chosen, and how many new ones are. {moved} of {len(diff)} layers route it differently"
                 + (" — the layers after the changed one too, because their input changed." if scope == "only" else "."),
                 alt="Bar chart of changed expert choices per layer for the chosen token.", key="routing_changed")
with c_pred:
    pieces_of = lv.tokenizer.pieces
    before, after = rt.top_predictions(base, token, pieces_of), rt.top_predictions(run, token, pieces_of)
    ui.chart(predictions_figure(before, after, [rt.plot_label(p) for p in before["piece"]],
                                [rt.plot_label(p) for p in after["piece"]], plan is not None),
             f"The live model's five most likely next tokens after “{rt.chip_label(piece)}”, with the model's own "
             "routing (left) and with your re-routing (right).",
             alt="Two bar charts of the top-5 next-token probabilities before and after re-routing.",
             key="routing_predictions")

if expert is not None:
    st.subheader(f"Expert {expert} at layer {layer}")
    st.selectbox("Expert in the panel (or click a square in the grid)", list(range(E)), key=rs.K_EXPERT)
    row = grid.iloc[expert]
    if row["chosen"]:
        line = (f"This token chose it (slot {row['slot'] + 1} of {n_chosen}) with output weight "
                f"{row['weight']:.4f}; router probability {row['prob']:.4f}.")
    else:
        line = ("This token did not choose it" + (": it is knocked out" if row["status"] == "knocked out" else "")
                + f"; it ranks {row['rank']} of {E} by biased score.")
    st.markdown(f"Shard {row['shard']}. {line} {row['load']} of the prompt's {T} tokens chose it here.")
    b1, b2, b3, _ = st.columns([2, 2, 2, 3])
    b1.button(f"Knock out {expert}", key="routing_knock", on_click=rs.knock_out, args=(expert,),
              disabled=expert in settings.knocked_out, icon=":material/block:")
    b2.button(f"Force {expert}", key="routing_force_one", on_click=rs.force, args=(expert,),
              disabled=expert in settings.forced, icon=":material/push_pin:")
    b3.button(f"Restore {expert}", key="routing_restore", on_click=rs.restore, args=(expert,),
              disabled=expert not in settings.knocked_out + settings.forced, icon=":material/undo:")
    t1, t2 = st.columns(2, gap="medium")
    prob_col = st.column_config.ProgressColumn("router probability", format="%.3f", min_value=0, max_value=1)
    with t1:
        st.markdown("**Tokens of the prompt that score it highest**")
        st.dataframe(rt.expert_on_prompt(run, layer, expert, list(prompt.pieces)), hide_index=True,
                     width="stretch", column_config={"router probability": prob_col})
    held_slot = t2.empty()                       # filled last, so the rest of the page is not kept waiting
    held_slot.caption("Routing the held-out sample…")
    st.caption("Held-out text: a 3 KB sample of the validation split (Python docstrings, a manual page, source "
               "code) that the model never trained on, routed with the model's own settings. Tokens that share "
               "an expert show what it specialises in — often a kind of word piece or a position in code.")

st.subheader(f"The routing fingerprint of “{rt.chip_label(piece)}”")
layers, probs, mask = rt.fingerprint(run, token)
ui.chart(fingerprint_figure(layers, probs, mask, layer if layer else None),
         f"Each row is one of the {len(layers)} mixture-of-experts layers, each column one of the {E} experts; "
         "colour is the router's probability, small squares mark the experts the token used (your re-routing "
         "included). The pattern changes from layer to layer: each layer has its own router and its own experts.",
         alt="Heatmap of router probability over layers and experts for the chosen token, chosen experts marked.",
         key="routing_fingerprint")

if expert is not None:
    with held_slot.container():
        with st.spinner("Routing the held-out sample once (about 1,000 tokens, a few seconds)…"):
            held = rt.heldout()
        i = held.layers.index(layer)
        st.markdown(f"**Held-out text that scores it highest** (chosen by {held.chosen_count[i, expert]} of "
                    f"{len(held.ids)} tokens here)")
        st.dataframe(rt.expert_on_heldout(held, layer, expert, pieces_of), hide_index=True, width="stretch",
                     column_config={"router probability": prob_col})

if st.session_state.get(rs.K_PLAY):
    time.sleep(1.0)
    if layer < LAST:
        rs.queue(rs.K_LAYER, layer + 1)
    else:
        rs.queue(rs.K_PLAY, False)
    st.rerun()
