"""Data behind the SiTU-GLU vs SwiGLU page (ARCHITECTURE.md section 4; REFERENCES.md claim 9).

Curves and derivatives come from the model's own activation functions (torch.autograd on
model.activations.situ_glu / swiglu); the live numbers come from the live model's experts on the
prompt, starting from the FFN input the forward's trace recorded; the chain experiment re-runs the routed
path of every MoE layer with scaled weights.
Pure functions, plus thin Streamlit-cached wrappers at the end for the page.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st
import torch
import torch.nn.functional as F

from model.activations import BETA_GATE, BETA_UP, situ_glu, swiglu
from model.moe import LatentMoE, route
from model.norms import rms_norm

CAP = BETA_GATE * BETA_UP          # |SiTU-GLU| <= 4 * 25 = 100 (K3 report)
FP8_MAX = 448.0                    # largest finite FP8 E4M3 value (OCP MX v1.0, Table 1)
FP32_MAX = float(torch.finfo(torch.float32).max)   # also BF16's largest finite value, about 3.4e38
MAX_RANGE = 1000.0
ACTS = {"situ_glu": situ_glu, "swiglu": swiglu}
NAMES = {"situ_glu": "SiTU-GLU", "swiglu": "SwiGLU"}


# ---- the functions -------------------------------------------------------------------------------

def situ_gate_factor(g: torch.Tensor) -> torch.Tensor:
    return BETA_GATE * torch.tanh(g / BETA_GATE) * torch.sigmoid(g)      # range about (-0.27, 4)


def situ_up_factor(u: torch.Tensor) -> torch.Tensor:
    return BETA_UP * torch.tanh(u / BETA_UP)                              # range (-25, 25)


def _with_grad(fn, *xs: torch.Tensor) -> tuple[np.ndarray, list[np.ndarray]]:
    """fn(*xs) and its elementwise derivative in each argument, by torch.autograd (float64)."""
    xs = [x.detach().double().requires_grad_(True) for x in xs]
    y = fn(*xs)
    grads = torch.autograd.grad(y.sum(), xs)
    return y.detach().numpy(), [g.numpy() for g in grads]


def clamp_range(r: float) -> float:
    return float(min(max(abs(float(r)), 1.0), MAX_RANGE))


def curves(half_range: float, up: float, n: int = 2001) -> pd.DataFrame:
    """Over g in [-R, R]: both outputs at the chosen up value, the gate factors, the up factors (with
    u on the same axis), and every derivative, all from the real functions via autograd."""
    R = clamp_range(half_range)
    x = torch.linspace(-R, R, n, dtype=torch.float64)
    u = torch.full_like(x, float(up))
    situ, (situ_dg, situ_du) = _with_grad(situ_glu, x, u)
    swi, (swi_dg, swi_du) = _with_grad(swiglu, x, u)
    gate_s, (gate_s_d,) = _with_grad(situ_gate_factor, x)
    gate_w, (gate_w_d,) = _with_grad(F.silu, x)
    up_s, (up_s_d,) = _with_grad(situ_up_factor, x)
    return pd.DataFrame({
        "x": x.numpy(), "situ": situ, "swiglu": swi, "situ_dg": situ_dg, "swiglu_dg": swi_dg,
        "situ_du": situ_du, "swiglu_du": swi_du,
        "situ_gate": gate_s, "swiglu_gate": gate_w, "situ_gate_d": gate_s_d, "swiglu_gate_d": gate_w_d,
        "situ_up": up_s, "swiglu_up": x.numpy(), "situ_up_d": up_s_d, "swiglu_up_d": np.ones(n),
    })


def swiglu_crossings(up: float, limit: float = FP8_MAX, lo: float = -MAX_RANGE,
                     hi: float = MAX_RANGE) -> list[float]:
    """Every gate value g in [lo, hi] where |SwiGLU(g, up)| = limit, by bisection.

    |silu| is monotone on three pieces: rising from 0 to 0.2785 on (-inf, g*], falling back to 0 on
    [g*, 0], rising without bound on [0, inf), with g* = -1.2785 where silu has its minimum. A piece
    holds one root exactly when |silu| - limit/|up| changes sign between its ends."""
    if up == 0 or limit <= 0 or lo >= hi:
        return []
    target = limit / abs(up)
    g_min = _argmin_silu()
    f = lambda g: abs(g / (1 + math.exp(-g)) if g > -700 else 0.0) - target

    roots = []
    for a, b in ((lo, min(hi, g_min)), (max(lo, g_min), min(hi, 0.0)), (max(lo, 0.0), hi)):
        if a >= b or (f(a) > 0) == (f(b) > 0):
            continue
        fa = f(a)
        for _ in range(200):
            m = (a + b) / 2
            if (f(m) > 0) == (fa > 0):
                a = m
            else:
                b = m
        roots.append((a + b) / 2)
    return roots


def _argmin_silu() -> float:
    # d/dg [g sigmoid(g)] = sigmoid(g) (1 + g (1 - sigmoid(g))) = 0  ->  g ~ -1.27846
    a, b = -3.0, -0.5
    for _ in range(200):
        m = (a + b) / 2
        s = 1 / (1 + math.exp(-m))
        if 1 + m * (1 - s) > 0:
            b = m
        else:
            a = m
    return (a + b) / 2


def grid2d(half_range: float, n: int = 161) -> dict:
    """Both functions on a gate x up grid over [-R, R]^2 (rows: up, columns: gate)."""
    R = clamp_range(half_range)
    axis = torch.linspace(-R, R, n, dtype=torch.float64)
    G, U = torch.meshgrid(axis, axis, indexing="xy")            # [n, n]: G varies along columns
    return {"axis": axis.numpy(), "situ": situ_glu(G, U).numpy(), "swiglu": swiglu(G, U).numpy()}


# Samples a side of the 3-D surfaces: 41 x 41 (1,681 points a function) is smooth at this size and redraws
# quickly in the browser when the figure is turned; the heatmaps keep grid2d's finer default.
SURFACE_POINTS = 41


def surface_caption(grid: dict) -> str:
    """What the 3-D surfaces show, with the largest values read off their grid (app.situ_glu.grid2d)."""
    axis = np.asarray(grid["axis"], dtype=float)
    n, R = len(axis), float(axis[-1])
    situ_top, swiglu_top = float(np.abs(grid["situ"]).max()), float(np.abs(grid["swiglu"]).max())
    swiglu_note = (f"SwiGLU's reaches {swiglu_top:,.0f} at the corner g = u = {R:g} and keeps growing as g·u, so "
                   "beside it SiTU-GLU's surface looks flat." if swiglu_top > CAP else
                   f"SwiGLU's reaches {swiglu_top:,.4g} here, still under {CAP:g}: widen the plane range to see it pass.")
    return (f"Computed: both surfaces by the functions the live model runs (model/activations.py), on the same {n} × {n} "
            f"grid of g and u in ±{R:g}. SiTU-GLU's output stays within ±{CAP:g} (at most {situ_top:.4g} in size here); "
            f"{swiglu_note} Drag the figure to turn it; the toolbar (on hover) zooms, pans, resets the view and saves "
            "a PNG.")


# ---- what the page says about them (K3 report sec 2.3 and 4.1.4) ---------------------------------------

SOURCE = "K3 report Eq. 12, sec 2.3.2"          # SiTU-GLU's form and its constants 4 and 25
REPORT_ON_CHAIN = ("the K3 report (sec 2.3) says that the routed path, a chain of nearly four matrix products "
                   "(W_down, the gated expert, W_up), at K3's scale produces exploding internal activations, and "
                   "answers with the RMSNorm before W_up and SiTU-GLU (with Quantile Balancing for the load); it "
                   "gives no numbers to compare with (published claim, self-cited)")
MXFP8_NOTE = (f"K3 computes its experts with **MXFP8** activations (K3 report sec 4.1.4; the report says nothing "
              f"about storing them in that format): every block of 32 values gets its own power-of-two scale, so "
              f"E4M3's largest value, {FP8_MAX:g}, binds only without that scale.")


@functools.lru_cache(maxsize=1)
def swish_derivative_peak() -> tuple[float, float]:
    """(g, d/dg [g sigmoid(g)]) where SwiGLU's gate derivative is largest, by autograd on a fine grid."""
    g = torch.linspace(0.0, 10.0, 100_001, dtype=torch.float64)
    _, (d,) = _with_grad(F.silu, g)
    i = int(np.argmax(d))
    return float(g[i]), float(d[i])


