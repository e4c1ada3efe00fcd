"""Data of the Inside-one-layer page: what the live model's forward recorded for one layer (`LayerData`,
`layer_data`), the record each step of the walk becomes (`Step`, `Shape`), and where each step's equation is
written down (`CITE`).

Every number comes from one cached forward of the live model: the AttnRes reads, module inputs,
outputs and partial sums its trace recorded, and each module's intermediates as the module's own
`parts` computes them from the recorded input (`K3Model.inspect`). Nothing before the layer runs again.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import torch

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
_REPORT_REF = re.compile(r"K3 report (?:Eq\. \d+(?:–\d+)?(?: and Eq\. \d+)?, )?sec \d+(?:\.\d+)*")


def report_ref(cite: str) -> str:
    """The K3 report's equation and section a step's citation opens with, e.g. "K3 report Eq. 11, sec 2.3"."""
    m = _REPORT_REF.match(cite)
    return m.group(0) if m else ""


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
    data: dict = field(compare=False)   # what the figure draws
    headline: str        # one computed fact, the step's row in the map of the whole layer (app.layer.layer_map)


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


def block_of(layer: int, cfg: K3Config) -> tuple[int, int, int]:
    """(1-based block number, first layer, last layer) of the AttnRes block holding `layer`."""
    S = cfg.attnres_block_size
    n = layer // S
    return n + 1, n * S, min((n + 1) * S, cfg.num_layers) - 1
