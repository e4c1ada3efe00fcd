"""Attention Residuals: each layer attends over the outputs of earlier layers instead of adding them."""
import streamlit as st

from app import live as lv_mod
from app import state, ui
from app.attnres import (
    VIEWS,
    affordability_note,
    boundary_rows,
    cached_spec,
    count_table,
    depth_matrix,
    depth_memory,
    full_forward,
    growth_note,
    link_series,
    ratios_note,
    retrieval,
)
from app.charts.attnres import depth_heatmap_spec, retrieval_spec
from app.text import chip_labels, fmt_bytes, fmt_int, token_text
from model.attnres import block_sizes, vectors_alive
from model.config import K3Config

full = K3Config.full()
L = full.num_layers
view = state.page(
    *ui.PROMPT, ui.TOKEN,
    state.Choice("view", "per-layer", "count", options=tuple(VIEWS)),
    state.Int("bs", full.attnres_block_size, "block size", lo=1, hi=L),
    state.Choice("mode", "Block", "AttnRes mode", options=("Block", "Full")),
    state.Int("reader", 50, "reading layer", lo=1, hi=L - 1),
    state.Int("source", 12, "earlier layer", lo=0, hi=L - 2),
    state.Choice("module", "attn", "read", options=("attn", "ffn")),
    prefix="ar",
)
ui.page_header(
    "Attention Residuals",
    "K3 has no `h + f(h)`: before every module, a token **attends over depth**, mixing earlier outputs by a "
    "softmax of a learned query against them (K3 report Eq. 8-10, sec 2.2); Block AttnRes sums the layers of a "
    f"block and groups the {L} layers into {len(full.attnres_blocks)} blocks of up to {full.attnres_block_size}, "
    f"so that only {vectors_alive(L, full.attnres_block_size)} vectors per token stay alive instead of "
    f"{vectors_alive(L, None)} (computed).",
    f"drag the block size to 1: counting one read per layer, Block's links equal Full's, yet it keeps "
    f"{vectors_alive(L, 1)} vectors, not {vectors_alive(L, None)}, since a one-layer block still sums its attention "
    f"and FFN outputs; then drag it to {L}, one block, where every read after the first chooses only between the "
    "embedding and the running sum; then move the reading layer below and see how much it still reads from an early layer.",
)

# ---- link counts -----------------------------------------------------------------------------------
st.subheader("How many links does depth attention cost?")
c1, c2 = st.columns([3, 2])
count_view = view.draw(c1.segmented_control, "view", "Count", format_func=lambda v: VIEWS[v]["label"])
bs = view.draw(c2.slider, "bs", "Block size (layers per block)")
series = link_series(bs, count_view)
ui.vega_chart(cached_spec("links", bs, count_view, L, theme_type=st.context.theme.type),
              "A link is one candidate source in one read. " + growth_note(bs, count_view)
              + " Closed forms from model/depth_counts.py. "
              + affordability_note(full),
              alt="Log-log chart of AttnRes links per token against depth for Full and Block AttnRes, L = 93 marked.",
              key="ar_links")
at93 = series[series["layers"] == L].iloc[0]
m1, m2, m3 = st.columns(3)
m1.metric(f"Full AttnRes at L = {L}", fmt_int(int(at93["Full"])), help="computed: closed form")
m2.metric(f"Block AttnRes at L = {L}", fmt_int(int(at93["Block"])),
          help=f"computed: closed form, blocks {block_sizes(L, bs)}")
m3.metric("Full / Block links", f"{at93['Full'] / at93['Block']:.1f}x",
          help="derived: the ratio of the two link counts, not of layers per block or of vectors kept (see below)")

st.caption(f"The three numbers above count {VIEWS[count_view]['label']}, as the Count control is set; switch it "
           "to see the other count. Computed per token, every read counted (a read with one candidate is one link). "
           + ("One read per layer counts as K3 report Eq. 8-9 are written (one output f_i per layer)."
              if count_view == "per-layer" else
              "K3 runs two reads per layer (before attention, before the FFN, as the report's Fig. 2 draws them) plus "
              f"one before the LM head: {2 * L + 1} reads in all.")
           + " " + ratios_note(full))
counts_box = st.container()      # filled below: the live counts need the prompt, which sits further down
lv = lv_mod.live()
prompt_box = st.container()
with prompt_box:
    st.subheader("Where each read looks: one token's depth-attention weights")
    prompt = ui.prompt_input(view)
live_block = live_full = None
if prompt is not None:
    with st.spinner("Running the live model with Block and with Full AttnRes…"):
        out_block = lv_mod.forward(prompt.ids)
        out_full = full_forward(prompt.ids)
    live_block, live_full = out_block.trace.link_count, out_full.trace.link_count

