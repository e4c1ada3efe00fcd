"""The steps of one layer up to its attention output, for one token: the depth read and the RMSNorm before
each module (used before the FFN too), then Kimi Delta Attention or gated MLA. Each step's prose, equations
and headline carry this token's computed numbers; equations follow docs/ARCHITECTURE.md and every step names
the K3 report's own equation and section ("K3 report Eq. 11, sec 2.3") beside it. Shapes: the live
instance's beside K3's, both from model.config.
"""
from __future__ import annotations

import math

import numpy as np

from app.layer_data import CITE, FULL, LayerData, Shape, Step
from app.layer_format import dims, norm, tex
from app.text import chip_label
from model.config import K3Config


def _src(name: str) -> str:
    return r"V_{\text{" + name.replace(" ", r"\ ") + "}}"


def _gate_headline(gate: np.ndarray, out: np.ndarray) -> str:
    """The headline of both attention kinds' last step: the output gate's range and the output's length."""
    return f"gate {gate.min():.2f}–{gate.max():.2f}; ‖a‖ = {norm(out):.3f}"


def read_step(d: LayerData, t: int, m: str, cfg: K3Config, part: str) -> Step:
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
        data={"names": r.names, "weights": w, "sources": r.sources[t], "h": r.h[t], "top": top},
        headline=f"{r.names[top]} gets {w[top]:.0%} of {S} source{'s' if S > 1 else ''}")


def norm_step(d: LayerData, t: int, m: str, cfg: K3Config, part: str) -> Step:
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
        data={"h": h, "x": x},
        headline=f"rms(h) = {rms:.3g}")


def kda_steps(d: LayerData, t: int, cfg: K3Config) -> list[Step]:
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
              "z": np.stack([vec[h] for h in range(H) for vec in (q, k, v)])},
             headline=f"‖v‖ = {norm(v[0]):.3f} (head 0); q, k of length 1"),
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
             {"keep": keep, "beta": beta},
             headline=(f"keeps {keep.min():.1%}–{keep.max():.1%} per channel; "
                       f"β = {', '.join(f'{x:.2f}' for x in beta)}")),
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
             {"before": S_before, "after": S_after, "change": S_after - S_before, "write_check": decayed + write},
             headline=f"‖S‖ (head 0) {norm(S_before[0]):.3f} → {norm(S_after[0]):.3f}"),
        Step("kda_read", "attn", "The read: qᵀS after the write",
             (f"The query reads the state after the write: o = Sᵀq per head, with q scaled by d_k^−1/2 = "
              f"{dk ** -0.5:.3f}. Computed: ‖o‖ = {', '.join(f'{norm(o[h]):.3f}' for h in range(H))} for heads "
              f"{', '.join(map(str, range(H)))}."),
             r"o = S^{\top} q \,/\sqrt{d_k}",
             rf"o_h = S_h^{{\top}} q_h \cdot {tex(dk ** -0.5)},\quad \lVert o_0\rVert = {tex(norm(o[0]))}",
             CITE["kda_read"],
             (Shape("o", dims(H, dk), dims(Hf, dkf)),),
             "The read per head and value channel.",
             {"o": o},
             headline=f"‖o‖ (head 0) = {norm(o[0]):.3g}"),
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
             {"normed": a["o_normed"][t].reshape(-1), "gate": gate, "gated": a["gated"][t], "out": a["out"][t]},
             headline=_gate_headline(gate, a["out"][t])),
    ]
    return steps


def mla_steps(d: LayerData, t: int, cfg: K3Config, pieces: list[str]) -> list[Step]:
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
             {"c": a["latent"][t], "k_rope": a["k_rope"][t], "row": row},
             headline=f"{len(row)} values cached for this token"),
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
             {"probs": probs, "pieces": pieces[:t + 1]},
             headline=f"head 0: {probs[0].max():.0%} on token {tops[0]} of {len(probs[0])}"),
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
             {"o": o, "gate": gate, "gated": a["gated"][t], "out": a["out"][t]},
             headline=_gate_headline(gate, a["out"][t])),
    ]

