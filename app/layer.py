"""Data behind the Inside-one-layer page: one token followed through one K3 layer, one record per step.

Every number comes from one cached forward of the live model: the AttnRes reads, module inputs,
outputs and partial sums its trace recorded, and each module's intermediates as the module's own
`parts` computes them from the recorded input (`K3Model.inspect`); the router gradient comes from
`K3Model.router_gradients`. Nothing before the layer runs again. Equations follow docs/ARCHITECTURE.md;
every step names the K3 report's own equation and section ("K3 report Eq. 11, sec 2.3") beside the
docs/ section. Shapes: the live instance's beside K3's, both from model.config.

Pure functions first (`layer_data`, `walk`, `gradient_step`); the cached wrappers for the page at the end.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import streamlit as st
import torch

from app.routing import chip_label
from model.activations import BETA_GATE, BETA_UP
from model.config import K3Config
from model.k3 import K3Model, K3Output

FULL = K3Config.full()
PART_TITLES = {
    "read_attn": "1 · The depth read before attention",
    "attn": "2 · RMSNorm, then the attention module",
    "ffn": "3 · The second depth read, RMSNorm, then the FFN",
    "residual": "4 · What goes on to the next layer",
    "learn": "5 · How the router learns",
}
# What the page's selector shows at once: a few steps per view keeps an interaction quick (each step draws a
# figure, two equations and a table), and the map at the top always lists every step.
VIEWS = {"attention": ("1–2 · Read, RMSNorm, attention", ("read_attn", "attn")),
         "ffn": ("3 · Read, RMSNorm, FFN", ("ffn",)),
         "onward": ("4–5 · Onward, and how the router learns", ("residual", "learn")),
         "all": ("The whole layer", tuple(PART_TITLES))}
# Where each step's equation is written down: the K3 report's equation and section (arXiv 2607.24653 v2, the
# equations as numbered there: 1-6 KDA, 7 gated MLA, 8-10 AttnRes, 11 LatentMoE, 12 SiTU-GLU, 13-14 routing and
# Quantile Balancing), then the docs/ARCHITECTURE.md section that writes it as this code runs it.
CITE = {
    "read": "K3 report Eq. 8–10, sec 2.2 · docs/ARCHITECTURE.md §1 (Attention Residuals preprint arXiv 2603.15031)",
    "norm": "K3 report Eq. 9, sec 2.2, for h; the RMSNorm after it is drawn in the report's Fig. 2 and has no "
            "equation of its own · docs/ARCHITECTURE.md §1 (RMSNorm with ε = 1e-5)",
    "kda_qkv": "K3 report Eq. 2, sec 2.1.1 · docs/ARCHITECTURE.md §2 (Kimi Linear arXiv 2510.26692)",
    "kda_gate": "K3 report Eq. 2 and Eq. 5, sec 2.1.1 (K3's lower-bounded decay) · docs/ARCHITECTURE.md §2",
    "kda_state": "K3 report Eq. 1, sec 2.1.1 · docs/ARCHITECTURE.md §2",
    "kda_read": "K3 report Eq. 1, sec 2.1.1 (the read Sᵀq) · docs/ARCHITECTURE.md §2 (with the d_k^−1/2 scale)",
    "kda_out": "K3 report Eq. 6, sec 2.1.1 · docs/ARCHITECTURE.md §2",
    "mla_latent": "K3 report sec 2.1.2, which writes the latent c = W_c x in its text with no equation number "
                  "(MLA's own equations are DeepSeek-V2's, arXiv 2405.04434) · docs/ARCHITECTURE.md §3 (NoPE)",
    "mla_attn": "K3 report Eq. 7, sec 2.1.2, whose ungated output ô this is (the attention itself is DeepSeek-V2's "
                "MLA, arXiv 2405.04434) · docs/ARCHITECTURE.md §3",
    "mla_gate": "K3 report Eq. 7, sec 2.1.2 · docs/ARCHITECTURE.md §3",
    "dense": "K3 report Eq. 12, sec 2.3.2 (caps 4 and 25) · docs/ARCHITECTURE.md §4",
    "router": "K3 report Eq. 13, sec 2.3.3 · docs/ARCHITECTURE.md §5",
    "moe_down": "K3 report Eq. 11, sec 2.3 · docs/ARCHITECTURE.md §5 (NVIDIA LatentMoE arXiv 2601.18089)",
    "experts": "K3 report Eq. 11, sec 2.3, with each expert's SiTU-GLU K3 report Eq. 12, sec 2.3.2 · "
               "docs/ARCHITECTURE.md §5",
    "moe_up": "K3 report Eq. 11, sec 2.3 and 2.3.1 · docs/ARCHITECTURE.md §5",
    "shared": "K3 report Eq. 11, sec 2.3 · docs/ARCHITECTURE.md §5 (shared experts: DeepSeekMoE arXiv 2401.06066)",
    "residual": "K3 report Eq. 10, sec 2.2 (the block sums b_n) · docs/ARCHITECTURE.md §1",
    "gradient": "K3 report Eq. 13 and Eq. 14, sec 2.3.3 · docs/ARCHITECTURE.md §5 and §6",
}


# ---- records ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    name: str
    here: str            # the live instance's shape (computed from its config)
    k3: str              # K3's, from the published config
    how: str = "published"   # or "derived: <how>" when it is a product or sum of published values


@dataclass(frozen=True)
class Step:
    key: str             # which figure builder draws it (app.charts.layer.FIGURES)
    part: str            # key of PART_TITLES
    title: str
    text: str            # markdown: what happens, with this token's computed numbers
    equation: str        # LaTeX, the step's equation
    filled: str          # LaTeX, the same with this token's computed values
    cite: str
    shapes: tuple[Shape, ...]
    caption: str         # what to look at in the figure
    data: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Read:
    names: list[str]     # source labels, sealed first, partial last
    sources: np.ndarray  # [T, S, d] the raw source values
    weights: np.ndarray  # [T, S]
    h: np.ndarray        # [T, d] the mix, before RMSNorm
    x: np.ndarray        # [T, d] RMSNorm(h) with the module's gain: the module input
    gain: np.ndarray     # [d]


@dataclass(frozen=True)
class LayerData:
    """Everything the walk shows for one layer of one recorded forward, every token, as numpy."""
    layer: int
    kind: str                        # "kda" | "mla"
    moe: bool
    reads: dict[str, Read]           # "attn", "ffn"
    attn: dict[str, np.ndarray]      # the attention module's parts, [T, ...]
    ffn: dict[str, np.ndarray]       # the FFN's parts, [T, ...]
    outputs: dict[str, np.ndarray]   # the module outputs the trace recorded, [T, d]
    partial_before: np.ndarray | None    # [T, d] the open block's sum entering the layer (None: nothing yet)
    partials: dict[str, np.ndarray]  # the open block's sum after each module, [T, d]
    sealed: str | None               # label of the source this layer sealed before its attention, if any
    # scores [T, E], indices and weights [T, k], cutoff [T], bias [E] (MoE layers only)
    route: dict[str, np.ndarray] = field(default_factory=dict)
    params: dict[str, np.ndarray] = field(default_factory=dict)  # small weights the equations quote


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def layer_data(model: K3Model, out: K3Output, layer: int) -> LayerData:
    """The recorded forward's view of `layer` (batch row 0), with both modules' intermediates."""
    cfg, tr = model.cfg, out.trace
    if not 0 <= layer < cfg.num_layers:
        raise ValueError(f"layer must lie in 0..{cfg.num_layers - 1}")
    block = model.layers[layer]
    reads = {}
    for m, norm in (("attn", block.attn_norm), ("ffn", block.ffn_norm)):
        srcs, names, a, h = tr.read(layer, m)
        reads[m] = Read(list(names), np.stack([_np(s[0]) for s in srcs], 1), _np(a[0]), _np(h[0]),
                        _np(tr.module_input(layer, m)[0]), _np(norm.weight))
    parts = model.inspect(out, layer)
    snap = tr.snapshots[layer]
    sealed = None
    if cfg.attnres == "block" and layer % cfg.attnres_block_size == 0:
        sealed = "emb" if not snap.labels else f"block {len(snap.labels)}"
    route, params = {}, {}
    if block.is_moe:
        r = tr.routes[layer]
        route = {"scores": _np(r.scores[0]), "indices": r.indices[0].numpy().copy(), "weights": _np(r.weights[0]),
                 "cutoff": _np(r.cutoff[0]), "bias": _np(r.bias)}
        params["latent_gain"] = _np(block.ffn.norm.weight)
    if block.kind == "kda":
        params.update(A_log=_np(block.attn.A_log), dt_bias=_np(block.attn.dt_bias))
    return LayerData(
        layer=layer, kind=block.kind, moe=block.is_moe, reads=reads,
        attn={k: _np(v[0]) for k, v in parts["attn"].items()},
        ffn={k: _np(v[0]) for k, v in parts["ffn"].items()},
        outputs={m: _np(tr.outputs[(layer, m)][0]) for m in ("attn", "ffn")},
        partial_before=None if snap.partial is None else _np(snap.partial[0]),
        partials={m: _np(tr.partial_after(layer, m)[0]) for m in ("attn", "ffn")},
        sealed=sealed, route=route, params=params)


# ---- formatting ---------------------------------------------------------------------------------------

def tex(x: float, digits: int = 3) -> str:
    """A number for LaTeX: 3 significant figures, a real minus sign, powers of ten written out."""
    x = float(x)
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return r"\infty" if x > 0 else r"-\infty"
    e = math.floor(math.log10(abs(x)))
    if -3 <= e < 5:
        return f"{x:.{max(digits - 1 - e, 0)}f}"
    m = x / 10 ** e
    return rf"{m:.{digits - 1}f}\times 10^{{{e}}}"


def txt(x: float, digits: int = 3) -> str:
    """The same number for markdown text."""
    x = float(x)
    if x == 0:
        return "0"
    e = math.floor(math.log10(abs(x)))
    if -3 <= e < 5:
        return f"{x:.{max(digits - 1 - e, 0)}f}".replace("-", "−")
    return f"{x / 10 ** e:.{digits - 1}f}×10^{e}".replace("-", "−")


def dims(*ds: int) -> str:
    """[2 × 16 × 16]: dimensions joined by ×, so a thousands comma never reads as a second axis."""
    return "[" + " × ".join(f"{int(d):,}" for d in ds) + "]"


def norm(v: np.ndarray) -> float:
    return float(np.sqrt(np.sum(np.asarray(v, dtype=np.float64) ** 2)))


def _src(name: str) -> str:
    return r"V_{\text{" + name.replace(" ", r"\ ") + "}}"


def block_of(layer: int, cfg: K3Config) -> tuple[int, int, int]:
    """(1-based block number, first layer, last layer) of the AttnRes block holding `layer`."""
    S = cfg.attnres_block_size
    n = layer // S
    return n + 1, n * S, min((n + 1) * S, cfg.num_layers) - 1


# ---- the walk -------------------------------------------------------------------------------------------

def _read_step(d: LayerData, t: int, m: str, cfg: K3Config, part: str) -> Step:
    r = d.reads[m]
    w = r.weights[t]
    top = int(np.argmax(w))
    S = len(r.names)
    module = "attention" if m == "attn" else "FFN"
    parts = [rf"{tex(w[s])}\,{_src(n)}" for s, n in enumerate(r.names)]
    terms = r" \\ + ".join(" + ".join(parts[i:i + 3]) for i in range(0, S, 3))     # three sources a line
    if S == 1:
        text = (f"Layer {d.layer}'s first read sees only the token embedding: a softmax over one source is 1, so "
                "h is the embedding itself (one link).")
    else:
        uniform = 1 / S
        text = (f"The read before the {module} weighs {S} sources for this token; **{r.names[top]}** gets the most, "
                f"{w[top]:.1%} of the weight (uniform would be {uniform:.1%}; computed). h mixes the raw sources with "
                "these "
                "weights; the keys that chose the weights were the sources after an RMSNorm without gain.")
    return Step(
        key="read", part=part, title=f"Depth attention before the {module}",
        text=text,
        equation=(r"a_s = \operatorname{softmax}_s\big(\mathrm{RMSNorm}(V_s)\cdot w\big) \\ "
                  r"h = \textstyle\sum_s a_s V_s"),
        filled=rf"h = {terms}",
        cite=CITE["read"],
        shapes=(Shape("sources V_s", dims(S, cfg.d_model), dims(S, FULL.d_model),
                      "published (d); the same sources, by the same block schedule"),
                Shape("h", dims(cfg.d_model), dims(FULL.d_model))),
        caption=("Left: the weight of each source (the dominant one in colour). Right: the sources' raw values "
                 "and their mix h, one row each, one column per channel."),
        data={"names": r.names, "weights": w, "sources": r.sources[t], "h": r.h[t], "top": top})


def _norm_step(d: LayerData, t: int, m: str, cfg: K3Config, part: str) -> Step:
    r = d.reads[m]
    h, x = r.h[t], r.x[t]
    rms = float(np.sqrt(np.mean(h.astype(np.float64) ** 2)))
    module = "attention" if m == "attn" else "FFN"
    return Step(
        key="norm", part=part, title=f"RMSNorm: the {module} module's input",
        text=(f"h is divided by its root mean square, {rms:.3g} for this token (computed), and multiplied by the "
              f"norm's learned gain per channel (from {r.gain.min():.3g} to {r.gain.max():.3g}). This x is what "
              "the trace recorded as the module's input."),
        equation=r"x = \frac{h}{\sqrt{\tfrac{1}{d}\sum_j h_j^2 + \epsilon}} \odot \gamma",
        filled=rf"x = \frac{{h}}{{{tex(rms)}}} \odot \gamma,\qquad \lVert x\rVert = {tex(norm(x))}",
        cite=CITE["norm"],
        shapes=(Shape("h, x", dims(cfg.d_model), dims(FULL.d_model)),),
        caption="h (before) and x (after) per channel: the same pattern, rescaled to root mean square about 1 "
                "and reweighted by the gain.",
        data={"h": h, "x": x})


def _kda_steps(d: LayerData, t: int, cfg: K3Config) -> list[Step]:
    a = d.attn
    H, dk = cfg.kda_heads, cfg.kda_head_dim
    Hf, dkf = FULL.kda_heads, FULL.kda_head_dim
    P, Pf = H * dk, Hf * dkf
    keep = np.exp(a["g"][t])                                    # [H, dk] retention per key channel
    beta = a["beta"][t]                                         # [H]
    S_before = a["states"][t - 1] if t > 0 else np.zeros_like(a["states"][t])
    S_after = a["states"][t]
    decayed = keep[:, :, None] * S_before
    k, v, q = a["k"][t], a["v"][t], a["q"][t]
    pred = np.einsum("hkv,hk->hv", decayed, k)
    err = v - pred
    write = k[:, :, None] * (beta[:, None] * err)[:, None, :]
    o = a["o"][t]                                               # [H, dv]
    h0 = int(np.argmin(keep[0]))
    A, b = float(d.params["A_log"][0]), float(d.params["dt_bias"][0, h0])
    zc = float(a["z"][t, 0, h0])
    gate = a["gate"][t]
    steps = [
        Step("kda_qkv", "attn", "Kimi Delta Attention: query, key and value",
             (f"x is projected to q, k and v ({P} values each here, {Pf:,} in K3), each through a short causal "
              f"convolution over this token and the {cfg.kda_conv - 1} before it, then SiLU; q and k are then scaled "
              "to length 1 per "
              f"head. Computed for this token: ‖k‖ = {norm(k[0]):.3f} in head 0, as the L2 norm makes it."),
             r"q, k, v = \mathrm{SiLU}(\mathrm{conv}_4(x W_{q,k,v})) \\ k \leftarrow \frac{k}{\lVert k\rVert},\ "
             r"q \leftarrow \frac{q}{\lVert q\rVert}",
             rf"\lVert q_0\rVert = {tex(norm(q[0]))},\ \lVert k_0\rVert = {tex(norm(k[0]))},\ "
             rf"\lVert v_0\rVert = {tex(norm(v[0]))}",
             CITE["kda_qkv"],
             (Shape("q, k, v per head", dims(H, dk), dims(Hf, dkf)),
              Shape("all heads", dims(P), dims(Pf), f"derived: {Hf} heads × {dkf}")),
             "One row per head and vector, one column per channel; q and k have length 1 per head.",
             {"rows": [f"{n} head {h}" for h in range(H) for n in ("q", "k", "v")],
              "z": np.stack([vec[h] for h in range(H) for vec in (q, k, v)])}),
        Step("kda_gate", "attn", "The decay gate per key channel, and the write strength β",
             (f"Each key channel of the state keeps a share e^g of what it held, chosen for this token: from "
              f"{keep.min():.1%} to {keep.max():.1%} here (computed; the bound −5 allows e^−5 = {math.exp(-5):.2%} "
              f"to 100%). β is how strongly this token writes: {', '.join(f'{x:.3f}' for x in beta)} "
              f"for heads {', '.join(map(str, range(H)))}."),
             r"g = -5\,\sigma\!\big(e^{A_{\log}}\,(x W_{fa} W_{fb} + b_{dt})\big) \\ \beta = \sigma(x W_b)",
             (rf"g_{{0,{h0}}} = -5\,\sigma\big({tex(math.exp(A))}\,({tex(zc)} {'-' if b < 0 else '+'} "
              rf"{tex(abs(b))})\big) = "
              rf"{tex(a['g'][t, 0, h0])} \\ e^{{g_{{0,{h0}}}}} = {tex(keep[0, h0])} \\ "
              + r",\ ".join(rf"\beta_{h} = {tex(beta[h])}" for h in range(H))),
             CITE["kda_gate"],
             (Shape("g (decay per key channel)", dims(H, dk), dims(Hf, dkf)),
              Shape("β (one per head)", dims(H), dims(Hf))),
             f"Share of each key channel's state kept (e^g, 0 to 1), per head; channel {h0} of head 0 forgets most "
             "and is the one written out in the equation.",
             {"keep": keep, "beta": beta}),
        Step("kda_state", "attn", "The state before and after this token's delta write",
             (f"First every row of the state decays by its channel's e^g; then the state predicts this token's value "
              f"from its key (Sᵀk) and writes only the error, scaled by β. Head 0, computed: ‖S‖ goes "
              f"{norm(S_before[0]):.3f} → {norm(decayed[0]):.3f} (decay) → {norm(S_after[0]):.3f} (write); the "
              f"prediction missed v by ‖v − Sᵀk‖ = {norm(err[0]):.3f}."),
             (r"S \leftarrow \operatorname{diag}(e^{g})\,S \\ "
              r"S \leftarrow S + k \otimes \beta\,(v - S^{\top}k)"),
             (rf"\lVert S\rVert: {tex(norm(S_before[0]))} \to {tex(norm(decayed[0]))} \to {tex(norm(S_after[0]))}"
              rf" \\ \lVert \beta(v - S^{{\top}}k)\rVert = {tex(norm(beta[0] * err[0]))}"),
             CITE["kda_state"],
             (Shape("state S", dims(H, dk, dk), dims(Hf, dkf, dkf), "published heads and widths (d_v = d_k)"),),
             ("Per head: the state before this token, after it, and the change (decay plus write). Its size never "
              "grows with the text."),
             {"before": S_before, "after": S_after, "change": S_after - S_before, "write_check": decayed + write}),
        Step("kda_read", "attn", "The read: qᵀS after the write",
             (f"The query reads the state after the write: o = Sᵀq per head, with q scaled by d_k^−1/2 = "
              f"{dk ** -0.5:.3f}. Computed: ‖o‖ = {', '.join(f'{norm(o[h]):.3f}' for h in range(H))} for heads "
              f"{', '.join(map(str, range(H)))}."),
             r"o = S^{\top} q \,/\sqrt{d_k}",
             rf"o_h = S_h^{{\top}} q_h \cdot {tex(dk ** -0.5)},\quad \lVert o_0\rVert = {tex(norm(o[0]))}",
             CITE["kda_read"],
             (Shape("o", dims(H, dk), dims(Hf, dkf)),),
             "The read per head and value channel.",
             {"o": o}),
        Step("kda_out", "attn", "Output norm, the gate, and W_o",
             (f"Each head's read is RMS-normalised, then multiplied by a full-rank sigmoid gate σ(x W_g), one value "
              f"per channel: {int((gate < 0.1).sum())} of {P} channels are nearly closed (< 0.1) and "
              f"{int((gate > 0.9).sum())} nearly open (> 0.9) for this token (computed). W_o maps the gated "
              f"values back to the model width: this is the attention output a."),
             r"a = W_o\big(\mathrm{RMSNorm}(o) \odot \sigma(x W_g)\big)",
             rf"\bar g = {tex(gate.mean())},\quad \lVert a\rVert = {tex(norm(a['out'][t]))}",
             CITE["kda_out"],
             (Shape("gate", dims(P), dims(Pf), f"derived: {Hf} × {dkf}"),
              Shape("a", dims(cfg.d_model), dims(FULL.d_model))),
             "Per channel: the normalised read, the gate (0 blocks, 1 passes) and their product, which W_o turns "
             "into a.",
             {"normed": a["o_normed"][t].reshape(-1), "gate": gate, "gated": a["gated"][t], "out": a["out"][t]}),
    ]
    return steps


def _mla_steps(d: LayerData, t: int, cfg: K3Config, pieces: list[str]) -> list[Step]:
    a = d.attn
    H, kv, r, nope, vd = cfg.mla_heads, cfg.kv_lora_rank, cfg.qk_rope_dim, cfg.qk_nope_dim, cfg.v_head_dim
    probs = a["probs"][:, t, :t + 1]                            # [H, t+1]
    tops = [int(np.argmax(probs[h])) for h in range(H)]
    gate, o = a["gate"][t], a["o"][t]
    scale = (nope + r) ** -0.5
    row = np.concatenate([a["latent"][t], a["k_rope"][t]])
    cache = kv + r
    top_txt = "; ".join(f"head {h}: token {p} “{chip_label(pieces[p])}” ({probs[h, p]:.1%})"
                        for h, p in enumerate(tops))
    return [
        Step("mla_latent", "attn", "Gated MLA: the latent this token adds to the cache",
             (f"MLA compresses x into one latent c of {kv} values plus a {r}-value key slice k_R shared by every head; "
              f"that row is all it caches for this token ({cache} values here, "
              f"{FULL.kv_lora_rank + FULL.qk_rope_dim} in K3). After this token the cache holds {t + 1} rows. No "
              "position is encoded: the k_R slice is never rotated (NoPE)."),
             r"[\tilde c\,;\,k_R] = x W_{dkv} \\ c = \mathrm{RMSNorm}(\tilde c)",
             rf"\lVert c\rVert = {tex(norm(a['latent'][t]))},\quad \lVert k_R\rVert = {tex(norm(a['k_rope'][t]))}",
             CITE["mla_latent"],
             (Shape("cached row [c ; k_R]", dims(cache), dims(FULL.kv_lora_rank + FULL.qk_rope_dim),
                    f"derived: {FULL.kv_lora_rank} + {FULL.qk_rope_dim}"),),
             "The cached row: the latent c, then the unrotated key slice k_R.",
             {"c": a["latent"][t], "k_rope": a["k_rope"][t], "row": row}),
        Step("mla_attn", "attn", "Attention weights over the earlier tokens",
             (f"Each head expands the cached latents into keys and values and attends causally over tokens 0–{t}. "
              f"Most weight, computed: {top_txt}."),
             (r"\alpha_{ij} = \operatorname{softmax}_{j \le i}\Big(\frac{q_i \cdot k_j}{\sqrt{d_{\text{nope}} + "
              r"d_{\text{rope}}}}\Big) \\ o_i = \textstyle\sum_j \alpha_{ij} v_j"),
             (rf"\frac{{1}}{{\sqrt{{{nope} + {r}}}}} = {tex(scale)} \\ "
              + r",\ ".join(rf"\max_j \alpha_{{{h},j}} = {tex(probs[h, tops[h]])}" for h in range(H))),
             CITE["mla_attn"],
             (Shape("weights of this token", dims(H, t + 1), dims(FULL.mla_heads, t + 1),
                    "published heads; one weight per earlier token"),
              Shape("q · k width per head", dims(nope + r), dims(FULL.qk_nope_dim + FULL.qk_rope_dim),
                    f"derived: {FULL.qk_nope_dim} + {FULL.qk_rope_dim}")),
             "One line per head: the weight this token gives each earlier token (they sum to 1 per head).",
             {"probs": probs, "pieces": pieces[:t + 1]}),
        Step("mla_gate", "attn", "The output gate: what “gated” means",
             (f"Before W_o, the gate σ(x W_g), one value in (0, 1) per channel computed from x, scales every "
              f"attention channel on its own: {int((gate < 0.1).sum())} of "
              f"{H * vd} channels are nearly blocked (< 0.1) and {int((gate > 0.9).sum())} pass nearly whole (> 0.9) "
              f"for this token; the gated output keeps {norm(a['gated'][t]) / max(norm(o), 1e-12):.1%} of the "
              "read's length (computed). Kimi K2's MLA has no such gate."),
             r"a = W_o\big(\sigma(x W_g) \odot [o_1; \dots; o_H]\big)",
             rf"\bar g = {tex(gate.mean())},\ \min g = {tex(gate.min())},\ \max g = {tex(gate.max())} \\ "
             rf"\lVert a\rVert = {tex(norm(a['out'][t]))}",
             CITE["mla_gate"],
             (Shape("gate", dims(H * vd), dims(FULL.mla_heads * FULL.v_head_dim),
                    f"derived: {FULL.mla_heads} × {FULL.v_head_dim}"),
              Shape("a", dims(cfg.d_model), dims(FULL.d_model))),
             "Per channel: the attention read o, the gate σ(x W_g) (0 blocks, 1 passes) and what passes.",
             {"o": o, "gate": gate, "gated": a["gated"][t], "out": a["out"][t]}),
    ]


def _dense_steps(d: LayerData, t: int, cfg: K3Config) -> list[Step]:
    f = d.ffn
    hmax = float(np.abs(f["hidden"][t]).max())
    return [Step(
        "dense", "ffn", "Layer 0's dense FFN (SiTU-GLU)",
        (f"Layer 0 has no router: every token uses one SiTU-GLU network of hidden width {cfg.dense_hidden} "
         f"({FULL.dense_hidden:,} in K3). Its hidden values are bounded by {BETA_GATE * BETA_UP:g}; the largest "
         f"for this token is {hmax:.3g} (computed)."),
        (r"m = \Big[4\tanh\tfrac{g}{4}\,\sigma(g)\Big] \odot \Big[25\tanh\tfrac{u}{25}\Big] W_{\text{down}} \\ "
         r"\quad g = x W_{\text{gate}},\ u = x W_{\text{up}}"),
        rf"\max_j |h_j| = {tex(hmax)} \le {BETA_GATE * BETA_UP:g},\quad \lVert m\rVert = {tex(norm(f['out'][t]))}",
        CITE["dense"],
        (Shape("hidden", dims(cfg.dense_hidden), dims(FULL.dense_hidden)),
         Shape("m", dims(cfg.d_model), dims(FULL.d_model))),
        "Every hidden value of the dense FFN for this token, within ±100.",
        {"hidden": f["hidden"][t], "out": f["out"][t]})]


def _moe_steps(d: LayerData, t: int, cfg: K3Config) -> list[Step]:
    f, r = d.ffn, d.route
    E, k, l, fh = cfg.n_routed_experts, cfg.top_k, cfg.expert_width, cfg.expert_hidden
    s, b = r["scores"][t], r["bias"]
    idx, p, cut = r["indices"][t], r["weights"][t], float(r["cutoff"][t])
    raw_top = set(np.argsort(-s, kind="stable")[:k].tolist())
    moved = k - len(raw_top & set(idx.tolist()))
    lead = [(int(i), float(pi)) for pi, i in sorted(zip(p, idx), reverse=True)[:3]]
    ssum = float(s[idx].sum())
    shared, routed, m = f["shared"], f["routed"], f["out"]
    ratio = np.array([norm(shared[i]) / max(norm(routed[i]), 1e-12) for i in range(len(m))])
    nf = FULL.n_shared_experts * FULL.shared_hidden
    steps = [
        Step("router", "ffn", f"The router: {E} scores, the bias, the top-{k}",
             (f"The router scores all {E} experts from the full-width x with a sigmoid. The balancing bias b is added "
              f"only to choose: the top {k} of s + b are taken, and the {k + 1}th biased score, {cut:.4f}, is this "
              f"token's cutoff. The weights p use the raw scores. Computed: without the bias {moved} of the {k} "
              f"choices would differ here."),
             (r"s = \sigma(x W_r),\quad \mathcal T = \operatorname{top}_{%d}(s + b) \\ "
              r"p_i = \frac{s_i}{\sum_{j \in \mathcal T} s_j}" % k),
             (rf"\textstyle\sum_{{\mathcal T}} s_j = {tex(ssum)} \\ "
              + r" \\ ".join(rf"p_{{{i}}} = \frac{{{tex(s[i])}}}{{{tex(ssum)}}} = {tex(pi)}" for i, pi in lead)
              + r",\ \dots"),
             CITE["router"],
             (Shape("scores s, bias b", dims(E), dims(FULL.n_routed_experts)),
              Shape("chosen, weights p", dims(k), dims(FULL.top_k))),
             (f"Left: all {E} experts ranked by biased score s + b, the chosen {k} in colour, the cutoff dashed. "
              "Right: the chosen experts' weights p (hover for s and b)."),
             {"scores": s, "bias": b, "indices": idx, "weights": p, "cutoff": cut}),
        Step("moe_down", "ffn", "Down into the latent",
             (f"One shared projection takes x from width {cfg.d_model} to the latent z of width {l} (d/2; "
              f"{FULL.d_model:,} → {FULL.expert_width:,} in K3). The routed experts read and write only z, so a "
              f"token's {k} routed copies are {k * l} values here and {FULL.top_k * FULL.expert_width:,} in K3: what "
              "expert parallelism sends between devices."),
             r"z = x\,W_{\text{down}}",
             rf"\lVert x\rVert = {tex(norm(d.reads['ffn'].x[t]))} \;\to\; \lVert z\rVert = {tex(norm(f['z'][t]))}",
             CITE["moe_down"],
             (Shape("x", dims(cfg.d_model), dims(FULL.d_model)),
              Shape("z", dims(l), dims(FULL.expert_width), "published (= d/2)")),
             "The FFN input x and its latent z, per channel.",
             {"x": d.reads["ffn"].x[t], "z": f["z"][t]}),
        Step("experts", "ffn", f"The {k} experts' SiTU-GLU outputs and their weighted sum",
             (f"Each chosen expert is a SiTU-GLU network inside the latent ({l} → {fh} → {l}; "
              f"{FULL.expert_width:,} → {FULL.expert_hidden:,} → {FULL.expert_width:,} in K3). Their outputs are "
              f"added with the weights p. Computed for this token: the largest expert hidden value is "
              f"{np.abs(f['expert_hidden'][t]).max():.3g} (bound {BETA_GATE * BETA_UP:g}), and ‖u‖ is "
              f"{norm(f['u'][t]) / np.mean([norm(e) for e in f['expert_out'][t]]):.2f} times the experts' mean "
              "output length; the next step's RMSNorm removes that scale."),
             r"u = \textstyle\sum_{i \in \mathcal T} p_i\, E_i(z) \\ "
             r"E_i(z) = \mathrm{SiTU\text{-}GLU}(z)\,W_{\text{down}}^{(i)}",
             ("u = " + " + ".join(rf"{tex(pi)}\,E_{{{i}}}(z)" for i, pi in lead[:2]) + r" \\ + "
              + rf"{tex(lead[2][1])}\,E_{{{lead[2][0]}}}(z) + \dots\ ({k}\ \text{{terms}})"),
             CITE["experts"],
             (Shape(f"E_i(z), {k} experts", dims(k, l), dims(FULL.top_k, FULL.expert_width)),
              Shape("expert hidden", dims(fh), dims(FULL.expert_hidden))),
             "One row per chosen expert (its weight p in the label), one column per latent channel; the bottom row "
             "is their weighted sum u.",
             {"experts": f["expert_out"][t], "indices": idx, "weights": p, "u": f["u"][t]}),
        Step("moe_up", "ffn", "RMSNorm, then back up to full width",
             (f"The weighted sum is normalised (RMSNorm with gain) before the up-projection. “Stable” LatentMoE is "
              "three components for two failure modes (K3 report sec 2.3): at K3's scale the routed path, a chain of "
              "nearly four matrix products, produces exploding internal activations, which this RMSNorm and the "
              "bounded SiTU-GLU suppress; and the load of nearly 10³ experts is hard to balance, which Quantile "
              "Balancing evens. "
              f"Computed: rms(u) = {np.sqrt(np.mean(f['u'][t].astype(np.float64) ** 2)):.3g}; after the norm each "
              "channel is u / rms(u) times its gain, so the scale of u no longer matters."),
             r"r = W_{\text{up}}\,\mathrm{RMSNorm}(u)",
             rf"\lVert u\rVert = {tex(norm(f['u'][t]))} \to \lVert \mathrm{{RMSNorm}}(u)\rVert = "
             rf"{tex(norm(f['u_normed'][t]))} \\ \to \lVert r\rVert = {tex(norm(routed[t]))}",
             CITE["moe_up"],
             (Shape("u", dims(l), dims(FULL.expert_width)), Shape("r (routed output)", dims(cfg.d_model),
                                                                     dims(FULL.d_model))),
             "The latent sum before and after its RMSNorm, and the routed output r at full width.",
             {"u": f["u"][t], "u_normed": f["u_normed"][t], "routed": routed[t]}),
        Step("shared", "ffn", f"The {cfg.n_shared_experts} shared experts, and why they exist",
             (f"Every token also passes through {cfg.n_shared_experts} shared experts that read the full-width x (one "
              f"MLP of hidden {cfg.n_shared_experts * cfg.shared_hidden} here, {nf:,} in K3). The published "
              "rationale (DeepSeekMoE, arXiv 2401.06066): what nearly every token needs is learned once in an "
              "always-on path, leaving the routed experts free to specialise. Live, computed: for this token "
              f"‖shared‖ / ‖routed‖ = {ratio[t]:.2f}; over the prompt's {len(m)} tokens the median is "
              f"{np.median(ratio):.2f}, from {ratio.min():.2f} to {ratio.max():.2f}."),
             r"m = \mathrm{Shared}(x) + W_{\text{up}}\,\mathrm{RMSNorm}(u)",
             rf"\lVert \mathrm{{Shared}}(x)\rVert = {tex(norm(shared[t]))} \\ \lVert r\rVert = {tex(norm(routed[t]))},"
             rf"\ \lVert m\rVert = {tex(norm(m[t]))}",
             CITE["shared"],
             (Shape("shared hidden", dims(cfg.n_shared_experts * cfg.shared_hidden), dims(nf),
                    f"derived: {FULL.n_shared_experts} × {FULL.shared_hidden:,}"),
              Shape("m (FFN output)", dims(cfg.d_model), dims(FULL.d_model))),
             ("Length of the shared and the routed output for every token of the prompt (this token in bold "
              "colour): both paths contribute to every token."),
             {"shared_norm": np.sqrt((shared.astype(np.float64) ** 2).sum(1)),
              "routed_norm": np.sqrt((routed.astype(np.float64) ** 2).sum(1)), "token": t}),
    ]
    return steps


def _residual_step(d: LayerData, t: int, cfg: K3Config) -> Step:
    a, m = d.outputs["attn"][t], d.outputs["ffn"][t]
    after = d.partials["ffn"][t]
    n, first, last = block_of(d.layer, cfg)
    S = cfg.attnres_block_size
    before = None if d.sealed is not None else d.partial_before[t]
    if d.sealed is not None:
        what = "the token embedding" if d.sealed == "emb" else "the running sum"
        seal = (f"This layer opens block {n} (layers {first}–{last}): right after its first read it sealed {what} "
                f"as the source “{d.sealed}”, so the partial sum starts again from a.")
        eq_fill = (rf"\text{{partial}} = a + m \\ \lVert a\rVert = {tex(norm(a))},\ \lVert m\rVert = "
                   rf"{tex(norm(m))},\ \lVert \text{{partial}}\rVert = {tex(norm(after))}")
    else:
        seal = f"This layer is layer {d.layer - first + 1} of block {n} (layers {first}–{last})."
        eq_fill = (rf"\lVert \text{{partial}}\rVert: {tex(norm(before))} \xrightarrow{{+a}} "
                   rf"{tex(norm(d.partials['attn'][t]))} \xrightarrow{{+m}} {tex(norm(after))}")
    nxt = first + S
    if nxt < cfg.num_layers:
        seal += (f" The block seals at layer {nxt}, right after that layer's first read; from then on this sum is the "
                 f"source “block {n}”.")
    else:
        seal += (" It is the last block: it never seals, and the output read before the LM head takes it as the "
                 "partial sum.")
    return Step(
        "residual", "residual", "The module outputs join the open block's sum",
        ("There is no h + f(h): the attention output a and the FFN output m are added to the running sum of the "
         f"open block, which later reads see as one source. {seal}"),
        r"\text{partial} \leftarrow \text{partial} + a + m",
        eq_fill, CITE["residual"],
        (Shape("partial, a, m", dims(cfg.d_model), dims(FULL.d_model)),),
        "The open block's sum before this layer, the two module outputs, and the sum after, per channel "
        "(without the first row when this layer started a new block).",
        {"before": before, "a": a, "m": m, "after": after})


def walk(d: LayerData, token: int, cfg: K3Config, pieces: list[str]) -> list[Step]:
    """The steps of the layer for one token, in the order the forward ran them."""
    T = d.reads["attn"].x.shape[0]
    if not 0 <= token < T:
        raise ValueError(f"token must lie in 0..{T - 1}")
    steps = [_read_step(d, token, "attn", cfg, "read_attn"), _norm_step(d, token, "attn", cfg, "attn")]
    steps += _kda_steps(d, token, cfg) if d.kind == "kda" else _mla_steps(d, token, cfg, pieces)
    steps += [_read_step(d, token, "ffn", cfg, "ffn"), _norm_step(d, token, "ffn", cfg, "ffn")]
    steps += _moe_steps(d, token, cfg) if d.moe else _dense_steps(d, token, cfg)
    steps.append(_residual_step(d, token, cfg))
    return steps


def headline(step: Step) -> str:
    """One computed fact per step, for the map of the whole layer at the top of the page."""
    d, key = step.data, step.key
    if key == "read":
        w = d["weights"]
        return f"{d['names'][d['top']]} gets {w[d['top']]:.0%} of {len(w)} source{'s' if len(w) > 1 else ''}"
    if key == "norm":
        return f"rms(h) = {np.sqrt(np.mean(np.asarray(d['h'], dtype=np.float64) ** 2)):.3g}"
    if key == "kda_qkv":
        return f"‖v‖ = {norm(d['z'][2]):.3f} (head 0); q, k of length 1"
    if key == "kda_gate":
        betas = ", ".join(f"{b:.2f}" for b in d["beta"])
        return f"keeps {d['keep'].min():.1%}–{d['keep'].max():.1%} per channel; β = {betas}"
    if key == "kda_state":
        return f"‖S‖ (head 0) {norm(d['before'][0]):.3f} → {norm(d['after'][0]):.3f}"
    if key == "kda_read":
        return f"‖o‖ (head 0) = {norm(d['o'][0]):.3g}"
    if key in ("kda_out", "mla_gate"):
        return f"gate {d['gate'].min():.2f}–{d['gate'].max():.2f}; ‖a‖ = {norm(d['out']):.3f}"
    if key == "mla_latent":
        return f"{len(d['row'])} values cached for this token"
    if key == "mla_attn":
        p = d["probs"][0]
        return f"head 0: {p.max():.0%} on token {int(np.argmax(p))} of {len(p)}"
    if key == "dense":
        return f"largest hidden value {np.abs(d['hidden']).max():.3g} (bound 100)"
    if key == "router":
        return f"cutoff {d['cutoff']:.3f}; p from {d['weights'].min():.3f} to {d['weights'].max():.3f}"
    if key == "moe_down":
        return f"‖z‖ = {norm(d['z']):.3f}"
    if key == "experts":
        return f"‖u‖ = {norm(d['u']):.3g}"
    if key == "moe_up":
        return f"‖r‖ = {norm(d['routed']):.3f}"
    if key == "shared":
        t = d["token"]
        return f"‖shared‖ / ‖routed‖ = {d['shared_norm'][t] / max(d['routed_norm'][t], 1e-12):.2f}"
    if key == "residual":
        return f"‖partial‖ → {norm(d['after']):.3g}"
    if key == "gradient":
        if d["last"]:
            return "none: the last token predicts nothing in the prompt"
        return f"raise {int((d['descent'] > 0).sum())}, lower {int((d['descent'] < 0).sum())} of the chosen scores"
    return ""


def gradient_step(d: LayerData, token: int, loss: float, grads: np.ndarray, cfg: K3Config) -> Step:
    """Step 5: d(loss)/d(s_i) of this token's chosen experts (grads [T, k], slot order)."""
    g = grads[token]
    idx, s = d.route["indices"][token], d.route["scores"][token][d.route["indices"][token]]
    up = int((g < 0).sum())
    check = float(np.dot(s.astype(np.float64), g.astype(np.float64)))
    last = token == grads.shape[0] - 1
    text = ("The router is trained by the next-token loss, and the only way in is through the weights p_i: the "
            f"choice of the top {cfg.top_k} has no gradient, so the other {cfg.n_routed_experts - cfg.top_k} "
            "experts' scores get exactly zero from this token, and the balancing bias b, which only chose the set, "
            "gets none at all (Quantile Balancing sets it between batches and it is frozen at inference). ")
    if last:
        text += ("This is the prompt's last token: it predicts nothing inside the prompt and no later token reads "
                 "it, so every gradient here is zero. Pick an earlier token.")
    else:
        text += (f"Computed for this token (loss = the prompt's mean next-token cross-entropy, {loss:.3f}): a "
                 f"gradient step would raise {up} of its {cfg.top_k} scores and lower {cfg.top_k - up}. Because p "
                 "does not change when every chosen score is scaled alike, the raises and lowers balance: "
                 "Σ s_i ∂L/∂s_i = 0.")
    return Step(
        "gradient", "learn", "Which scores the loss would raise or lower",
        text,
        (r"\frac{\partial L}{\partial s_j} = \frac{1}{\sum_{\mathcal T} s}\Big(\frac{\partial L}{\partial p_j} - "
         r"\sum_{i \in \mathcal T} p_i \frac{\partial L}{\partial p_i}\Big) \\ "
         r"\frac{\partial L}{\partial b} = 0"),
        rf"\textstyle\sum_{{i \in \mathcal T}} s_i \frac{{\partial L}}{{\partial s_i}} = {tex(check)}",
        CITE["gradient"],
        (Shape("∂L/∂s (nonzero)", dims(cfg.top_k), dims(FULL.top_k)),),
        ("−∂L/∂s_i for each chosen expert: a bar above zero is a score one gradient step would raise (more "
         "weight "
         "on that expert would lower the loss), below zero one it would lower. Computed by backpropagation through the "
         "live model with its routing held fixed."),
        {"indices": idx, "descent": -g, "scores": s, "last": last})


_REPORT_REF = re.compile(r"K3 report (?:Eq\. \d+(?:–\d+)?(?: and Eq\. \d+)?, )?sec \d+(?:\.\d+)*")


def report_ref(cite: str) -> str:
    """The K3 report's equation and section a step's citation opens with, e.g. "K3 report Eq. 11, sec 2.3"."""
    m = _REPORT_REF.match(cite)
    return m.group(0) if m else ""


def layer_map(steps: list[Step], shown: set[str], gradient: str) -> str:
    """Every step of the layer in one table, with one computed number each and the K3 report's equation;
    ▶ marks the steps drawn below."""
    rows = ["| | step | part | this token (computed) | in the K3 report |", "|---|---|---|---|---|"]
    for n, s in enumerate(steps, 1):
        rows.append(f"| {'▶' if s.part in shown else ''} | {n}. {s.title} | {PART_TITLES[s.part][0]} | "
                    f"{headline(s)} | {report_ref(s.cite).removeprefix('K3 report ')} |")
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
