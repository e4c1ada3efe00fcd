"""Data behind the Hybrid attention & memory page: the 3:1 stack, the live KDA state beside the live
MLA latent cache, measured cache sizes, memory vs context at K3 scale and the four compression planes.

Pure functions first (they take a model and a forward output, or a config); the thin cached wrappers
for the page sit at the end of the file.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st
import torch

from app.text import fmt_bytes, fmt_int, fmt_tokens
from model import memory
from model.attnres import link_count, vectors_alive
from model.config import K3Config
from model.k3 import K3Model, K3Output
from model.kda import kda_recurrent

CONTEXTS = [2 ** k for k in range(21)]          # 1 .. 1,048,576 tokens, the slider's stops
# What the "rope" slice of MLA's cache is in K3: kept at its published width but never rotated.
KEY_SLICE = "rope-sized, but never rotated: K3 puts no positional encoding on its MLA layers, K3 report sec 2.1.2"


# ---- the 3:1 stack --------------------------------------------------------------------------------

def schedule(cfg: K3Config) -> pd.DataFrame:
    """One row per layer, placed in a grid: column = repeating unit of four layers, row = position in
    it (0-2 KDA, 3 MLA); the final MLA (layer 92) opens a 24th unit of its own."""
    per_token, fixed = memory.mla_values_per_token(cfg), memory.kda_layer_values(cfg)
    rows = []
    for i, kind in enumerate(cfg.layer_types):
        keeps = (f"keeps a fixed {fmt_int(fixed)} values, its state and conv tail (whatever the context)"
                 if kind == "kda" else f"caches {fmt_int(per_token)} values per token (grows with the context)")
        name = "Kimi Delta Attention" if kind == "kda" else "gated MLA"
        rows.append({"layer": i, "kind": kind.upper(), "unit": i // 4, "slot": i % 4,
                     "where": f"layer {i} (position {i + 1} of {cfg.num_layers})", "name": name, "keeps": keeps})
    return pd.DataFrame(rows)


# ---- live state vs live cache ---------------------------------------------------------------------

def kda_layer_input(model: K3Model, out: K3Output, layer: int) -> torch.Tensor:
    """The input x [1, T, d] the KDA layer saw in this forward (its AttnRes read, then the pre-norm),
    as the trace recorded it."""
    if model.cfg.layer_types[layer] != "kda":
        raise ValueError(f"layer {layer} is not a KDA layer")
    return out.trace.module_input(layer, "attn")


@dataclass(frozen=True)
class StateTrajectory:
    states: np.ndarray      # [T, H, d_k, d_v] the recurrent state after each token
    final_error: float      # max |last state - the state the prefill left in the layer's cache|


def kda_state_trajectory(model: K3Model, out: K3Output, layer: int) -> StateTrajectory:
    """Re-run the layer's recurrent kernel one token at a time on the inputs it saw, keeping the
    state after every token. The prefill itself ran the chunked kernel; the last state must match."""
    with torch.inference_mode():
        x = kda_layer_input(model, out, layer)
        q, k, v, g, beta = model.layers[layer].attn.kernel_inputs(x)     # q, k, g [1,T,H,dk]; v [1,T,H,dv]
        S, states = None, []
        for t in range(x.shape[1]):
            sl = slice(t, t + 1)
            _, S = kda_recurrent(q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl], initial_state=S)
            states.append(S[0])                                          # [H, dk, dv]
        traj = torch.stack(states).float()                               # [T, H, dk, dv]
        cached = out.cache.layers[layer].state[0].float()
        err = (traj[-1] - cached).abs().max().item()
    return StateTrajectory(traj.numpy(), err)


def mla_cache_rows(out: K3Output, layer: int) -> np.ndarray:
    """The MLA layer's cache as the prefill left it: one row per token, [latent c ; k_rope]."""
    c = out.cache.layers[layer]
    if not hasattr(c, "latent"):
        raise ValueError(f"layer {layer} is not an MLA layer")
    return torch.cat([c.latent[0], c.k_rope[0]], -1).float().numpy()    # [T, kv_lora + rope]