@functools.lru_cache(maxsize=1)
def derivative_caption() -> str:
    """What the derivative panels show, with SwiGLU's gate derivative read off the real function."""
    g_peak, d_peak = swish_derivative_peak()
    _, (neg,) = _with_grad(F.silu, torch.linspace(-MAX_RANGE, -10.0, 10_001, dtype=torch.float64))
    _, (pos,) = _with_grad(F.silu, torch.tensor([20.0], dtype=torch.float64))
    return ("Derivatives by torch.autograd through the real functions. SiTU-GLU's gradients fade to 0 far from the "
            "origin (the price of the bound: a saturated unit learns slowly). SwiGLU's gate derivative is near 1 "
            f"only for large positive g ({pos[0]:.4f} at g = 20, after overshooting to {d_peak:.2f} at g ≈ "
            f"{g_peak:.1f}) and goes to 0 for negative g (under {10.0 ** math.ceil(math.log10(np.abs(neg).max())):g} "
            "in size for every g below −10); its up derivative is exactly 1. So for positive g nothing pulls large "
            "values back.")


# ---- the live experts on the prompt --------------------------------------------------------------

def ffn_input(out, layer: int) -> torch.Tensor:
    """The FFN input x = ffn_norm(h) [B, T, d] of `layer`, as the forward `out` recorded it."""
    return out.trace.module_input(layer, "ffn")


