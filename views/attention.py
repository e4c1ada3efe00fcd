"""Hybrid attention & memory: a fixed-size KDA state beside a growing MLA cache, and what it saves."""
import numpy as np
import streamlit as st

from app import live as lv_mod
from app import state, ui
from app.attention import (
    CONTEXTS,
    cache_caption,
    cached_decode_counts,
    cached_spec,
    cached_trajectory,
    compression_planes,
    decode_caption,
    decode_heading,
    decode_spinner,
    designs,
    lead,
    memory_caption,
    memory_note,
    metric_caption,
    metric_label,
    mla_cache_rows,
    mla_measured_caption,
    read_so_far,
    stack_alt,
    stack_caption,
    state_caption,
)
from app.charts.attention import cache_spec, state_spec
from app.text import fmt_bytes, fmt_int, fmt_tokens, token_text
from model import memory
from model.config import K3Config

full = K3Config.full()
tiny = K3Config.tiny()
DECODE_STEPS = 3
KDA_LAYERS = [i for i, t in enumerate(tiny.layer_types) if t == "kda"]
MLA_LAYERS = [i for i, t in enumerate(tiny.layer_types) if t == "mla"]
view = state.page(
    *ui.PROMPT,
    # this page's own position in the prompt (how far the model has read), not the token the other pages share
    state.Index("read", None, "tokens read so far"),
    state.Choice("kda", 44, "KDA layer", options=tuple(KDA_LAYERS)),
    state.Int("head", 0, "KDA head", lo=0, hi=tiny.kda_heads - 1),
    state.Choice("mla", 47, "MLA layer", options=tuple(MLA_LAYERS)),
    state.Choice("ctx", 2 ** 20, "context length", options=tuple(CONTEXTS)),
    state.Int("batch", 1, "batch size", lo=1, hi=256),
    prefix="att",
)
ui.page_header(
    "Hybrid attention & memory",
    lead(full),
    "move the token slider and watch the KDA state change while its size stays put, and the MLA cache "
    "grow by one row per token.",
)

st.subheader("The 3:1 stack")
ui.vega_chart(cached_spec("stack", st.context.theme.type), stack_caption(full), alt=stack_alt(full),
              key="att_stack")