def decode_counts(model: K3Model, out: K3Output, steps: int = 3) -> tuple[pd.DataFrame, list[int]]:
    """Element counts of the real cache objects after the prefill and after each greedy decode step,
    beside what the accounting (model/memory.py) predicts for that many tokens."""
    cfg = model.cfg
    rows, new_ids = [], []
    cache, logits, dt = out.cache, out.logits, None
    for step in range(steps + 1):
        want = memory.predicted_numel(cfg, cache.length)
        rows.append({"stage": "prefill (the page's cached forward, not timed)" if step == 0 else f"decode step {step}",
                     "tokens": cache.length,
                     "KDA values (measured)": cache.numel("kda"), "KDA values (accounting)": want["kda"],
                     "MLA values (measured)": cache.numel("mla"), "MLA values (accounting)": want["mla"],
                     "seconds": math.nan if dt is None else dt})            # a number column: NaN, not None
        if step == steps:
            break
        nxt = logits[:, -1].argmax(-1, keepdim=True)                     # [1, 1] greedy next token
        new_ids.append(int(nxt))
        t0 = time.perf_counter()
        with torch.inference_mode():
            step_out = model(nxt, cache=cache, record=False)
        dt = time.perf_counter() - t0
        cache, logits = step_out.cache, step_out.logits
    df = pd.DataFrame(rows)
    df["matches"] = ((df["KDA values (measured)"] == df["KDA values (accounting)"])
                     & (df["MLA values (measured)"] == df["MLA values (accounting)"]))
    return df, new_ids


# ---- memory vs context at K3 scale ----------------------------------------------------------------

def designs(cfg: K3Config) -> dict[str, memory.CacheLaw]:
    return {"K3 hybrid": memory.hybrid(cfg), "all MLA": memory.all_mla(cfg), "all MHA": memory.all_mha(cfg)}


def context_grid(max_tokens: int = 2 ** 20, per_octave: int = 8) -> np.ndarray:
    octaves = int(np.log2(max_tokens))
    grid = np.unique(np.round(2.0 ** (np.arange(octaves * per_octave + 1) / per_octave)).astype(np.int64))
    return grid                                                           # ends exactly at max_tokens


def memory_curves(cfg: K3Config, batch: int = 1, bytes_per_value: int = memory.BF16) -> pd.DataFrame:
    T = context_grid(cfg.context_length)
    return pd.DataFrame([{"tokens": int(t), "design": name, "bytes": law.nbytes(int(t), batch, bytes_per_value)}
                         for name, law in designs(cfg).items() for t in T])


def crossovers(cfg: K3Config, batch: int = 1, bytes_per_value: int = memory.BF16) -> pd.DataFrame:
    """Where the hybrid, with its fixed KDA states, becomes smaller than each all-attention stack."""
    d = designs(cfg)
    rows = []
    for other in ("all MLA", "all MHA"):
        t = memory.crossover(d["K3 hybrid"], d[other])
        if t is not None:
            rows.append({"versus": other, "tokens": t, "bytes": d[other].nbytes(t, batch, bytes_per_value)})
    return pd.DataFrame(rows)


# ---- the four compression planes ------------------------------------------------------------------