table = count_table(count_view, bs, L, live_block if bs == lv.model.cfg.attnres_block_size else None, live_full)
counted = ("Counted three ways: closed form, the real bookkeeping, the live model" if count_view == "two-reads" else
           "Counted two ways: closed form and the real bookkeeping (the live model counts two reads per layer)")
with counts_box, st.expander(counted, expanded=True):
    ui.table(table, {"Full": ",d", "Block": ",d"})
    st.caption("The live model runs two reads per layer plus the output read, so its trace gives the "
               f"two-reads count (Block from the live instance, blocks of {lv.model.cfg.attnres_block_size}; Full from "
               "the same weights run with `attnres=\"full\"`): set Count to \"two reads per layer + output\" for "
               "its row. The per-layer view is counted by the same DepthState code with one module per layer. All "
               "rows must agree."
               + ("" if bs == lv.model.cfg.attnres_block_size else
                  f" The live instance was trained with blocks of {lv.model.cfg.attnres_block_size}, so it has "
                  f"no live Block count for blocks of {bs}."))

with prompt_box:
    if prompt is not None:
        T = len(prompt.ids)
        chips = chip_labels(prompt.pieces)                # the whole width: a long prompt's chips wrap, not clip
        token = ui.token_index(view, prompt.ids, st.pills, "Token: click one to see its reads over depth",
                               list(range(T)), format_func=chips.__getitem__, help=ui.TOKEN_HELP)
        mode = view.draw(st.segmented_control, "mode", "AttnRes",
                         format_func={"Block": "Block (the live model)", "Full": "Full (same weights)"}.get)
        out = out_block if mode == "Block" else out_full
        z, rows, cols = depth_matrix(out, token)
        bsize = lv.model.cfg.attnres_block_size
        ui.vega_chart(depth_heatmap_spec(z, rows, cols, boundary_rows(rows, bsize),
                                         boundary_rows(cols, bsize) if mode == "Full" else [],
                                         f"Token at position {token} “{token_text(prompt.pieces[token])}”: {len(rows)} reads x "
                                         f"{len(cols)} sources"),
                      ("Each row is one read (before that module runs) and sums to 1 over its sources. In Block mode the "
                       "columns are the embedding, the sealed blocks and the running partial sum of the current block, "
                       "so the 'partial' column means a different block in each band. " if mode == "Block" else
                       f"Each row is one read and sums to 1; in Full mode every module output is its own source. The two "
                       f"numbers in the title coincide but count different things: {2 * L + 1} reads (one before each of "
                       f"the {2 * L} modules and one before the head) and {2 * L + 1} sources (the embedding and every "
                       "module output). "
                       "These queries were trained for Block sources, so the Full weights show what the same weights do "
                       "over per-module sources, not what a Full-trained model would learn. ")
                      + f"Dotted lines: block boundaries (every {bsize} layers).",
                      alt="Heatmap of depth-attention weights: rows are reads, columns are the sources each read sees.",
                      key="ar_heatmap")
        st.caption(f"Token shown: `{token_text(prompt.pieces[token])}`, at position {token} of 0–{T - 1} (positions "
                   "count from 0, like layers and experts).")

