"""The steps of one layer from its FFN on, for one token: the dense SiTU-GLU FFN (layer 0) or Stable
LatentMoE (router, latent, experts, shared experts), what joins the open AttnRes block's sum, and the
router's gradient (`K3Model.router_gradients`). As in app/layer_steps_attn.py, each step's prose, equations
and headline carry this token's computed numbers.
"""
from __future__ import annotations

import numpy as np

from app.layer_data import CITE, FULL, LayerData, Shape, Step, block_of
from app.layer_format import dims, norm, tex
from model.activations import BETA_GATE, BETA_UP
from model.config import K3Config


def dense_steps(d: LayerData, t: int, cfg: K3Config) -> list[Step]:
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
        {"hidden": f["hidden"][t], "out": f["out"][t]},
        headline=f"largest hidden value {hmax:.3g} (bound {BETA_GATE * BETA_UP:g})")]


def moe_steps(d: LayerData, t: int, cfg: K3Config) -> list[Step]:
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
    shared_norm = np.sqrt((shared.astype(np.float64) ** 2).sum(1))   # [T]
    routed_norm = np.sqrt((routed.astype(np.float64) ** 2).sum(1))   # [T]
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
             {"scores": s, "bias": b, "indices": idx, "weights": p, "cutoff": cut},
             headline=f"cutoff {cut:.3f}; p from {p.min():.3f} to {p.max():.3f}"),
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
             {"x": d.reads["ffn"].x[t], "z": f["z"][t]},
             headline=f"‖z‖ = {norm(f['z'][t]):.3f}"),
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
             {"experts": f["expert_out"][t], "indices": idx, "weights": p, "u": f["u"][t]},
             headline=f"‖u‖ = {norm(f['u'][t]):.3g}"),
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
             {"u": f["u"][t], "u_normed": f["u_normed"][t], "routed": routed[t]},
             headline=f"‖r‖ = {norm(routed[t]):.3f}"),
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
             {"shared_norm": shared_norm, "routed_norm": routed_norm, "token": t},
             headline=f"‖shared‖ / ‖routed‖ = {shared_norm[t] / max(routed_norm[t], 1e-12):.2f}"),
    ]
    return steps


def residual_step(d: LayerData, t: int, cfg: K3Config) -> Step:
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
        {"before": before, "a": a, "m": m, "after": after},
        headline=f"‖partial‖ → {norm(after):.3g}")



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
        {"indices": idx, "descent": -g, "scores": s, "last": last},
        headline=("none: the last token predicts nothing in the prompt" if last
                  else f"raise {up}, lower {int((g > 0).sum())} of the chosen scores"))