def compression_planes(cfg: K3Config | None = None, k2: K3Config | None = None) -> pd.DataFrame:
    """Each plane's before -> after, computed from the configs; `cut` = 1 - after / before."""
    cfg, k2 = cfg or K3Config.full(), k2 or K3Config.kimi_k2()
    mla_tok, mha_tok = memory.mla_values_per_token(cfg), memory.mha_values_per_token(cfg)
    fixed = memory.kda_layer_values(cfg)
    L, n_kda, n_mla = cfg.num_layers, cfg.n_kda, cfg.n_mla
    N = len(cfg.attnres_blocks)
    full_vec, block_vec = vectors_alive(L, None), vectors_alive(L, cfg.attnres_block_size)
    full_links, block_links = link_count(L, None, 2, True), link_count(L, cfg.attnres_block_size, 2, True)
    d, w = cfg.d_model, cfg.expert_width
    rows = [
        ("KDA state", f"cache growth per token in the {n_kda} KDA layers (vs MLA there)",
         n_kda * mla_tok, 0, "values per token",
         f"A KDA layer keeps no per-token cache (K3 report Eq. 1, sec 2.1.1), so growth is cut 100%, but it is not "
         f"free: each layer keeps a "
         f"fixed state of {fmt_int(memory.kda_state_values(cfg))} values ({cfg.kda_heads} heads x "
         f"{cfg.kda_head_dim} x {cfg.kda_head_dim}) plus a {fmt_int(memory.kda_conv_values(cfg))}-value conv "
         f"tail, {fmt_int(fixed)} values per layer; all {n_kda} KDA layers together keep {fmt_int(n_kda * fixed)} "
         f"values, {fmt_bytes(memory.BF16 * n_kda * fixed)} per sequence at bf16, "
         f"as much as the MLA cache of those layers at "
         f"{memory.crossover(memory.hybrid(cfg), memory.all_mla(cfg)):,.0f} tokens."),
        ("MLA latent", "cache per token per attention layer (vs MHA with the same heads)",
         mha_tok, mla_tok, "values per token per layer",
         f"MLA (DeepSeek-V2, arXiv 2405.04434) caches the {cfg.kv_lora_rank}-value latent plus the "
         f"{cfg.qk_rope_dim}-value key slice shared by the heads ({mla_tok}; {KEY_SLICE}) instead of a key and value "
         f"per head (2 x {cfg.mla_heads} x {cfg.v_head_dim} = {fmt_int(mha_tok)}): a {1 - mla_tok / mha_tok:.1%} cut "
         "in every layer that caches."),
        ("MLA latent", f"layers with a growing cache ({n_kda}:{n_mla} hybrid vs {L} attention layers)",
         L, n_mla, "layers",
         f"The '75%' quoted for MLA (claim 6 on the Claims page) is this: only {n_mla} of {L} layers cache at "
         f"all, 1 - {n_mla}/{L} = "
         f"{1 - n_mla / L:.1%}. It comes from the 3:1 KDA:MLA ratio (the saving Kimi Linear, arXiv 2510.26692, "
         "reports for its hybrid), not from MLA's compression."),
        ("Block AttnRes", f"layers per block ({L} layers grouped into {N} blocks)", L, N, "(layers → blocks)",
         f"{L} / {N} = {L / N:.1f} layers per block: the ratio quoted as '11.6x' (claim 7 on the Claims page). It "
         f"counts layers, not anything a token keeps. What is kept is the next row: as K3 runs it (two modules "
         f"per layer, an output read), Full AttnRes would keep {full_vec} vectors per token alive and Block keeps "
         f"{block_vec} (embedding + {N - 1} sealed blocks + the partial sum), {full_vec / block_vec:.1f}x fewer "
         f"vectors kept. A third ratio, links read per token with two reads per layer and the output read "
         f"({fmt_int(full_links)} → {fmt_int(block_links)}, {full_links / block_links:.1f}x fewer links), is on the "
         "Attention Residuals page (K3 report Eq. 8-10, sec 2.2)."),
        ("Block AttnRes", "vectors kept alive per token, as K3 runs it (Full vs Block)", full_vec, block_vec,
         "vectors per token",
         "The Attention Residuals page shows the vectors kept for every block size, at K3 scale and in the live "
         "instance."),
        ("Latent dispatch", "values sent per routed copy of a token", d, w, "values per copy",
         f"Each of a token's {cfg.top_k} routed copies travels at the latent width {fmt_int(w)} instead of "
         f"{fmt_int(d)}: half the bytes per copy."),
        ("Latent dispatch", f"values a token sends to its experts (K2: {k2.top_k} x {fmt_int(k2.expert_width)})",
         k2.top_k * k2.expert_width, cfg.top_k * w, "values per token",
         f"But K3 sends each token to {cfg.top_k} experts instead of K2's {k2.top_k}: "
         f"{cfg.top_k} x {fmt_int(w)} = {fmt_int(cfg.top_k * w)} = {k2.top_k} x {fmt_int(k2.expert_width)}, "
         f"the same volume per token as K2. 'Halves dispatch' holds per copy, not per token."),
    ]
    df = pd.DataFrame(rows, columns=["plane", "comparison", "before", "after", "unit", "explanation"])
    df["cut"] = 1 - df["after"] / df["before"]
    df["ratio"] = df["before"] / df["after"].where(df["after"] > 0)
    return df