@dataclass
class ExpertActivations:
    layer: int
    x: torch.Tensor          # [N, d] FFN input
    z: torch.Tensor          # [N, l] latent input of the experts (x W_down)
    experts: torch.Tensor    # [N, k] routed experts
    weights: torch.Tensor    # [N, k] their output weights
    gate: torch.Tensor       # [N, k, f] gate pre-activations g = z W_gate[e]
    up: torch.Tensor         # [N, k, f] up pre-activations u = z W_up[e]


@torch.no_grad()
def expert_activations(model, out, layer: int) -> ExpertActivations:
    """Gate and up pre-activations of the routed experts of `layer` for every token of `out`."""
    if layer not in out.trace.routes:
        raise ValueError(f"layer {layer} is not a MoE layer (1..{model.cfg.num_layers - 1})")
    moe: LatentMoE = model.layers[layer].ffn
    x = ffn_input(out, layer).reshape(-1, model.cfg.d_model)                       # [N, d]
    idx = out.trace.experts(layer).reshape(x.shape[0], -1)                         # [N, k]
    w = out.trace.weights(layer).reshape(x.shape[0], -1)                           # [N, k]
    z = moe.down(x) if moe.down is not None else x                                  # [N, l]
    g = torch.einsum("nl,nkfl->nkf", z, moe.w_gate[idx])                            # [N, k, f]
    u = torch.einsum("nl,nkfl->nkf", z, moe.w_up[idx])                              # [N, k, f]
    return ExpertActivations(layer, x, z, idx, w, g, u)


@torch.no_grad()
def recombine(moe: LatentMoE, acts: ExpertActivations, activation: str = "situ_glu") -> torch.Tensor:
    """The layer output [N, d] rebuilt from the activations: what LatentMoE computes, step by step
    (used to check that the activations shown are the ones the layer really ran)."""
    h = ACTS[activation](acts.gate, acts.up)                                        # [N, k, f]
    e = torch.einsum("nkf,nklf->nkl", h, moe.w_down[acts.experts])                  # [N, k, l]
    u = (acts.weights.unsqueeze(-1).to(e.dtype) * e).sum(1) * moe.cfg.router_scale  # [N, l]
    routed = moe.up(moe.norm(u)) if moe.up is not None else u
    return moe.shared(acts.x, activation) + routed


