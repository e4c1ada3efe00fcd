"""Hybrid attention & memory: a fixed-size KDA state beside a growing MLA cache, and what it saves."""
import numpy as np
import streamlit as st

from app import live as lv_mod
from app import state, ui
from app.attention import (CONTEXTS, cached_decode_counts, cached_spec, cached_trajectory, compression_planes,
                           crossovers, designs, mla_cache_rows)
from app.charts.attention import cache_spec, state_spec
from app.text import fmt_bytes, fmt_int, fmt_tokens, token_text
from model import memory
from model.config import K3Config

full = K3Config.full()
tiny = K3Config.tiny()
KDA_LAYERS = [i for i, t in enumerate(tiny.layer_types) if t == "kda"]
MLA_LAYERS = [i for i, t in enumerate(tiny.layer_types) if t == "mla"]
view = state.page(
    *ui.PROMPT, ui.TOKEN,
    state.Choice("kda", 44, "KDA layer", options=tuple(KDA_LAYERS)),
    state.Int("head", 0, "KDA head", lo=0, hi=tiny.kda_heads - 1),
    state.Choice("mla", 47, "MLA layer", options=tuple(MLA_LAYERS)),
    state.Choice("ctx", 2 ** 20, "context length", options=tuple(CONTEXTS)),
    state.Int("batch", 1, "batch size", lo=1, hi=256),
    prefix="att",
)
ui.page_header(
    "Hybrid attention & memory",
    f"Kimi K3 gives **{full.n_kda} of its {full.num_layers} layers** a fixed-size memory (Kimi Delta Attention) and "
    f"only **{full.n_mla}** a cache that grows with the text (gated MLA, itself compressed to "
    f"{memory.mla_values_per_token(full)} values per token), which is how a million-token context fits.",
    "move the token slider and watch the KDA state change while its size stays put, and the MLA cache "
    "grow by one row per token.",
)

st.subheader("The 3:1 stack")
ui.vega_chart(cached_spec("stack", st.context.theme.type),
              f"Read down each column: three Kimi Delta Attention layers, then one gated MLA layer, {full.n_mla - 1} "
              f"times, plus a final MLA ({full.n_kda} KDA + {full.n_mla} MLA = {full.num_layers}, from the config). "
              "Hover a square for what that layer keeps between tokens at K3 scale.",
              alt="Grid of K3's 93 layers, 24 columns of four: three KDA layers then one MLA layer per column.",
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
        kda_layer = view.draw(c1.select_slider, "kda", "KDA layer", KDA_LAYERS)
        head = view.draw(c2.segmented_control, "head", "KDA head", list(range(cfg.kda_heads)),
                         format_func=lambda h: f"head {h}")
        mla_layer = view.draw(c3.select_slider, "mla", "MLA layer", MLA_LAYERS)
        token = 1 + (ui.token_index(view, prompt.ids, st.select_slider, "Tokens read so far", list(range(T)),
                                    format_func=lambda i: str(i + 1)) if T > 1 else 0)
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
                                     f"token {token}"),
                          f"{cfg.kda_head_dim} x {cfg.kda_head_dim} = {cfg.kda_head_dim ** 2} values after token 1 and after "
                          f"token {T}: each token decays the rows (forgets) and writes a correction (delta rule). "
                          "One colour scale for every token, so colours compare across the slider.",
                          alt="Heatmap of one KDA head's key-by-value state matrix after the chosen token.", key="att_state")
            kda_numel = out.cache.layers[kda_layer].numel()
            st.caption(f"Whole layer, measured from its cache object: **{fmt_int(kda_numel)} values** "
                       f"({cfg.kda_heads} heads x {cfg.kda_head_dim} x {cfg.kda_head_dim} state + "
                       f"{fmt_int(memory.kda_conv_values(cfg))} conv tail), the same for 1 token or 1M. "
                       f"Check: the last state of this token-by-token replay equals the state the prefill's "
                       f"chunked kernel left in the cache (max difference {traj.final_error:.1e}).")
        with right:
            ui.vega_chart(cache_spec(rows, token, cfg.kv_lora_rank, list(prompt.pieces),
                                     f"MLA layer {mla_layer}: latent cache after token {token}", st.context.theme.type),
                          f"One row of {rows.shape[1]} values per token ({cfg.kv_lora_rank} latent + {cfg.qk_rope_dim} "
                          f"rope-slice); {token} rows so far, {rows.shape[1] * token} values. At K3 scale a row is "
                          f"{memory.mla_values_per_token(full)} values.",
                          alt="Heatmap of an MLA layer's latent cache, one row per token read so far.", key="att_cache")
            st.caption(f"Measured from the cache object after the whole prompt: **{fmt_int(out.cache.layers[mla_layer].numel())} "
                       f"values** = {T} tokens x {memory.mla_values_per_token(cfg)}.")

        st.markdown("**Measured: the live model's caches after the prefill and three decode steps**")
        with st.spinner("Decoding three tokens with all 93 layers…"):
            counts, new_ids = cached_decode_counts(prompt.ids)
        names = {"KDA values (measured)": "KDA measured", "KDA values (accounting)": "KDA accounting",
                 "MLA values (measured)": "MLA measured", "MLA values (accounting)": "MLA accounting",
                 "seconds": "step (s)", "matches": "equal"}
        ui.table(counts.rename(columns=names), {name: ",d" for name in list(names.values())[:4]} | {"step (s)": ".2f"})
        st.caption(f"Every value is `numel()` of the real cache objects (K3Cache), beside the accounting of "
                   f"model/memory.py for that many tokens. The {cfg.n_kda} KDA caches stay at "
                   f"{fmt_int(counts['KDA values (measured)'].iloc[0])} values; the {cfg.n_mla} MLA caches grow by "
                   f"{cfg.n_mla} x {memory.mla_values_per_token(cfg)} = {cfg.n_mla * memory.mla_values_per_token(cfg)} "
                   "values per token. The greedy decode continued the prompt with: "
                   + " ".join(f"`{token_text(p)}`" for p in lv.tokenizer.pieces(new_ids)))

