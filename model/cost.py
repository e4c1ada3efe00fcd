"""Cost model for the "Precision & cost" pages: weight bytes by precision, attention FLOPs, and a
roofline decode model of K3 against a Mixture of Agents of dense models (APP.md pages 8-10).

Every input is a config (model.config), the parameter accounting (model.accounting) or the cache
accounting (model.memory); the assumptions are the constants and docstrings below, and the pages
print them. Units: bytes, FLOPs, seconds.

    weight bytes  = sum over components of params x bits / 8
                    (K3: routed experts MXFP4 = 4.25 bits, everything else bf16 = 16 bits)
    FLOPs / token = 2 x active parameters + attention FLOPs at the current context
    decode step   = max(bytes read / bandwidth, FLOPs / compute rate)      (roofline, batch 1)
    bytes read    = active weight bytes + the whole cache at the current context
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from model import memory
from model.accounting import count_params
from model.config import K3Config
from model.quant import bits_per_value

BF16_BITS = 16.0


@dataclass(frozen=True)
class Accelerator:
    name: str
    bandwidth: float      # HBM bytes per second
    flops: float          # dense BF16 FLOP per second
    source: str


# Published by NVIDIA (H200 product page / datasheet): 4.8 TB/s HBM3e, 141 GB; BF16 Tensor Core
# 1,979 TFLOPS "with sparsity", so 989 TFLOPS dense.
H200 = Accelerator("NVIDIA H200 SXM", 4.8e12, 989e12,
                   "NVIDIA H200 datasheet: 4.8 TB/s HBM3e; 1,979 TFLOPS BF16 with 2:4 sparsity, so ~989 dense")


# ---- weight bytes by precision --------------------------------------------------------------------

# What K3 keeps in higher precision (ARCHITECTURE.md section 7, from the K3 report): attention,
# latent projections, shared experts and router; only routed-expert weights are MXFP4. The report
# does not say for the embedding, LM head, dense layer-0 FFN and norms: bf16 is our assumption.
KEPT_HIGH = {
    "shared experts": "published", "KDA attention": "published", "MLA attention": "published",
    "latent projections": "published", "router": "published",
    "dense FFN (layer 0)": "assumed", "embedding": "assumed", "LM head": "assumed", "norms + AttnRes": "assumed",
}


@dataclass(frozen=True)
class WeightBytes:
    component: str
    params: int           # stored parameters of the component
    active: int           # parameters one token uses
    bits: float           # K3's storage bits per value
    basis: str            # "published" / "assumed" for the precision

    @property
    def bytes_bf16(self) -> float:
        return self.params * BF16_BITS / 8

    @property
    def bytes_k3(self) -> float:
        return self.params * self.bits / 8

    @property
    def active_bytes_k3(self) -> float:
        return self.active * self.bits / 8


def k3_bits(component: str, cfg: K3Config) -> float:
    if component == "routed experts":
        return bits_per_value(cfg.expert_weight_format)        # 4 + 8/32 = 4.25 for MXFP4
    return BF16_BITS


def weight_bytes(cfg: K3Config | None = None) -> list[WeightBytes]:
    cfg = cfg or K3Config.full()
    p = count_params(cfg)
    return [WeightBytes(c, n, p.active_breakdown.get(c, 0), k3_bits(c, cfg),
                        "published" if c == "routed experts" else KEPT_HIGH.get(c, "assumed"))
            for c, n in p.breakdown.items()]


def total_bytes(parts: list[WeightBytes], which: str = "k3", active: bool = False) -> float:
    """Sum of weight bytes: which = "k3" (K3's precisions) or "bf16" (everything 16-bit)."""
    if which not in ("k3", "bf16"):
        raise ValueError("which is 'k3' or 'bf16'")
    n = (lambda w: w.active) if active else (lambda w: w.params)
    bits = (lambda w: w.bits) if which == "k3" else (lambda w: BF16_BITS)
    return sum(n(w) * bits(w) / 8 for w in parts)


# ---- attention FLOPs ------------------------------------------------------------------------------

def kda_flops_per_token(cfg: K3Config) -> int:
    """One KDA layer's state work per token, per head on a d_k x d_v state (d_v = d_k): decay
    (1 FLOP per entry), read the old value S^T k (2), rank-1 update (2), read-out S^T q (2)."""
    return 7 * cfg.kda_heads * cfg.kda_head_dim * cfg.kda_head_dim


def mla_flops_per_cached_token(cfg: K3Config) -> int:
    """One MLA layer, absorbed decode (DeepSeek-V2): each head scores a cached token on the latent
    (kv_lora) and the shared rope key (rope), then sums the latents (kv_lora): 2 FLOPs per MAC."""
    return 2 * cfg.mla_heads * (2 * cfg.kv_lora_rank + cfg.qk_rope_dim)


def attention_flops(cfg: K3Config, context) -> np.ndarray | float:
    """FLOPs of every attention layer for one token that sees `context` tokens (scalar or array)."""
    t = np.asarray(context, dtype=np.float64)
    return cfg.n_kda * kda_flops_per_token(cfg) + cfg.n_mla * mla_flops_per_cached_token(cfg) * t


# ---- a decoder as the roofline sees it ------------------------------------------------------------

@dataclass(frozen=True)
class Decoder:
    name: str
    total_params: float   # stored parameters ("knowledge capacity")
    active_params: float  # parameters used per token (no embedding lookup)
    weight_bytes: float   # bytes of the active weights read per decode step
    stored_bytes: float   # bytes of all weights held in memory
    attn: K3Config        # whose attention stack (cache law and attention FLOPs)

    @property
    def cache(self) -> memory.CacheLaw:
        return memory.hybrid(self.attn)

    def flops(self, context):
        return 2.0 * self.active_params + attention_flops(self.attn, context)

    def bytes_read(self, context):
        # weights of the active path + the whole cache (KDA states and every cached MLA row)
        t = np.asarray(context, dtype=np.float64)
        return self.weight_bytes + memory.BF16 * (self.cache.fixed + self.cache.per_token * t)

    def cache_bytes(self, context) -> float:
        return float(self.cache.nbytes(context))


def k3_decoder(cfg: K3Config | None = None) -> Decoder:
    cfg = cfg or K3Config.full()
    parts = weight_bytes(cfg)
    p = count_params(cfg)
    return Decoder("Kimi K3", p.total, p.active, total_bytes(parts, "k3", active=True),
                   total_bytes(parts, "k3"), cfg)


def attention_core(cfg: K3Config | None = None) -> int:
    """Parameters a dense agent needs before any FFN: K3's attention stack, embedding, head, norms."""
    cfg = cfg or K3Config.full()
    b = count_params(cfg).breakdown
    return sum(b.get(c, 0) for c in ("KDA attention", "MLA attention", "embedding", "LM head", "norms + AttnRes"))


def dense_agent(params: float, bits: float = BF16_BITS, cfg: K3Config | None = None) -> Decoder:
    """A dense model of `params` parameters with K3's own attention stack (same cache and attention
    FLOPs: the most favourable choice for the agents) and dense FFNs holding the rest. Every
    parameter but the embedding lookup is active; weights stored at `bits` per value."""
    cfg = cfg or K3Config.full()
    if params < attention_core(cfg):
        raise ValueError(f"an agent with K3's attention needs at least {attention_core(cfg) / 1e9:.1f}B parameters")
    embed = cfg.vocab_size * cfg.d_model
    active = params - embed
    return Decoder(f"dense agent ({params / 1e9:,.0f}B)", params, active, active * bits / 8, params * bits / 8, cfg)


def decode_time(dec: Decoder, start: int, steps: int, accel: Accelerator = H200) -> float:
    """Seconds to generate `steps` tokens one at a time, the first seeing `start` tokens (batch 1)."""
    if steps <= 0:
        return 0.0
    t = start + np.arange(steps, dtype=np.float64)
    return float(np.maximum(dec.bytes_read(t) / accel.bandwidth, dec.flops(t) / accel.flops).sum())


def decode_flops(dec: Decoder, start: int, steps: int) -> float:
    if steps <= 0:
        return 0.0
    # flops(t) is linear in t: the sum is steps x flops at the mean context
    return float(steps * dec.flops(start + (steps - 1) / 2))


def prefill_time(dec: Decoder, start: int, tokens: int, accel: Accelerator = H200) -> float:
    """Reading `tokens` new tokens in one pass: weights read once, FLOPs of every token."""
    if tokens <= 0:
        return 0.0
    bytes_ = dec.weight_bytes + dec.cache_bytes(start + tokens)
    return max(bytes_ / accel.bandwidth, decode_flops(dec, start, tokens) / accel.flops)


# ---- K3 vs a Mixture of Agents --------------------------------------------------------------------

@dataclass(frozen=True)
class Scenario:
    n_agents: int = 8
    agent_params: float | None = None    # None: matched, K3's total parameters / n_agents
    context: int = 32_768                # prompt tokens already read
    output: int = 1_024                  # tokens of the final answer
    agent_bits: float = BF16_BITS
    accel: Accelerator = H200


@dataclass(frozen=True)
class Cost:
    name: str
    flops: float             # FLOPs to produce the final answer (after the prompt is read)
    flops_per_token: float   # per token of the final answer
    cache_bytes: float       # peak cache memory
    seconds: float           # time from prompt read to the last answer token
    weight_bytes: float      # weights held in memory
    step_seconds: float      # one decode step at the prompt length (per-token latency)


def agent_size(s: Scenario, cfg: K3Config | None = None) -> float:
    return float(s.agent_params) if s.agent_params else count_params(cfg or K3Config.full()).total / s.n_agents


def k3_cost(s: Scenario, cfg: K3Config | None = None) -> Cost:
    k3 = k3_decoder(cfg)
    f = decode_flops(k3, s.context, s.output)
    return Cost(k3.name, f, f / s.output, k3.cache_bytes(s.context + s.output),
                decode_time(k3, s.context, s.output, s.accel), k3.stored_bytes,
                decode_time(k3, s.context, 1, s.accel))


def moa_cost(s: Scenario, cfg: K3Config | None = None) -> Cost:
    """Mixture of Agents, one layer (Wang et al. 2024, arXiv 2406.04692): N proposers answer in
    parallel (each writes `output` tokens), then one of them aggregates: it reads the N answers
    (N x output tokens; its copy of the prompt was read during phase 1) and writes the final answer.
    Each agent has its own accelerator of the same bandwidth. N = 1: one dense model, no aggregation."""
    cfg = cfg or K3Config.full()
    a = dense_agent(agent_size(s, cfg), s.agent_bits, cfg)
    N, T, G = s.n_agents, s.context, s.output
    flops = N * decode_flops(a, T, G)
    seconds = decode_time(a, T, G, s.accel)
    cache = N * a.cache_bytes(T + G)
    if N > 1:
        flops += decode_flops(a, T, N * G) + decode_flops(a, T + N * G, G)
        seconds += prefill_time(a, T, N * G, s.accel) + decode_time(a, T + N * G, G, s.accel)
        # proposers free their caches once done; the aggregator's holds prompt + answers + its own
        cache = max(cache, a.cache_bytes(T + N * G + G))
    size = f"{a.total_params / 1e9:,.0f}B"
    name = f"{N} dense agents of {size}" if N > 1 else f"one dense model of {size}"
    return Cost(name, flops, flops / G, cache, seconds, N * a.stored_bytes, decode_time(a, T, 1, s.accel))


def ratios(s: Scenario, cfg: K3Config | None = None) -> dict[str, float]:
    """MoA / K3 for each cost."""
    m, k = moa_cost(s, cfg), k3_cost(s, cfg)
    return {"flops": m.flops / k.flops, "cache": m.cache_bytes / k.cache_bytes, "seconds": m.seconds / k.seconds,
            "weights": m.weight_bytes / k.weight_bytes, "step": m.step_seconds / k.step_seconds}


def bandwidth_bound_step(params: float, bits: float, bandwidth: float = H200.bandwidth) -> float:
    """Seconds to read `params` weights of `bits` bits once: a lower bound on one decode step."""
    return params * bits / 8 / bandwidth