def hidden_values(acts: ExpertActivations, activation: str, scale: float = 1.0) -> np.ndarray:
    """Every hidden activation value act(s g, s u) of the routed experts (s scales the expert input
    weights W_gate and W_up, as weight growth in training would)."""
    with torch.no_grad():
        return ACTS[activation](acts.gate.double() * scale, acts.up.double() * scale).reshape(-1).numpy()


def histogram_summary(values: dict[str, np.ndarray]) -> pd.DataFrame:
    rows = []
    for name, v in values.items():
        a = np.abs(v)
        rows.append({"activation": NAMES[name], "values": v.size, "max |h|": float(a.max()),
                     "over 100": int((a > CAP).sum()), "over FP8 max 448": int((a > FP8_MAX).sum())})
    return pd.DataFrame(rows)


# ---- the chain experiment ------------------------------------------------------------------------

CHAIN_VARIANTS = (("swiglu", False), ("swiglu", True), ("situ_glu", False), ("situ_glu", True))


def chain_label(activation: str, norm: bool) -> str:
    return f"{NAMES[activation]}, {'with' if norm else 'no'} RMSNorm before W_up"


@dataclass(frozen=True)
class ChainLayer:
    index: int
    router: torch.Tensor     # [E, d] float64 copies, made once per model
    bias: torch.Tensor       # [E]
    down: torch.Tensor       # [l, d]
    w_gate: torch.Tensor     # [E, f, l]  (each expert [out, in], as the model stores it)
    w_up: torch.Tensor       # [E, f, l]
    w_down: torch.Tensor     # [E, l, f]
    norm: torch.Tensor       # [l] RMSNorm gain
    eps: float
    up: torch.Tensor         # [d, l]
    top_k: int


@torch.no_grad()
def chain_weights(model) -> list[ChainLayer]:
    out = []
    for i, layer in enumerate(model.layers):
        if layer.is_moe and layer.ffn.down is not None:
            m = layer.ffn
            out.append(ChainLayer(i, *(t.detach().double() for t in (
                m.router.weight, m.router.expert_bias, m.down.weight, m.w_gate, m.w_up, m.w_down, m.norm.weight)),
                m.norm.eps, m.up.weight.detach().double(), m.top_k))
    return out


@torch.no_grad()
def routed_chain(layers: list[ChainLayer], x0: torch.Tensor, scale: float,
                 variants=CHAIN_VARIANTS) -> pd.DataFrame:
    """The routed path alone (router -> W_down -> expert -> W_up), layer after layer over every MoE
    layer: layer i's output is layer i+1's input, with no residual, no pre-norm and no shared experts,
    so nothing else can hide growth. `scale` multiplies the four matrices the report counts (W_down,
    the experts' W_gate/W_up and W_down, W_up); each variant picks the activation and whether the
    RMSNorm before W_up is kept. Float64, so growth shows past where float32 / BF16 overflow to inf.
    The variants run side by side as one batch (rows v*N .. (v+1)*N - 1 are variant v)."""
    x1 = x0.reshape(-1, x0.shape[-1]).double()                                      # [N, d]
    N = x1.shape[0]
    live = list(variants)                    # variants still finite; an overflowed one stops there
    x = x1.repeat(len(live), 1)                                                      # [V*N, d]
    rows = []
    for L in layers:
        V = len(live)
        s = torch.sigmoid(x @ L.router.T)                                             # [V*N, E]
        idx, p, _ = route(s, L.bias, L.top_k)                                         # [V*N, k]
        z = scale * (x @ L.down.T)                                                    # [V*N, l]
        g = scale * torch.einsum("nl,nkfl->nkf", z, L.w_gate[idx])                    # [V*N, k, f]
        u = scale * torch.einsum("nl,nkfl->nkf", z, L.w_up[idx])
        h = torch.cat([ACTS[a](g[v * N:(v + 1) * N], u[v * N:(v + 1) * N])
                       for v, (a, _) in enumerate(live)])                            # [V*N, k, f]
        e = scale * torch.einsum("nkf,nklf->nkl", h, L.w_down[idx])                   # [V*N, k, l]
        r = (p.unsqueeze(-1) * e).sum(1)                                              # [V*N, l]
        keep = torch.tensor([nrm for _, nrm in live]).repeat_interleave(N).unsqueeze(1)
        r = torch.where(keep, rms_norm(r, L.eps) * L.norm, r)
        x = scale * (r @ L.up.T)                                                      # [V*N, d]
        still = []
        for v, (a, nrm) in enumerate(live):
            hv, xv = h[v * N:(v + 1) * N], x[v * N:(v + 1) * N]
            ok = bool(torch.isfinite(hv).all() and torch.isfinite(xv).all())
            rows.append({"layer": L.index, "variant": chain_label(a, nrm), "activation": a, "norm": nrm,
                         "max_h": float(hv.abs().max()) if ok else math.inf,
                         "rms_out": float(xv.pow(2).mean().sqrt()) if ok else math.inf})
            if ok:
                still.append(v)
        if not still:
            break
        if len(still) < V:
            x = torch.cat([x[v * N:(v + 1) * N] for v in still])
            live = [live[v] for v in still]
    return pd.DataFrame(rows)