live_section()

# ---- memory vs context at K3 scale -----------------------------------------------------------------
@st.fragment
def memory_section() -> None:
    st.subheader("Memory vs context length at K3 scale")
    c1, c2 = st.columns(2)
    context = view.draw(c1.select_slider, "ctx", "Context length (tokens)", CONTEXTS, format_func=fmt_tokens)
    batch = view.draw(c2.slider, "batch", "Batch (sequences decoded together)", 1, 256)
    laws = designs(full)
    cross = crossovers(full, batch)
    ui.vega_chart(cached_spec("memory", st.context.theme.type, context, batch),
                  "Cache bytes (bf16) that must stay in memory to decode the next token, computed by the accounting "
                  "that the tests check against the live model's cache objects. The hybrid starts above zero (its "
                  f"{full.n_kda} fixed KDA states) and then grows {full.num_layers / full.n_mla:.1f}x slower than all-MLA (only "
                  f"{full.n_mla} of {full.num_layers} layers cache); it is smaller from "
                  + " and ".join(f"{r.tokens:,.0f} tokens against {r.versus}" for r in cross.itertuples())
                  + ". Batch scales every line alike, so the crossovers do not move.",
                  alt="Log-log chart of decode-cache bytes against context length for K3's hybrid, all-MLA and all-MHA.",
                  key="att_memory")
    for col, (name, law) in zip(st.columns(3), laws.items()):
        b = law.nbytes(context, batch)
        col.metric(f"{name} at {fmt_tokens(context)} tokens", fmt_bytes(b),
                   help=f"computed: {batch} x ({fmt_int(law.fixed)} fixed + {fmt_int(law.per_token)} per token x "
                        f"{fmt_int(context)}) values x 2 bytes")
        col.caption(f"{b / laws['K3 hybrid'].nbytes(context, batch):,.1f}x the hybrid" if name != "K3 hybrid"
                    else f"{fmt_int(batch * law.fixed)} fixed + {fmt_int(batch * law.per_token * context)} growing values")
    st.caption("Computed from K3's published config (bf16, 2 bytes per value). A KDA state kept in fp32, as some "
               "implementations do, doubles the fixed part only. Weights and activations are not included.")

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