# ---- the page's sentences: every number computed, every count in words that follow its controls ------

def tokens(n: int) -> str:
    """A token count for people: '1 token', '2 tokens', '1M tokens', '2,923 tokens'."""
    n = int(n)
    shown = fmt_tokens(n) if n in CONTEXTS else fmt_int(n)
    return f"{shown} token{'' if n == 1 else 's'}"


def rows(n: int) -> str:
    return f"{fmt_int(n)} row{'' if n == 1 else 's'}"


def times(value: float, reference: float, name: str = "the hybrid") -> str:
    """How many times `reference` `value` is, written for people: '3.9x the hybrid', '0.76x the hybrid',
    '1/2,168 of the hybrid' (never '0.0x')."""
    r = value / reference
    if r >= 10:
        return f"{r:,.0f}x {name}"
    if r >= 0.995:
        return f"{r:.1f}x {name}"
    if r >= 0.1:
        return f"{r:.2f}x {name}"
    return f"1/{1 / r:,.0f} of {name}"


def lead(cfg: K3Config) -> str:
    per_token = memory.mla_values_per_token(cfg)
    T = cfg.context_length
    hybrid, mla = memory.hybrid(cfg).nbytes(T), memory.all_mla(cfg).nbytes(T)
    return (f"Kimi K3 gives **{cfg.n_kda} of its {cfg.num_layers} layers** a fixed-size memory (Kimi Delta Attention) "
            f"and only **{cfg.n_mla}** a cache that grows with the text (gated MLA, itself compressed to "
            f"{per_token} values per token in each layer; K3 report sec 2.1, Table 1). At {fmt_int(T)} tokens one "
            f"sequence's caches take {fmt_bytes(hybrid)} at bf16, where a stack of {cfg.num_layers} MLA layers would "
            f"take {fmt_bytes(mla)} (computed below).")


def stack_caption(cfg: K3Config) -> str:
    return (f"Read down each column: three Kimi Delta Attention layers, then one gated MLA layer, {cfg.n_mla - 1} "
            f"times, plus a final MLA ({cfg.n_kda} KDA + {cfg.n_mla} MLA = {cfg.num_layers}, from the config; K3 report "
            "sec 2.1). Hover a square for what that layer keeps between tokens at K3 scale.")


def stack_alt(cfg: K3Config) -> str:
    units = cfg.n_mla - 1
    return (f"Grid of K3's {cfg.num_layers} layers: {units} columns of four (three KDA layers, then one MLA layer) "
            f"and a last column holding the final MLA layer.")


def read_so_far(n: int) -> str:
    """How far the model has read, as a count (the page's "Tokens read so far"), never a position."""
    return f"{n:,} token{'s' if n != 1 else ''} read"


def state_caption(cfg: K3Config, token: int) -> str:
    """The live state's caption: its size after the token the slider picks, the same after every token."""
    dk = cfg.kda_head_dim
    return (f"{dk} x {dk} = {dk * dk} values after {read_so_far(token)}, as after every token: each token decays the rows "
            "(forgets, channel by channel) and writes a correction (the delta rule, K3 report Eq. 1, sec 2.1.1). One "
            "colour scale for every token, so colours compare across the slider.")


def cache_caption(cfg: K3Config, full: K3Config, token: int) -> str:
    """The live MLA cache's caption: the rows written after the token the slider picks."""
    width = memory.mla_values_per_token(cfg)
    return (f"One row of {width} values per token ({cfg.kv_lora_rank} latent + {cfg.qk_rope_dim} key slice shared by "
            f"the heads, {KEY_SLICE}); {rows(token)} so far, {fmt_int(width * token)} values. At K3 scale a row is "
            f"{memory.mla_values_per_token(full)} values.")


def mla_measured_caption(cfg: K3Config, numel: int, T: int) -> str:
    return (f"Measured from the cache object after the whole prompt: **{fmt_int(numel)} values** = {tokens(T)} x "
            f"{memory.mla_values_per_token(cfg)}.")