def chain_summary(table: pd.DataFrame, n_layers: int) -> pd.DataFrame:
    """Per variant: the largest hidden activation reached, and the first layer past FP8's 448 and
    past float32/BF16's maximum (or 'overflow' when float64 itself ran out)."""
    rows = []
    for variant, d in table.groupby("variant", sort=False):
        peak = d["max_h"].max()
        over = lambda lim: (int(d.loc[d["max_h"] > lim, "layer"].iloc[0]) if (d["max_h"] > lim).any() else None)
        rows.append({"variant": variant, "layers run": len(d), "largest |h| (inf: overflow)": peak,
                     "first layer |h| > 448": over(FP8_MAX), "first layer |h| > 3.4e38": over(FP32_MAX),
                     "overflowed float64": bool(np.isinf(peak)) or len(d) < n_layers})
    return pd.DataFrame(rows)


# ---- cached wrappers for the page (Streamlit caches; the functions above stay pure) ---------------


@st.cache_data(max_entries=64, show_spinner=False)
def cached_curves(half_range: float, up: float) -> pd.DataFrame:
    return curves(half_range, up)


@st.cache_data(max_entries=16, show_spinner=False)
def cached_grid(half_range: float) -> dict:
    return grid2d(half_range)


@st.cache_resource(max_entries=32, show_spinner=False)
def cached_surfaces(half_range: float, theme_type: str | None):
    """The 3-D surfaces' grid and plotly figure, built once per process for each range and theme. Shared:
    st.plotly_chart sends a copy of a figure (Figure.to_dict), never changing the one it is given."""
    from app.charts import situ_glu_plane as charts
    grid = grid2d(half_range, SURFACE_POINTS)
    return grid, charts.surface_figure(grid, CAP, theme_type)


@st.cache_resource(show_spinner=False)
def _chain_weights_of_live() -> list[ChainLayer]:
    from app.live import computing, live
    model = live().model
    with computing():
        return chain_weights(model)


@st.cache_resource(max_entries=32, show_spinner=False)
def cached_activations(ids: tuple[int, ...], layer: int) -> ExpertActivations:
    from app.live import computing, forward, live
    model, out = live().model, forward(ids)
    with computing():
        return expert_activations(model, out, layer)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_hidden(ids: tuple[int, ...], layer: int, scale: float) -> dict[str, np.ndarray]:
    acts = cached_activations(ids, layer)
    return {a: hidden_values(acts, a, scale) for a in ("situ_glu", "swiglu")}


@st.cache_data(max_entries=32, show_spinner=False)
def cached_chain(ids: tuple[int, ...], scale: float) -> pd.DataFrame:
    from app.live import computing, forward, live
    first = live().model.cfg.first_dense_layers
    x0, layers = ffn_input(forward(ids), first), _chain_weights_of_live()
    with computing():
        return routed_chain(layers, x0, scale)
