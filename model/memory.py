"""Closed-form decode-cache accounting (ARCHITECTURE.md sections 2, 3 and 8).

What each attention layer must keep between decode steps, in values (multiply by the bytes per value
for memory). The formulas mirror the cache objects of model/kda.py and model/mla.py, and the tests
check them against `numel()` of real caches (tiny and micro instances, prefill and decode), which is
what makes the K3-scale numbers on the pages trustworthy.

    KDA layer : fixed  H * d_k * d_v (state) + (conv - 1) * 3P (conv tail), whatever the context
    MLA layer : kv_lora + rope values per token (the latent c and the shared k_rope; 576 at K3 scale)
    MHA layer : 2 * H * d_v values per token (keys and values of every head, "the same heads")
"""
from __future__ import annotations

from dataclasses import dataclass

from model.config import K3Config

BF16 = 2       # bytes per cached value at bf16


def kda_state_values(cfg: K3Config) -> int:
    """One KDA layer's recurrent state: a d_k x d_v matrix per head (d_v = d_k in K3)."""
    return cfg.kda_heads * cfg.kda_head_dim * cfg.kda_head_dim


def kda_conv_values(cfg: K3Config) -> int:
    """One KDA layer's conv tail: the last conv - 1 pre-conv inputs of q, k and v (3P channels)."""
    return (cfg.kda_conv - 1) * 3 * cfg.kda_proj


def kda_layer_values(cfg: K3Config) -> int:
    return kda_state_values(cfg) + kda_conv_values(cfg)


def mla_values_per_token(cfg: K3Config) -> int:
    """Cached per token per MLA layer: the normalised latent c plus the shared (unrotated) k_rope."""
    return cfg.kv_lora_rank + cfg.qk_rope_dim


def mha_values_per_token(cfg: K3Config) -> int:
    """Multi-head attention with MLA's heads: a key and a value of width d_v per head."""
    return 2 * cfg.mla_heads * cfg.v_head_dim


@dataclass(frozen=True)
class CacheLaw:
    """Cache size of one sequence as a straight line in the context length: fixed + per_token * T."""
    name: str
    fixed: int            # values per sequence, whatever the context (KDA states)
    per_token: int        # values added by every token (MLA / MHA caches, all layers)

    def values(self, tokens, batch: int = 1):
        return batch * (self.fixed + self.per_token * tokens)

    def nbytes(self, tokens, batch: int = 1, bytes_per_value: int = BF16):
        return bytes_per_value * self.values(tokens, batch)


def hybrid(cfg: K3Config) -> CacheLaw:
    """The config's own stack: fixed KDA states plus growing MLA latent caches."""
    return CacheLaw(f"{cfg.n_kda} KDA + {cfg.n_mla} MLA", cfg.n_kda * kda_layer_values(cfg),
                    cfg.n_mla * mla_values_per_token(cfg))


def all_mla(cfg: K3Config) -> CacheLaw:
    return CacheLaw(f"all MLA ({cfg.num_layers} layers)", 0, cfg.num_layers * mla_values_per_token(cfg))


def all_mha(cfg: K3Config) -> CacheLaw:
    return CacheLaw(f"all MHA ({cfg.num_layers} layers)", 0, cfg.num_layers * mha_values_per_token(cfg))


def crossover(a: CacheLaw, b: CacheLaw) -> float | None:
    """Context length at which the two laws hold the same number of values (independent of batch),
    or None when the lines never cross at a positive length."""
    if a.per_token == b.per_token:
        return None
    t = (b.fixed - a.fixed) / (a.per_token - b.per_token)
    return t if t > 0 else None


def predicted_numel(cfg: K3Config, tokens: int, batch: int = 1) -> dict[str, int]:
    """What K3Cache.numel("kda") / numel("mla") must report after `tokens` tokens (prefill + decode)."""
    law = hybrid(cfg)
    return {"kda": batch * law.fixed, "mla": batch * law.per_token * tokens}