# ---- live: state vs cache --------------------------------------------------------------------------
@st.fragment
def live_section() -> None:
    st.subheader("Live: a state that stays the same size beside a cache that grows")
    lv = lv_mod.live()
    cfg = lv.model.cfg
    prompt = ui.prompt_input(view)
    if prompt is not None:
        T = len(prompt.ids)
        c1, c2, c3 = st.columns(3)
        kda_layer = view.draw(c1.select_slider, "kda", "KDA layer")
        head = view.draw(c2.segmented_control, "head", "KDA head", list(range(cfg.kda_heads)),
                         format_func=lambda h: f"head {h}")
        mla_layer = view.draw(c3.select_slider, "mla", "MLA layer")
        token = (view.draw(st.select_slider, "read", "Tokens read so far", list(range(1, T + 1)),
                           options=range(1, T + 1), default=T, follow=True) if T > 1 else 1)
        st.caption("Reading: " + " ".join(f"`{token_text(p)}`" if i < token else "·" for i, p in
                                           enumerate(prompt.pieces[:token + 8])) + (" …" if T > token + 8 else ""))

        with st.spinner("Running the live model and replaying the KDA layer token by token…"):
            out = lv_mod.forward(prompt.ids)
            traj = cached_trajectory(prompt.ids, kda_layer)
        states = traj.states[:, head]                                        # [T, d_k, d_v]
        zmax = float(np.abs(states).max()) or 1.0
        rows = mla_cache_rows(out, mla_layer)
        left, right = st.columns(2)
        with left:
            ui.vega_chart(state_spec(states[token - 1], zmax, f"KDA layer {kda_layer}, head {head}: state after "
                                     f"{read_so_far(token)}"),
                          state_caption(cfg, token),
                          alt="Heatmap of one KDA head's key-by-value state matrix after the chosen token.", key="att_state")
            kda_numel = out.cache.layers[kda_layer].numel()
            st.caption(f"Whole layer, measured from its cache object: **{fmt_int(kda_numel)} values** "
                       f"({cfg.kda_heads} heads x {cfg.kda_head_dim} x {cfg.kda_head_dim} state + "
                       f"{fmt_int(memory.kda_conv_values(cfg))} conv tail), the same for 1 token or 1M. "
                       f"Check: the last state of this token-by-token replay equals the state the prefill's "
                       f"chunked kernel left in the cache (max difference {traj.final_error:.1e}).")
        with right:
            ui.vega_chart(cache_spec(rows, token, cfg.kv_lora_rank, list(prompt.pieces),
                                     f"MLA layer {mla_layer}: latent cache after {read_so_far(token)}",
                                     st.context.theme.type),
                          cache_caption(cfg, full, token),
                          alt="Heatmap of an MLA layer's latent cache, one row per token read so far.", key="att_cache")
            st.caption(mla_measured_caption(cfg, out.cache.layers[mla_layer].numel(), T))

        st.markdown(decode_heading(DECODE_STEPS))
        with st.spinner(decode_spinner(cfg, DECODE_STEPS)):
            counts, new_ids = cached_decode_counts(prompt.ids, DECODE_STEPS)
        names = {"KDA values (measured)": "KDA measured", "KDA values (accounting)": "KDA accounting",
                 "MLA values (measured)": "MLA measured", "MLA values (accounting)": "MLA accounting",
                 "seconds": "step (s)", "matches": "equal"}
        ui.table(counts.rename(columns=names), {name: ",d" for name in list(names.values())[:4]} | {"step (s)": ".2f"})
        st.caption(decode_caption(cfg, int(counts["KDA values (measured)"].iloc[0]))
                   + " The greedy decode continued the prompt with: "
                   + " ".join(f"`{token_text(p)}`" for p in lv.tokenizer.pieces(new_ids)))

live_section()

# ---- memory vs context at K3 scale -----------------------------------------------------------------
@st.fragment
def memory_section() -> None:
    st.subheader("Memory vs context length at K3 scale")
    c1, c2 = st.columns(2)
    context = view.draw(c1.select_slider, "ctx", "Context length (tokens)", format_func=fmt_tokens)
    batch = view.draw(c2.slider, "batch", "Batch (sequences decoded together)")
    laws = designs(full)
    ui.vega_chart(cached_spec("memory", st.context.theme.type, context, batch), memory_caption(full, batch),
                  alt="Log-log chart of decode-cache bytes against context length for K3's hybrid, all-MLA and all-MHA.",
                  key="att_memory")
    for col, (name, law) in zip(st.columns(3), laws.items()):
        b = law.nbytes(context, batch)
        col.metric(metric_label(name, context), fmt_bytes(b),
                   help=f"computed: {batch} x ({fmt_int(law.fixed)} fixed + {fmt_int(law.per_token)} per token x "
                        f"{fmt_int(context)}) values x 2 bytes")
        col.caption(metric_caption(name, context, batch, full))
    st.caption(memory_note(full))

memory_section()

# ---- the four compression planes -------------------------------------------------------------------
st.subheader("The four compression planes")
planes = compression_planes(full)
ui.vega_chart(cached_spec("planes", st.context.theme.type),
              "What each mechanism cuts, computed from the configs: the bar is 1 − after / before, the label gives "
              "the two numbers. Two rows per plane where the commonly quoted figure and the per-unit figure differ.",
              alt="Horizontal bars: share cut by KDA, MLA, Block AttnRes and latent dispatch, with before and after values.",
              key="att_planes")
for plane, part in planes.groupby("plane", sort=False):
    st.markdown(f"**{plane}.** " + " ".join(dict.fromkeys(part["explanation"])))
