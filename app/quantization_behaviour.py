"""What rounding does to the live model's behaviour: each experiment (VARIANTS) changes one thing and is compared
with the same reference, the weights as stored with activations in float32 (forward(quant=False)):
  "act"    forward(quant=True): MXFP8 activations inside the experts (the MXFP4 re-quantisation of the
           stored weights is exact, so this is the only difference);
  "coarse" the stored expert weights re-quantised to MXFP4 with one scale per 128 values (coarser);
  "router" the bf16 router weights rounded to MXFP4;
  "all"    every bf16 weight matrix (attention, router, latent projections, shared experts, dense FFN,
           LM head) rounded to MXFP4, as if K3 kept nothing in higher precision.
The shipped checkpoint already stores every routed-expert weight as MXFP4 (codes + E8M0 scales, see
model/checkpoint.py), so there is no higher-precision copy of the experts to compare with. Pure functions;
app/quantization_cache.py runs them for the page.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from app import assets
from app.quantization_blocks import BLOCK
from app.quantization_weights import COARSE_BLOCK, is_matrix, quantise
from model.checkpoint import is_expert_tensor
from model.k3 import K3Model, K3Output, model_with_weights
from model.quant import mx_fake_quant

HELDOUT_CHUNK = 128            # tokens per row of a held-out forward (the live model's cap)
HELDOUT_ROWS = 2               # rows of the held-out sample: 256 tokens
VARIANTS = {
    "act": "MXFP8 activations in the experts",
    "coarse": "expert weights: one scale per 128 values",
    "router": "router weights in MXFP4",
    "all": "every bf16 matrix in MXFP4",
}


def variant_tensors(model: K3Model, variant: str) -> dict[str, torch.Tensor]:
    """The tensors a weight variant replaces (name -> new tensor); empty for "act"."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; use one of {sorted(VARIANTS)}")
    out = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if variant == "coarse" and is_expert_tensor(name):
                out[name] = quantise(name, p.detach(), "e2m1", COARSE_BLOCK)
            elif variant == "router" and name.endswith("ffn.router.weight"):
                out[name] = mx_fake_quant(p.detach(), "e2m1", BLOCK)
            elif variant == "all" and is_matrix(name, p) and not is_expert_tensor(name) and name != "embed.weight":
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
    on, cut from the validation split, see app/routing_heldout.py) as [rows, chunk]."""
    ids = tokenizer.encode(assets.read_text(assets.HELDOUT))
    rows = max(1, min(rows, len(ids) // chunk))
    if len(ids) < chunk:
        return torch.tensor([ids])
    return torch.tensor(ids[: rows * chunk]).view(rows, chunk)
