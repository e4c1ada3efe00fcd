"""Inside one layer: one token followed through one K3 layer, one record per step (app/layer_data.py), in
the order the forward ran them (app/layer_steps_attn.py, app/layer_steps_ffn.py), and the map of the whole
layer that heads the page. Pure functions first (`walk`, `layer_map`); the cached wrappers for the page at the end.
"""
from __future__ import annotations

import numpy as np
import streamlit as st

from app.layer_data import CITE, PART_TITLES, LayerData, Step, layer_data, report_ref
from app.layer_steps_attn import kda_steps, mla_steps, norm_step, read_step
from app.layer_steps_ffn import dense_steps, moe_steps, residual_step
from model.config import K3Config

# What the page's selector shows at once: a few steps per view keeps an interaction quick (each step draws a
# figure, two equations and a table), and the map at the top always lists every step.
VIEWS = {"attention": ("1–2 · Read, RMSNorm, attention", ("read_attn", "attn")),
         "ffn": ("3 · Read, RMSNorm, FFN", ("ffn",)),
         "onward": ("4–5 · Onward, and how the router learns", ("residual", "learn")),
         "all": ("The whole layer", tuple(PART_TITLES))}


def walk(d: LayerData, token: int, cfg: K3Config, pieces: list[str]) -> list[Step]:
    """The steps of the layer for one token, in the order the forward ran them."""
    T = d.reads["attn"].x.shape[0]
    if not 0 <= token < T:
        raise ValueError(f"token must lie in 0..{T - 1}")
    steps = [read_step(d, token, "attn", cfg, "read_attn"), norm_step(d, token, "attn", cfg, "attn")]
    steps += kda_steps(d, token, cfg) if d.kind == "kda" else mla_steps(d, token, cfg, pieces)
    steps += [read_step(d, token, "ffn", cfg, "ffn"), norm_step(d, token, "ffn", cfg, "ffn")]
    steps += moe_steps(d, token, cfg) if d.moe else dense_steps(d, token, cfg)
    steps.append(residual_step(d, token, cfg))
    return steps


def layer_map(steps: list[Step], shown: set[str], gradient: str) -> str:
    """Every step of the layer in one table, with one computed number each and the K3 report's equation;
    ▶ marks the steps drawn below."""
    rows = ["| | step | part | this token (computed) | in the K3 report |", "|---|---|---|---|---|"]
    for n, s in enumerate(steps, 1):
        rows.append(f"| {'▶' if s.part in shown else ''} | {n}. {s.title} | {PART_TITLES[s.part][0]} | "
                    f"{s.headline} | {report_ref(s.cite).removeprefix('K3 report ')} |")
    rows.append(f"| {'▶' if 'learn' in shown else ''} | {len(steps) + 1}. Which scores the loss would raise or "
                f"lower | 5 | {gradient} | {report_ref(CITE['gradient']).removeprefix('K3 report ')} |")
    return "\n".join(rows)


# ---- cached wrappers for the page ------------------------------------------------------------------------

@st.cache_data(max_entries=64, show_spinner=False)
def cached_layer(ids: tuple[int, ...], layer: int) -> LayerData:
    from app.live import computing, forward, live
    model, out = live().model, forward(ids)          # cached: fetched before taking the lock
    with computing():
        return layer_data(model, out, layer)


@st.cache_data(max_entries=16, show_spinner=False)
def cached_gradients(ids: tuple[int, ...]) -> tuple[float, dict[int, np.ndarray]]:
    """One backward pass per prompt gives every MoE layer's router gradient (about a second)."""
    from app.live import computing, forward, live
    model, out = live().model, forward(ids)
    with computing():
        loss, grads = model.router_gradients(out)
    return loss, {i: g[0].numpy() for i, g in grads.items()}