# ---- retrieval -------------------------------------------------------------------------------------
@st.fragment
def retrieval_section() -> None:
    heading = st.empty()                     # filled once the sliders below are read: it names their layers
    if prompt is None:
        reader, source = view["reader"], view["source"]
        heading.subheader(f"Can layer {reader} retrieve what layer {min(source, reader - 1)} computed?")
        st.info("Type a prompt above to ask the live model.", icon=":material/edit_note:")
    else:
        c1, c2, c3 = st.columns([5, 5, 4])
        reader = view.draw(c1.slider, "reader", "Reading layer")
        source = view.draw(c2.slider, "source", "Earlier layer")
        module = view.draw(c3.segmented_control, "module", "Read",
                           format_func={"attn": "before attention", "ffn": "before FFN"}.get)
        if source >= reader:
            why = "it is the reading layer itself" if source == reader else "it runs later"
            st.info(f"Layer {reader} cannot read layer {source} as an earlier layer: {why}. Showing layer "
                    f"{reader - 1}, the last one before it.", icon=":material/info:")
            source = reader - 1
        heading.subheader(f"Can layer {reader} retrieve what layer {source} computed?")
        read = f"L{reader}.{module}"
        profiles = {"Full": retrieval(out_full, read, token), "Block": retrieval(out_block, read, token)}
        ui.vega_chart(retrieval_spec(profiles, source, reader, st.context.theme.type),
                      f"How much of each earlier layer's output the read before layer {reader}'s "
                      f"{'attention' if module == 'attn' else 'FFN'} mixes in, for the token at position {token}"
                      + ("" if module == "attn" else
                         f" (before the FFN, layer {reader}'s own attention output is a source too, drawn at {reader})")
                      + ". Full: the softmax weights "
                      "of that layer's two outputs, read with the live model's queries, which were trained for Block sources. "
                      "Block: the weight of the source that holds the layer, times the layer's share of that source. That "
                      "share (its module-output norms over all the norms summed in the source) is this app's own heuristic, "
                      "not something the model computes: a read cannot separate the layers summed in one block. The "
                      "embedding gets the rest.",
                      alt="Line chart of the weight each earlier layer's output receives in one read, Full vs Block.",
                      key="ar_retrieval")
        f_row = profiles["Full"].set_index("layer").loc[source]
        b_row = profiles["Block"].set_index("layer").loc[source]
        c1, c2 = st.columns(2)
        with c1.container(border=True):
            st.metric(f"Full: weight of layer {source}'s outputs", f"{f_row['weight']:.4f}",
                      help="computed: the read's softmax weights of L.attn and L.ffn, summed")
            st.caption(f"Layer {source} is kept as its own two sources ({f_row['source']}); layer {reader} can "
                       f"address it directly. Uniform would be {2 / (1 + 2 * reader + (module == 'ffn')):.4f}. The queries "
                       "are the live model's, trained for Block sources: this shows what those weights do over Full's "
                       "sources, not what a model trained with Full AttnRes would read.")
        with c2.container(border=True):
            st.metric(f"Block: weight reaching layer {source}", f"{b_row['weight']:.4f}",
                      help="derived: the source's softmax weight (computed by the model) x the layer's norm share "
                           "(this app's heuristic, not the model's)")
            st.caption(f"Layer {source} sits in **{b_row['source']}**, which gets weight {b_row['source weight']:.4f}; "
                       f"layer {source} is {b_row['share']:.1%} of it by this app's norm-share heuristic (its output "
                       "norms over all the norms summed there; the model computes no such split). The read cannot separate layer "
                       f"{source} from the other layers summed in that source.")

retrieval_section()

# ---- memory ----------------------------------------------------------------------------------------
st.subheader("Memory kept alive per token: O(L d) vs O(N d)")
ui.vega_chart(cached_spec("vectors", L, bs, full.d_model, theme_type=st.context.theme.type),
              f"Full AttnRes keeps the embedding and every module output until the last read: 2L + 1 = "
              f"{vectors_alive(L, None)} vectors per token. Block keeps the embedding, the sealed blocks and one "
              f"partial sum: N + 1 = {vectors_alive(L, bs)} at blocks of {bs}. Block size {L} is one block "
              "(2 vectors: almost a plain residual); block size 1 is one sum per layer.",
              alt="Vectors kept alive per token against the AttnRes block size, with Full AttnRes as a flat line.",
              key="ar_vectors")
k3_mem = depth_memory(L, bs, full.d_model).set_index("design")
live_mem = depth_memory(L, bs, lv.model.cfg.d_model, bytes_per_value=4).set_index("design")
c1, c2 = st.columns(2)
with c1.container(border=True):
    st.markdown(f"**K3 scale** (d = {fmt_int(full.d_model)}, bf16: this page's assumption)")
    for name in ("Full", "Block"):
        r = k3_mem.loc[name]
        st.metric(f"{name}, K3 scale: per token", fmt_bytes(r["bytes"]),
                  help=f"computed: {r['vectors']} vectors x {full.d_model} values x 2 bytes")
    st.caption(f"For a {fmt_int(full.context_length)}-token prefill held at once: Full "
               f"{fmt_bytes(k3_mem.loc['Full', 'bytes'] * full.context_length)}, Block "
               f"{fmt_bytes(k3_mem.loc['Block', 'bytes'] * full.context_length)} (computed). Decoding needs none "
               "of it across tokens: depth attention is per token.")
with c2.container(border=True):
    st.markdown(f"**Live instance** (d = {lv.model.cfg.d_model}, fp32)")
    for name in ("Full", "Block"):
        r = live_mem.loc[name]
        st.metric(f"{name}, live instance: per token", f"{fmt_int(r['values'])} values",
                  help=f"computed: {r['vectors']} vectors x {lv.model.cfg.d_model} values ({fmt_bytes(r['bytes'])} at fp32)")
    if prompt is not None:
        st.caption(f"Measured: the live model's output read saw {len(out_block.trace.reads[-1][2])} sources "
                   f"(Block, blocks of {lv.model.cfg.attnres_block_size}) and the Full variant's saw "
                   f"{len(out_full.trace.reads[-1][2])}."
                   + ("" if bs == lv.model.cfg.attnres_block_size else
                      f" The values above are computed for the block size you set ({bs}); the live instance runs "
                      f"blocks of {lv.model.cfg.attnres_block_size}."))
