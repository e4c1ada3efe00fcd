"""Gated Multi-head Latent Attention without positional encoding (ARCHITECTURE.md section 3).

K3 keeps DeepSeek-V2's MLA shapes (arXiv 2405.04434) in its 24 full-attention layers, drops the
rotary embedding (NoPE: the rope-sized slices stay, unrotated, in the score, its scale and the cache)
and adds a per-channel sigmoid output gate before W_o. Two paths compute the same function:

* naive    -- expand the cached latent into per-head keys and values, then ordinary attention;
* absorbed -- fold W_uk into the query and attend over the latent itself (one shared KV head of width
              kv_lora + rope), then apply W_uv per head. This is how MLA decodes from a 576-value cache.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from model import fast
from model.config import K3Config
from model.norms import RMSNorm


@dataclass
class MLACache:
    latent: torch.Tensor   # [B, T_cached, kv_lora]  c = RMSNorm(c~), the normalised latent
    k_rope: torch.Tensor   # [B, T_cached, rope]     kR, shared by all heads, never rotated (NoPE)

    @property
    def length(self) -> int:
        return self.latent.shape[1]

    def numel(self) -> int:
        # = B * T_cached * (kv_lora + rope): what the memory pages measure
        return self.latent.numel() + self.k_rope.numel()


def _causal_mask(T: int, S: int, device) -> torch.Tensor | None:
    # Query i sits at absolute position S - T + i and sees keys j <= S - T + i. SDPA's is_causal aligns
    # the triangle top-left, which is only right when T == S, so a cache needs an explicit mask.
    if T == 1:
        return None
    return torch.ones(T, S, dtype=torch.bool, device=device).tril(S - T)   # [T, S]


class GatedMLA(nn.Module):
    def __init__(self, cfg: K3Config):
        super().__init__()
        d, H = cfg.d_model, cfg.mla_heads
        self.H, self.nope, self.rope, self.v = H, cfg.qk_nope_dim, cfg.qk_rope_dim, cfg.v_head_dim
        self.kv_lora = cfg.kv_lora_rank
        # NoPE keeps the rope slice in the dot product, so it stays in the scale too (section 3)
        self.scale = (self.nope + self.rope) ** -0.5
        self.w_dq = nn.Linear(d, cfg.q_lora_rank, bias=False)
        self.q_norm = RMSNorm(cfg.q_lora_rank, cfg.norm_eps)
        self.w_uq = nn.Linear(cfg.q_lora_rank, H * (self.nope + self.rope), bias=False)
        self.w_dkv = nn.Linear(d, self.kv_lora + self.rope, bias=False)
        self.kv_norm = RMSNorm(self.kv_lora, cfg.norm_eps)
        self.w_ukv = nn.Linear(self.kv_lora, H * (self.nope + self.v), bias=False)
        self.w_g = nn.Linear(d, H * self.v, bias=False) if cfg.mla_gate else None
        self.w_o = nn.Linear(H * self.v, d, bias=False)

    # ---- shared pieces ---------------------------------------------------------------------------
    def _query(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return self.w_uq(self.q_norm(self.w_dq(x))).view(B, T, self.H, self.nope + self.rope)  # [B,T,H,n+r]

    def _latent(self, x: torch.Tensor, cache: MLACache | None) -> MLACache:
        ckv = self.w_dkv(x)                                                   # [B, T, kv_lora + rope]
        c, k_rope = self.kv_norm(ckv[..., :self.kv_lora]), ckv[..., self.kv_lora:]
        if cache is not None and cache.length:
            c = torch.cat([cache.latent, c], 1)                               # [B, S, kv_lora]
            k_rope = torch.cat([cache.k_rope, k_rope], 1)                     # [B, S, rope]
        return MLACache(c, k_rope)

    def _expand(self, kv: MLACache) -> tuple[torch.Tensor, torch.Tensor]:
        # naive path: per-head keys [kC_i ; kR] and values v_i from the latent (section 3)
        B, S, _ = kv.latent.shape
        kc_v = self.w_ukv(kv.latent).view(B, S, self.H, self.nope + self.v)   # [B, S, H, nope + v]
        k = torch.cat([kc_v[..., :self.nope],
                       kv.k_rope.unsqueeze(2).expand(B, S, self.H, self.rope)], -1)  # [B, S, H, n+r]
        return k, kc_v[..., self.nope:]                                       # v: [B, S, H, v]

    def _out(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        # o [B, T, H*v]; the gate sits between W_uv and W_o, which is why W_uv cannot fold into W_o
        if self.w_g is not None:
            o = torch.sigmoid(self.w_g(x)) * o
        return self.w_o(o)                                                    # [B, T, d]

    # ---- forward ---------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, cache: MLACache | None = None,
                absorbed: bool = False) -> tuple[torch.Tensor, MLACache]:
        B, T, _ = x.shape
        if cache is None and not absorbed and self.w_g is not None and fast.WHOLE_LAYERS:
            weights = (self.w_dq.weight, self.q_norm.weight, self.w_uq.weight, self.w_dkv.weight,
                       self.kv_norm.weight, self.w_ukv.weight, self.w_g.weight)
            if fast.usable(x, *weights):   # inference: everything up to W_o in one compiled call (model/fast.py)
                o, latent, k_rope = fast.mla(x, *weights, self.q_norm.eps, self.nope, self.rope, self.scale)
                return self.w_o(o), MLACache(latent, k_rope)
        q = self._query(x)                                                    # [B, T, H, nope + rope]
        kv = self._latent(x, cache)                                           # S = T_cached + T
        S = kv.length
        mask = _causal_mask(T, S, x.device) if S != T else None
        causal = S == T and T > 1
        if absorbed:
            o = self._absorbed(q, kv, mask, causal)
        else:
            k, v = self._expand(kv)
            o = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
                is_causal=causal, scale=self.scale)                           # [B, H, T, v]
            o = o.transpose(1, 2).reshape(B, T, self.H * self.v)              # [B, T, H*v]
        return self._out(x, o), kv

    def parts(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every intermediate of the naive `forward(x)` (no cache), by name, with the attention weights
        written out (the forward's fused SDPA never forms them): the query, the latent c and k_rope this
        token adds to the cache, per-head keys and values, `probs` [B, H, T, T] (causal softmax over
        earlier tokens), the per-channel gate and the output. `out` equals forward(x)[0]."""
        B, T, _ = x.shape
        q = self._query(x)                                                    # [B, T, H, nope + rope]
        kv = self._latent(x, None)
        k, v = self._expand(kv)                                               # [B, T, H, n+r], [B, T, H, v]
        logits = torch.einsum("bthc,bshc->bhts", q, k) * self.scale           # [B, H, T, S]
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        probs = torch.softmax(logits.masked_fill(~causal, float("-inf")), -1)  # [B, H, T, S]
        o = torch.einsum("bhts,bshv->bthv", probs, v).reshape(B, T, self.H * self.v)   # [B, T, H*v]
        gate = torch.sigmoid(self.w_g(x)) if self.w_g is not None else torch.ones_like(o)
        gated = gate * o
        return {"q": q, "latent": kv.latent, "k_rope": kv.k_rope, "k": k, "v": v, "probs": probs, "o": o,
                "gate": gate, "gated": gated, "out": self.w_o(gated)}

    def _absorbed(self, q: torch.Tensor, kv: MLACache, mask, causal: bool) -> torch.Tensor:
        B, T, H, _ = q.shape
        w = self.w_ukv.weight.view(H, self.nope + self.v, self.kv_lora)       # [H, nope + v, kv_lora]
        # q^_i = W_uk,i^T qC_i: the nope part of the query moves into latent space
        q_lat = torch.einsum("bthn,hnc->bhtc", q[..., :self.nope], w[:, :self.nope])  # [B, H, T, kv_lora]
        q_abs = torch.cat([q_lat, q[..., self.nope:].transpose(1, 2)], -1)    # [B, H, T, kv_lora + rope]
        key = torch.cat([kv.latent, kv.k_rope], -1).unsqueeze(1)              # [B, 1, S, kv_lora + rope]
        val = kv.latent.unsqueeze(1)                                          # [B, 1, S, kv_lora]
        if T == 1:
            # decode: every head is just another query row against the one shared KV head
            o = F.scaled_dot_product_attention(q_abs.transpose(1, 2), key, val, scale=self.scale)
        else:
            o = F.scaled_dot_product_attention(q_abs, key, val, attn_mask=mask, is_causal=causal,
                                               scale=self.scale, enable_gqa=True)  # [B, H, T, kv_lora]
            o = o.transpose(1, 2)                                             # [B, T, H, kv_lora]
        # W_uv,i per head, back to v values per head
        return torch.einsum("bthc,hvc->bthv", o, w[:, self.nope:]).reshape(B, T, H * self.v)
