"""Data behind the Quantization lab (docs/ARCHITECTURE.md section 7; docs/APP.md page 8).

The MX value grids, how one block of 32 picks its power-of-two scale, the block scales and the
quantisation error of a layer's weights, and what rounding does to the live model's behaviour.

The shipped checkpoint already stores every routed-expert weight as MXFP4 (codes + E8M0 scales, see
model/checkpoint.py), so there is no higher-precision copy of the experts to compare with. What the
behaviour experiments compare, always against the same reference (the weights as stored, activations
in float32, i.e. forward(quant=False)):
  "act"    forward(quant=True): MXFP8 activations inside the experts (the MXFP4 re-quantisation of the
           stored weights is exact, so this is the only difference);
  "coarse" the stored expert weights re-quantised to MXFP4 with one scale per 128 values (coarser);
  "router" the bf16 router weights rounded to MXFP4;
  "all"    every bf16 weight matrix (attention, router, latent projections, shared experts, dense FFN,
           LM head) rounded to MXFP4, as if K3 kept nothing in higher precision.
Pure functions first; thin Streamlit-cached wrappers at the end.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st
import torch

from app import assets
from model import cost
from model.checkpoint import is_expert_tensor
from model.config import K3Config
from model.k3 import K3Model, K3Output, model_with_weights
from model.quant import FORMATS, bits_per_value, block_scale_exponents, element_grid, mx_fake_quant, pack_mxfp4

HELDOUT_CHUNK = 128            # tokens per row of a held-out forward (the live model's cap)
HELDOUT_ROWS = 2               # rows of the held-out sample: 256 tokens
BLOCK = 32
COARSE_BLOCK = 128
FORMAT_NAMES = {"e2m1": "MXFP4 (E2M1 elements)", "e4m3": "MXFP8 (E4M3 elements)"}
MATRICES = ("w_gate", "w_up", "w_down")
SHARED = {"w_gate": "shared.w_gate.weight", "w_up": "shared.w_up.weight", "w_down": "shared.w_down.weight"}
SOURCES = {"routed": "routed expert (MXFP4)", "shared": "shared experts (bf16)", "example": "worked example"}
# Section 7 worked examples: (values, X, expected dequantised values)
EXAMPLES = {
    "e2m1": ([0.1, -0.25, 0.3, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -3.7, 7.9], 1.0,
             [0, -0.0, 0.5, 1, 1, 2, 2, 4, 4, -4, 6]),
    "e4m3": ([1000, 3.14159, 0.01, -100, 0.3], 2.0, [896, 3.25, 0.01171875, -96, 0.3125]),
}
VARIANTS = {
    "act": "MXFP8 activations in the experts",
    "coarse": "expert weights: one scale per 128 values",
    "router": "router weights in MXFP4",
    "all": "every bf16 matrix in MXFP4",
}
_LIVE, _K3 = K3Config.tiny(), K3Config.full()


def act_blocks_note(live: K3Config = _LIVE, k3: K3Config = _K3, block: int = BLOCK) -> str:
    """How the MXFP8 activations are blocked, in the live instance and in K3: model.moe rounds each token's
    row on its own (mx_fake_quant per_row), and a row no longer than a block is one block of its own length."""
    rows = (live.expert_width, live.expert_hidden)
    if max(rows) > block:                       # not the tiny instance: say it in blocks of 32
        here = " and ".join(f"{-(-n // block)} blocks of {block}" for n in rows)
    else:
        here = (f"each row is one block of its own, {rows[0]} and {rows[1]} values long, with its own scale "
                f"(not a block of {block})")
    return (f"In the live instance a token's latent row (the experts' input) holds {rows[0]} values and an expert's "
            f"hidden row {rows[1]}: {here}. K3's rows, {k3.expert_width:,} and {k3.expert_hidden:,} values wide, "
            f"are {k3.expert_width // block} and {k3.expert_hidden // block} blocks of {block}, each block with its "
            "own scale.")


VARIANT_HOW = {
    "act": "forward(quant=True) against forward(quant=False). quant=True rounds the experts' inputs and hidden "
           "activations to MXFP8, every token's row on its own, and re-quantises the expert weights to MXFP4, "
           "which changes nothing because they are already MXFP4 values (checked below). So the only difference "
           "is the MXFP8 activations. " + act_blocks_note(),
    "coarse": "the stored MXFP4 expert weights re-quantised with one E8M0 scale per 128 values (a whole expert "
              "matrix of the live instance) instead of per 32: a coarser format, all else the same. A finer "
              "format cannot be tried: the information below MXFP4 was discarded when the checkpoint was saved.",
    "router": "the router's weights (bf16 in the checkpoint; K3 keeps the router in higher precision) rounded to "
              "MXFP4 with blocks of 32 inputs; experts and activations unchanged.",
    "all": "every weight matrix the checkpoint keeps in bf16 (attention, router, latent projections, shared "
           "experts, the dense layer-0 FFN, the LM head) rounded to MXFP4 with blocks of 32; the embedding table, "
           "norms and convolution taps stay as they are.",
}


# ---- the value grids ------------------------------------------------------------------------------

def grid_frame(fmt: str) -> pd.DataFrame:
    """Every non-negative value of an element format with its bit pattern (sign, exponent, mantissa)."""
    f = FORMATS[fmt]
    ebits = f.bits - 1 - f.mbits
    vals = element_grid(fmt).numpy()
    rows = []
    for i, v in enumerate(vals):
        if v < 2.0 ** f.emin:                          # zero and subnormals: exponent field 0
            field, mant, kind = 0, round(v / 2.0 ** (f.emin - f.mbits)), "zero" if v == 0 else "subnormal"
        else:
            e = math.frexp(v)[1] - 1                   # floor(log2 v), exact
            field, mant, kind = e - f.emin + 1, round((v / 2.0 ** e - 1) * 2 ** f.mbits), "normal"
        gap = vals[i + 1] - v if i + 1 < len(vals) else np.nan
        rows.append({"value": float(v), "kind": kind, "bits": f"0 {field:0{ebits}b} {mant:0{f.mbits}b}",
                     "gap to next": gap, "relative gap": gap / v if v else np.nan})
    return pd.DataFrame(rows)


def grid_counts(fmt: str) -> dict:
    """What the value grid of an element format holds, counted from element_grid (OCP MX v1.0): the positive
    values, the subnormals, how many values each power of two [2^e, 2^(e+1)) holds among the normals, and the
    relative step between neighbouring normals."""
    g = grid_frame(fmt)
    pos = g[g["value"] > 0]
    normal = pos[pos["kind"] == "normal"]
    per = normal.groupby(normal["value"].map(lambda v: math.frexp(v)[1] - 1)).size()
    full = 2 ** FORMATS[fmt].mbits
    whole = [int(e) for e, n in per.items() if n == full]
    gaps = normal["relative gap"].dropna()
    return {"positive": len(pos), "distinct": 2 * len(pos) + 1, "codes": 2 * len(g) if fmt == "e2m1" else None,
            "subnormals": int((pos["kind"] == "subnormal").sum()), "per_binade": full,
            "full_binades": (min(whole), max(whole)), "top_exp": int(per.index.max()), "top_count": int(per.iloc[-1]),
            "max": float(pos["value"].max()), "min_normal": float(normal["value"].min()),
            "gap_min": float(gaps.min()), "gap_max": float(gaps.max())}


def grids_caption() -> str:
    """The caption of the two grids, every count read off element_grid."""
    from app.charts.quant_lab import superscript
    e2, e4 = grid_counts("e2m1"), grid_counts("e4m3")
    lo, hi = e4["full_binades"]
    return (f"E2M1 has only {e2['distinct']} distinct values (0 and ±0.5 … ±{e2['max']:g}; of its {e2['codes']} "
            f"codes the last is −0): halfway between 4 and 6 there is nothing. E4M3 has {e4['positive']} positive "
            f"values: {e4['per_binade']} in every power of two from 2{superscript(lo)} to 2{superscript(hi)} "
            f"({hi - lo + 1} of them), {e4['top_count']} in [2{superscript(e4['top_exp'])}, {e4['max']:g}] (the "
            f"code that would be {2 ** (e4['top_exp'] + 1) - 2 ** (e4['top_exp'] - 3):g} means NaN) and "
            f"{e4['subnormals']} subnormals below 2{superscript(lo)}; between neighbouring normal values the "
            f"relative step stays between {e4['gap_min']:.1%} and {e4['gap_max']:.1%}. Hover a tick for its bit "
            "pattern. Computed: model.quant.element_grid (OCP Microscaling v1.0, Table 1).")


# ---- one block ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BlockSteps:
    fmt: str
    values: np.ndarray        # the block as given
    amax: float
    floor_log2: int | None    # floor(log2 amax); None when the block is all zeros
    emax: int
    scale_exp: int            # E of X = 2^E, as the model picks it (clamped to E8M0)
    scaled: np.ndarray        # V / X
    grid: np.ndarray          # P: V / X rounded on the element grid (ties to even), clamped
    dequantised: np.ndarray   # X * P, what the model computes with

    @property
    def X(self) -> float:
        return 2.0 ** self.scale_exp

    @property
    def error(self) -> np.ndarray:
        return self.dequantised - self.values

    @property
    def unchanged(self) -> bool:
        return bool(np.array_equal(self.dequantised, self.values))


def explain_block(values, fmt: str) -> BlockSteps:
    """The steps of docs/ARCHITECTURE.md section 7 for one block (at most 32 values), read off the model's
    own quantiser: X from model.quant.block_scale_exponents, X * P from mx_fake_quant."""
    v = torch.as_tensor(np.asarray(values, dtype=np.float64))
    if v.numel() == 0 or v.numel() > BLOCK:
        raise ValueError(f"a block holds 1..{BLOCK} values, got {v.numel()}")
    if not bool(torch.isfinite(v).all()):
        raise ValueError("the block holds a NaN or an infinity")
    f = FORMATS[fmt]
    E = int(block_scale_exponents(v, fmt, BLOCK)[0])
    deq = mx_fake_quant(v, fmt, BLOCK).numpy()
    amax = float(v.abs().max())
    X = 2.0 ** E
    return BlockSteps(fmt, v.numpy(), amax, (math.frexp(amax)[1] - 1) if amax > 0 else None, f.emax, E,
                      v.numpy() / X, deq / X, deq)


def block_table(steps: BlockSteps, codes: list[str] | None = None) -> pd.DataFrame:
    df = pd.DataFrame({"element": np.arange(len(steps.values)), "value V": steps.values, "V / X": steps.scaled,
                       "on the grid P": steps.grid, "X · P": steps.dequantised, "error": steps.error})
    if codes is not None:
        df.insert(4, "4-bit code", codes)
    return df


def e2m1_codes(values) -> list[str]:
    """The 4-bit codes (sign, exponent, mantissa) the checkpoint stores for a block, via pack_mxfp4."""
    v = torch.as_tensor(np.asarray(values, dtype=np.float32))
    packed, _ = pack_mxfp4(v)
    nibbles = torch.stack([packed & 15, packed >> 4], 1).reshape(-1)[: v.numel()]
    return [f"{int(c) >> 3} {(int(c) >> 1) & 3:02b} {int(c) & 1}" for c in nibbles]


# ---- the live weights -----------------------------------------------------------------------------

def blocks_per_tensor(model: K3Model, source: str) -> int:
    cfg = model.cfg
    if source == "routed":
        return max(1, cfg.expert_width * cfg.expert_hidden // BLOCK)           # one expert's matrix
    layer = model.layers[cfg.moe_layers[0]].ffn
    return -(-layer.shared.w_gate.weight.numel() // BLOCK)


def weight_block(model: K3Model, layer: int, matrix: str, source: str, block: int, expert: int = 0) -> np.ndarray:
    """32 consecutive values of the row-major flattening of one expert's matrix (or a shared expert's)."""
    ffn = model.layers[layer].ffn
    if source == "routed":
        t = getattr(ffn, matrix)[expert].reshape(-1)
    else:
        t = getattr(ffn.shared, matrix).weight.reshape(-1)
    return t[block * BLOCK:(block + 1) * BLOCK].detach().double().numpy()


def layer_scale_exponents(model: K3Model, layer: int) -> pd.DataFrame:
    """E of every MXFP4 block of the layer's three routed-expert tensors: the stored E8M0 bytes - 127
    (blocks of 32 along each expert's flattening; each expert holds a whole number of blocks)."""
    ffn = model.layers[layer].ffn
    rows = []
    for m in MATRICES:
        t = getattr(ffn, m).detach()
        _, scales = pack_mxfp4(t.float())
        e = scales.to(torch.int64).numpy() - 127
        vals, counts = np.unique(e, return_counts=True)
        rows += [{"matrix": m, "exponent": int(x), "blocks": int(c)} for x, c in zip(vals, counts)]
    return pd.DataFrame(rows)


_LABELS = {
    "attn.w_dq.weight": "MLA query down", "attn.w_uq.weight": "MLA query up", "attn.w_dkv.weight": "MLA latent down",
    "attn.w_ukv.weight": "MLA latent up", "attn.w_g.weight": "MLA output gate", "attn.w_o.weight": "MLA output",
    "attn.in_proj.weight": "KDA q/k/v/beta/decay in", "attn.W_fb.weight": "KDA gate up",
    "attn.out_proj.weight": "KDA output",
    "ffn.router.weight": "router", "ffn.down.weight": "latent down (d → l)", "ffn.up.weight": "latent up (l → d)",
    "ffn.shared.w_gate.weight": "shared experts gate", "ffn.shared.w_up.weight": "shared experts up",
    "ffn.shared.w_down.weight": "shared experts down", "ffn.w_gate": "routed experts gate",
    "ffn.w_up": "routed experts up", "ffn.w_down": "routed experts down",
}


def _is_matrix(name: str, p: torch.Tensor) -> bool:
    # weight matrices (nn.Linear [out, in] and the stacked experts); not norms, convolution taps,
    # per-head vectors like dt_bias, or AttnRes queries
    return is_expert_tensor(name) or (name.endswith(".weight") and p.dim() == 2)


def _quantise(name: str, t: torch.Tensor, fmt: str, block: int) -> torch.Tensor:
    if is_expert_tensor(name):       # each expert's flattening, as the model and the checkpoint block it
        return mx_fake_quant(t.reshape(t.shape[0], -1), fmt, block, per_row=True).reshape(t.shape)
    return mx_fake_quant(t, fmt, block)


def _rel_error(q: torch.Tensor, t: torch.Tensor) -> float:
    n = float(t.norm())
    return float((q - t).norm()) / n if n else 0.0


def layer_errors(model: K3Model, layer: int) -> pd.DataFrame:
    """Relative RMS error ||Q(W) - W|| / ||W|| of every weight matrix of one layer, for MXFP4 (blocks of
    32 and of 128) and MXFP8; what each is stored as in the checkpoint."""
    rows = []
    for name, p in model.layers[layer].named_parameters():
        full = f"layers.{layer}.{name}"
        if not _is_matrix(full, p):
            continue
        t = p.detach().double()
        expert = is_expert_tensor(full)
        rows.append({
            "tensor": _LABELS.get(name, name), "name": full, "stored as": "MXFP4" if expert else "bf16",
            "values": t.numel(),
            "MXFP4, blocks of 32": _rel_error(_quantise(full, t, "e2m1", BLOCK), t),
            "MXFP4, blocks of 128": _rel_error(_quantise(full, t, "e2m1", COARSE_BLOCK), t),
            "MXFP8, blocks of 32": _rel_error(_quantise(full, t, "e4m3", BLOCK), t),
        })
    return pd.DataFrame(rows)


def experts_already_mxfp4(model: K3Model, layer: int) -> bool:
    """True when re-quantising the layer's expert weights to MXFP4 (blocks of 32) changes nothing."""
    ffn = model.layers[layer].ffn
    for m in MATRICES:
        t = getattr(ffn, m).detach()
        if not torch.equal(_quantise(f"layers.{layer}.ffn.{m}", t, "e2m1", BLOCK), t):
            return False
    return True


# ---- behaviour: a variant against the reference ---------------------------------------------------

def variant_tensors(model: K3Model, variant: str) -> dict[str, torch.Tensor]:
    """The tensors a weight variant replaces (name -> new tensor); empty for "act"."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; use one of {sorted(VARIANTS)}")
    out = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if variant == "coarse" and is_expert_tensor(name):
                out[name] = _quantise(name, p.detach(), "e2m1", COARSE_BLOCK)
            elif variant == "router" and name.endswith("ffn.router.weight"):
                out[name] = mx_fake_quant(p.detach(), "e2m1", BLOCK)
            elif variant == "all" and _is_matrix(name, p) and not is_expert_tensor(name) and name != "embed.weight":
                out[name] = mx_fake_quant(p.detach(), "e2m1", BLOCK)
    return out


def variant_model(model: K3Model, variant: str) -> K3Model:
    """A second model whose changed tensors are new and whose other tensors are the live model's own
    (shared, never written): the live model is not touched."""
    changed = variant_tensors(model, variant)
    state = {k: changed.get(k, v) for k, v in model.state_dict().items()}
    return model_with_weights(model.cfg, state)


@dataclass(frozen=True)
class Behaviour:
    logp: np.ndarray          # [B, T, V] next-token log-probabilities
    experts: np.ndarray       # [L, B, T, k] routed experts of every MoE layer
    layers: tuple[int, ...]   # the MoE layers, in order


def behaviour(out: K3Output) -> Behaviour:
    layers = tuple(sorted(out.trace.routes))
    logp = torch.log_softmax(out.logits.float(), -1).numpy()
    experts = np.stack([out.trace.experts(i).numpy() for i in layers]).astype(np.int32)
    return Behaviour(logp, experts, layers)


def run(model: K3Model, ids: torch.Tensor, variant: str | None, variants: dict | None = None) -> Behaviour:
    """Behaviour of the reference (variant None) or of a variant on ids [B, T]. `variants` caches built
    variant models by name (the page passes its process-wide cache)."""
    with torch.inference_mode():
        if variant is None:
            return behaviour(model(ids, record=False))
        if variant == "act":
            return behaviour(model(ids, quant=True, record=False))
        m = (variants or {}).get(variant) or variant_model(model, variant)
        return behaviour(m(ids, record=False))


@dataclass(frozen=True)
class Comparison:
    per_layer: pd.DataFrame   # layer, share of top-k choices changed
    kl: np.ndarray            # [B*T] KL(reference || variant) of the next-token distribution, nats
    top1: float               # share of positions whose most likely next token is the same
    changed: float            # share of all (layer, token, slot) choices changed

    @property
    def kl_mean(self) -> float:
        return float(self.kl.mean())


def compare(ref: Behaviour, var: Behaviour) -> Comparison:
    if ref.logp.shape != var.logp.shape or ref.layers != var.layers:
        raise ValueError("the two behaviours come from different inputs")
    k = ref.experts.shape[-1]
    same = (ref.experts[..., :, None] == var.experts[..., None, :]).any(-1).sum(-1)      # [L, B, T]
    changed = 1.0 - same / k
    per_layer = pd.DataFrame({"layer": list(ref.layers), "changed": changed.reshape(len(ref.layers), -1).mean(1)})
    p = np.exp(ref.logp)
    kl = (p * (ref.logp - var.logp)).sum(-1).reshape(-1)
    top1 = float((ref.logp.argmax(-1) == var.logp.argmax(-1)).mean())
    return Comparison(per_layer, np.maximum(kl, 0.0), top1, float(changed.mean()))


def heldout_ids(tokenizer, rows: int = HELDOUT_ROWS, chunk: int = HELDOUT_CHUNK) -> torch.Tensor:
    """The first rows x chunk tokens of assets/heldout_sample.txt (text the live model never trained
    on, cut from the validation split, see app/routing.py) as [rows, chunk]."""
    ids = tokenizer.encode(assets.read_text(assets.HELDOUT))
    rows = max(1, min(rows, len(ids) // chunk))
    if len(ids) < chunk:
        return torch.tensor([ids])
    return torch.tensor(ids[: rows * chunk]).view(rows, chunk)


# ---- K3 scale -------------------------------------------------------------------------------------

def k3_bytes_table(cfg: K3Config | None = None) -> pd.DataFrame:
    parts = cost.weight_bytes(cfg)
    rows = [{"component": w.component, "parameters": w.params, "K3 stores it as":
             (f"MXFP4 ({w.bits:g} bits)" if w.bits < 16 else
              "bf16 (published: kept in higher precision)" if w.basis == "published" else "bf16 (assumed)"),
             "bits per value": w.bits, "bytes, all bf16": w.bytes_bf16, "bytes, K3": w.bytes_k3,
             "active bytes per token, K3": w.active_bytes_k3} for w in parts]
    return pd.DataFrame(rows)


GB_COLUMNS = {"bytes, all bf16": "GB, all bf16", "bytes, K3": "GB, K3",
              "active bytes per token, K3": "GB read per token, K3"}


def k3_gb_table(cfg: K3Config | None = None) -> pd.DataFrame:
    """k3_bytes_table with its byte columns in GB (10^9 bytes), for display."""
    d = k3_bytes_table(cfg)
    return d.assign(**{c: d[c] / 1e9 for c in GB_COLUMNS}).rename(columns=GB_COLUMNS)


def k3_bytes_summary(cfg: K3Config | None = None) -> dict:
    parts = cost.weight_bytes(cfg)
    routed = next(w for w in parts if w.component == "routed experts")
    return {"bf16": cost.total_bytes(parts, "bf16"), "k3": cost.total_bytes(parts, "k3"),
            "routed_params": routed.params, "other_params": sum(w.params for w in parts) - routed.params,
            "bits": routed.bits, "active_k3": cost.total_bytes(parts, "k3", active=True),
            "active_bf16": cost.total_bytes(parts, "bf16", active=True),
            "bits_mxfp8": bits_per_value("e4m3")}


# ---- cached wrappers for the page -----------------------------------------------------------------

@st.cache_resource(max_entries=8, show_spinner=False)
def cached_spec(name: str, theme_type: str | None = None) -> dict:
    """Vega-Lite specs that depend on nothing the person chooses (but the theme, which colours their
    text), built once per process: ui.vega_chart and st.vega_lite_chart copy a spec before changing it,
    so sharing is safe."""
    from app.charts import quant_lab as charts
    if name == "grids":
        return charts.grids_spec(grid_frame("e2m1"), grid_frame("e4m3"), theme_type)
    if name == "k3_bytes":
        return charts.k3_bytes_spec(k3_bytes_table(), theme_type)
    raise ValueError(f"no chart named {name}")


@st.cache_data(max_entries=128, show_spinner=False)
def cached_layer_scales(layer: int) -> pd.DataFrame:
    from app.live import computing, live
    model = live().model
    with computing():
        return layer_scale_exponents(model, layer)


@st.cache_data(max_entries=128, show_spinner=False)
def cached_layer_errors(layer: int) -> tuple[pd.DataFrame, bool]:
    from app.live import computing, live
    m = live().model
    with computing():
        return layer_errors(m, layer), experts_already_mxfp4(m, layer)


@st.cache_resource(max_entries=3, show_spinner=False)
def _variant(variant: str) -> K3Model:
    from app.live import computing, live
    model = live().model
    with computing():
        return variant_model(model, variant)


def _behaviour_of(ids: tuple[int, ...], variant: str | None) -> Behaviour:
    from app.live import computing, forward
    if variant is None:
        return behaviour(forward(ids))                      # shared with the other pages
    if variant == "act":
        return behaviour(forward(ids, quant=True))
    m = _variant(variant)
    with computing():
        return behaviour(m(torch.tensor([ids]), record=False, max_tokens=HELDOUT_CHUNK))


@st.cache_data(max_entries=64, show_spinner=False)
def cached_prompt_comparison(ids: tuple[int, ...], variant: str) -> Comparison:
    return compare(_behaviour_of(ids, None), _behaviour_of(ids, variant))


@st.cache_resource(show_spinner=False)
def _heldout_reference() -> tuple[torch.Tensor, Behaviour]:
    from app.live import computing, live
    lv = live()
    ids = heldout_ids(lv.tokenizer)
    with computing():
        return ids, run(lv.model, ids, None)


@st.cache_data(max_entries=8, show_spinner=False)
def cached_heldout_comparison(variant: str) -> Comparison:
    from app.live import computing, live
    ids, ref = _heldout_reference()
    variants = {} if variant == "act" else {variant: _variant(variant)}
    model = live().model
    with computing():
        return compare(ref, run(model, ids, variant, variants))