def decode_heading(steps: int) -> str:
    return (f"**Measured: the live model's caches after the prefill and {steps} decode "
            f"step{'' if steps == 1 else 's'}**")


def decode_spinner(cfg: K3Config, steps: int) -> str:
    return f"Decoding {steps} token{'' if steps == 1 else 's'} with all {cfg.num_layers} layers…"


def decode_caption(cfg: K3Config, kda_values: int) -> str:
    per_token = memory.mla_values_per_token(cfg)
    return (f"Every measured value is `numel()` of the real cache objects (K3Cache), beside the accounting of "
            f"model/memory.py for that many tokens. The {cfg.n_kda} KDA caches together stay at {fmt_int(kda_values)} "
            f"values; the {cfg.n_mla} MLA caches grow by {cfg.n_mla} x {per_token} = {fmt_int(cfg.n_mla * per_token)} "
            "values per token.")


PRECISION = ("bf16 (2 bytes per value; this page's choice: the K3 report does not give the precision of its "
             "caches)")


def memory_caption(cfg: K3Config, batch: int) -> str:
    cross = crossovers(cfg, batch)
    return ("Cache bytes that must stay in memory to decode the next token, computed by the accounting that the "
            "tests check against the live model's cache objects, at " + PRECISION + ". The hybrid starts above zero "
            f"(its {cfg.n_kda} fixed KDA states) and then grows {cfg.num_layers / cfg.n_mla:.1f}x slower than all-MLA "
            f"(only {cfg.n_mla} of {cfg.num_layers} layers cache); it needs less than "
            + " and less than ".join(f"{r.versus} from {tokens(math.floor(r.tokens) + 1)} on" for r in cross.itertuples())
            + ". Batch scales every line alike, so the crossovers do not move.")


def metric_label(name: str, context: int) -> str:
    return f"{name} at {tokens(context)}"


def metric_caption(name: str, context: int, batch: int, cfg: K3Config) -> str:
    laws = designs(cfg)
    law, hybrid = laws[name], laws["K3 hybrid"]
    if name == "K3 hybrid":
        return f"{fmt_int(batch * law.fixed)} fixed + {fmt_int(batch * law.per_token * context)} growing values"
    return times(law.nbytes(context, batch), hybrid.nbytes(context, batch))


def memory_note(cfg: K3Config) -> str:
    state, layer = memory.kda_state_values(cfg), memory.kda_layer_values(cfg)
    return (f"Computed from K3's published config at {PRECISION}. A KDA state kept in fp32, as this project's "
            f"model/kda.py keeps it, doubles the states: {fmt_int(state)} of each KDA layer's {fmt_int(layer)} fixed "
            "values (the conv tail is the rest). Weights and activations are not included.")


# ---- cached wrappers for the page (one computation per prompt and choice) -------------------------

@st.cache_data(max_entries=64, show_spinner=False)
def cached_trajectory(ids: tuple[int, ...], layer: int) -> StateTrajectory:
    from app.live import computing, forward, live
    model, out = live().model, forward(ids)
    with computing():
        return kda_state_trajectory(model, out, layer)


@st.cache_data(max_entries=32, show_spinner=False)
def cached_decode_counts(ids: tuple[int, ...], steps: int = 3) -> tuple[pd.DataFrame, list[int]]:
    from app.live import computing, forward, live
    model, out = live().model, forward(ids)
    with computing():
        return decode_counts(model, out, steps)


@st.cache_resource(max_entries=64, show_spinner=False)
def cached_spec(name: str, theme_type: str | None, *args) -> dict:
    """Vega-Lite specs that depend only on the config, the theme (the colour of their text) and a few control
    values, built once per process. st.vega_lite_chart and ui.vega_chart copy a spec before changing it, so
    sharing one is safe."""
    from app.charts import attention as charts
    full = K3Config.full()
    if name == "stack":
        return charts.stack_spec(schedule(full), theme_type)
    if name == "planes":
        return charts.planes_spec(compression_planes(full), theme_type)
    if name == "memory":
        context, batch = args
        return charts.memory_spec(memory_curves(full, batch), crossovers(full, batch), context, batch, theme_type)
    raise ValueError(f"no chart named {name}")
