"""Data behind the MoE vs Mixture of Agents page (docs/APP.md page 9): the cost model of model/cost.py turned
into tables for the charts, its assumptions as sentences, and the qualitative comparison tied to the
numbers. Pure functions; no Streamlit here."""
from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd

from app.parallel import H200_MEMORY
from app.text import fmt_bytes, fmt_tokens
from model import cost
from model.accounting import count_params
from model.config import K3Config

CONTEXTS = [2 ** k for k in range(10, 21)]                  # 1K .. 1M tokens of prompt
OUTPUTS = [2 ** k for k in range(4, 14)]                    # 16 .. 8,192 answer tokens
N_AGENTS = list(range(1, 65))
BANDWIDTHS = [round(0.1 * i, 1) for i in range(5, 201)]     # 0.5 .. 20.0 TB/s
PRECISIONS = {"bf16": 16.0, "fp8": 8.0, "mxfp4": 4.25}
PRECISION_NAMES = {"bf16": "bf16", "fp8": "FP8", "mxfp4": "MXFP4"}
DEFAULTS = {"n": 8, "context": 32_768, "output": 1_024, "bw": 4.8, "prec": "bf16"}
MOA_SOURCE = "Wang et al. 2024, Mixture-of-Agents, arXiv 2406.04692"


def size_bounds(cfg: K3Config | None = None) -> tuple[int, int]:
    """Agent sizes the page allows, in billions: from K3's attention stack + embeddings (what every agent
    carries before any FFN) to K3's total."""
    cfg = cfg or K3Config.full()
    return math.ceil(cost.attention_core(cfg) / 1e9), math.ceil(count_params(cfg).total / 1e9)


def matched_size(n: int, cfg: K3Config | None = None) -> int:
    """Agent size (billions) whose N copies hold K3's total parameters, kept inside the allowed range."""
    lo, hi = size_bounds(cfg)
    return int(min(max(round(count_params(cfg or K3Config.full()).total / 1e9 / n), lo), hi))


def scenario(n: int, size_b: float, context: int, output: int, bw_tbs: float, prec: str) -> cost.Scenario:
    accel = replace(cost.H200, bandwidth=bw_tbs * 1e12,
                    name=cost.H200.name if abs(bw_tbs - 4.8) < 1e-9 else f"an accelerator with {bw_tbs:g} TB/s")
    return cost.Scenario(n_agents=n, agent_params=size_b * 1e9, context=context, output=output,
                         agent_bits=PRECISIONS[prec], accel=accel)


def default_scenario() -> cost.Scenario:
    """The page's opening settings (N = 8 agents matched to K3's size, 32K prompt, 1,024-token answer,
    one H200, bf16 agents). The Claims page checks claim 15 with this same scenario, so both pages show
    the same ratios with the same rounding of the agent size."""
    n = DEFAULTS["n"]
    return scenario(n, matched_size(n), DEFAULTS["context"], DEFAULTS["output"], DEFAULTS["bw"], DEFAULTS["prec"])


def step_bytes(s: cost.Scenario) -> dict[str, float]:
    """Bytes one decode step at the prompt length reads, split into weights and cache, for K3 and for
    one agent: the weights part is the same 'read per token' figure the Quantization lab shows."""
    df = step_breakdown(s)
    get = lambda model, part: float(df[(df["model"].str.startswith(model)) & (df["part"].str.startswith(part))]
                                    ["bytes"].iloc[0])
    return {"k3_weights": get("Kimi K3", "active"), "k3_cache": get("Kimi K3", "cache"),
            "agent_weights": get("one agent", "active"), "agent_cache": get("one agent", "cache")}


def step_note(s: cost.Scenario) -> str:
    b = step_bytes(s)
    return (f"K3 reads {fmt_bytes(b['k3_weights'])} of weights and {fmt_bytes(b['k3_cache'])} of cache per step, "
            f"an agent {fmt_bytes(b['agent_weights'])} of weights and {fmt_bytes(b['agent_cache'])} of cache")


def cost_table(s: cost.Scenario) -> tuple[pd.DataFrame, cost.Cost, cost.Cost]:
    """(one row per cost with K3, MoA and MoA / K3; K3's Cost; the MoA's Cost)."""
    k, m = cost.k3_cost(s), cost.moa_cost(s)
    rows = [
        ("FLOPs per answer token", k.flops_per_token, m.flops_per_token, "FLOPs", "derived"),
        ("Peak cache memory", k.cache_bytes, m.cache_bytes, "bytes", "derived"),
        ("Time to the full answer", k.seconds, m.seconds, "seconds", "derived (roofline)"),
        ("Weight memory", k.weight_bytes, m.weight_bytes, "bytes", "derived"),
    ]
    df = pd.DataFrame(rows, columns=["cost", "K3", "MoA", "unit", "origin"])
    df["ratio"] = df["MoA"] / df["K3"]
    return df, k, m


def fmt_ratio(r: float) -> str:
    """A cost ratio for people: '8.0x', '0.57x', and under 0.1 as a fraction ('1/75'), never '0.0x'."""
    if r >= 1:
        return f"{r:,.1f}x"
    if r >= 0.1:
        return f"{r:.2f}x"
    return f"1/{round(1 / r):,}"


def show(value: float, unit: str) -> str:
    if unit == "bytes":
        return fmt_bytes(value)
    if unit == "seconds":
        return f"{value * 1e3:,.1f} ms" if value < 1 else f"{value:,.1f} s"
    if unit == "FLOPs":
        for scale, name in ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP")):
            if value >= scale:
                return f"{value / scale:,.1f} {name}"
    return f"{value:,.3g}"


def context_sweep(s: cost.Scenario) -> pd.DataFrame:
    """MoA / K3 ratios at every context of the slider, all else as chosen."""
    rows = []
    for T in CONTEXTS:
        r = cost.ratios(replace(s, context=T))
        rows.append({"context": T, "FLOPs per answer token": r["flops"], "peak cache": r["cache"],
                     "time to the answer": r["seconds"], "one decode step": r["step"]})
    return pd.DataFrame(rows)


def sweep_note(s: cost.Scenario, sweep: pd.DataFrame) -> str:
    """What the ratio lines do over the prompt lengths, read from the sweep itself (so it holds at any setting)."""
    n = s.n_agents
    flops = sweep["FLOPs per answer token"].to_numpy()
    cache = sweep["peak cache"].to_numpy()
    # Per answer token the MoA generates N answers, reads them in the aggregator and writes its own: 2N + 1 token
    # passes (one for N = 1), each with the same attention work as K3's, which takes over at long contexts.
    passes = 2 * n + 1 if n > 1 else 1
    trend = "falls" if flops[-1] < flops[0] else "rises"
    text = (f"Attention work grows with the context, the same in each agent as in K3, so the FLOPs ratio {trend} from "
            f"{fmt_ratio(flops[0])} at {fmt_tokens(CONTEXTS[0])} to {fmt_ratio(flops[-1])} at "
            f"{fmt_tokens(CONTEXTS[-1])} tokens, towards {passes}x "
            + ("(N answers, the aggregator reading them, and its own answer). " if n > 1 else "(one pass each). "))
    if abs(cache - n).max() < 1e-9 * n:
        return text + ("The cache ratio is 1 at every length: one model's cache, as large as K3's." if n == 1 else
                       f"The cache ratio is {n} at every length: {n} proposer caches, each as large as K3's.")
    over = [fmt_tokens(t) for t, c in zip(CONTEXTS, cache) if c > n * (1 + 1e-9)]
    return text + (f"The cache ratio is {n} where the proposers' caches are the peak and more where the aggregator's "
                   f"context (prompt + {n} answers + its own) outgrows them, here at {', '.join(over)} tokens.")


def step_breakdown(s: cost.Scenario) -> pd.DataFrame:
    """Bytes one decode step reads at the prompt length, for K3 and for one agent: weights vs cache."""
    k3, agent = cost.k3_decoder(), cost.dense_agent(cost.agent_size(s), s.agent_bits)
    rows = []
    for dec, name in ((k3, "Kimi K3"), (agent, f"one agent ({cost.agent_size(s) / 1e9:,.0f}B)")):
        rows.append({"model": name, "part": "active weights", "bytes": dec.weight_bytes})
        rows.append({"model": name, "part": f"cache at {fmt_tokens(s.context)} tokens",
                     "bytes": float(dec.bytes_read(s.context)) - dec.weight_bytes})
    df = pd.DataFrame(rows)
    df["ms at the bandwidth"] = df["bytes"] / s.accel.bandwidth * 1e3
    return df


def assumptions(s: cost.Scenario) -> list[str]:
    k3 = cost.k3_decoder()
    a = cost.dense_agent(cost.agent_size(s), s.agent_bits)
    cfg = K3Config.full()
    return [
        f"**K3**: {k3.active_params / 1e9:,.1f}B active parameters per token (computed, accounting), routed experts "
        f"in MXFP4 (4.25 bits), everything else bf16 (the K3 report, sec 4.1.4, says only \"higher precision\" for "
        f"attention, the latent projections, the shared experts and the router; bf16 is our assumption): "
        f"{fmt_bytes(k3.weight_bytes)} of weights read per token.",
        f"**Each agent**: a dense model of {a.total_params / 1e9:,.0f}B parameters, all active but the embedding "
        f"lookup, weights at {s.agent_bits:g} bits ({fmt_bytes(a.weight_bytes)} read per token). It gets K3's own "
        f"attention stack ({cfg.n_kda} KDA + {cfg.n_mla} MLA layers, the same cache and attention FLOPs), a choice "
        "that favours the agents, since a typical dense model caches more per token. Equal sizes and K3's attention "
        "are this page's choices, not the paper's.",
        f"**Mixture of Agents** ({MOA_SOURCE}): the paper stacks layers of agents, each reading the previous layer's "
        "answers (its default: three layers of the same six open models, Qwen1.5-110B-Chat aggregating in the "
        "last), and uses the models as they are, by prompting. This page costs the smallest MoA, one "
        "layer: the N agents answer in parallel, each at the bandwidth below; then one of them reads all N answers "
        "and writes the final one. N = 1 is a single dense model.",
        "**FLOPs per token** = 2 × active parameters + attention: KDA ≈ 7·H·d_k² per layer (state decay, read, "
        "update, output), MLA 2·H·(2·kv_lora + r) per cached token per layer (absorbed decode; r is the "
        f"{cfg.qk_rope_dim}-value key slice shared by the heads, which K3 never rotates: no positional encoding in "
        "its MLA layers, K3 report sec 2.1.2).",
        "**Cache**: KDA states + MLA latents in bf16, this page's assumption (model/memory.py). Peak for MoA = the "
        "larger of N proposer caches and the aggregator's (prompt + N answers + its own).",
        f"**Time**: batch 1, every step max(bytes read / bandwidth, FLOPs / compute): bytes = active weights + the "
        f"whole cache. Bandwidth {s.accel.bandwidth / 1e12:g} TB/s ({s.accel.name}); compute "
        f"{s.accel.flops / 1e12:,.0f} TFLOP/s dense BF16 ({cost.H200.source}, published by NVIDIA). Reading the "
        "prompt (prefill) is left out for both sides. " + devices_note(s),
    ]


def devices_note(s: cost.Scenario) -> str:
    """What the one-accelerator times mean: neither side fits in one H200's memory."""
    k3 = cost.k3_decoder()
    agent = cost.dense_agent(cost.agent_size(s), s.agent_bits)
    need = lambda b: math.ceil(b / H200_MEMORY)
    return (f"The times are what one accelerator's bandwidth allows, not a deployment: K3's {fmt_bytes(k3.stored_bytes)} "
            f"of weights need at least {need(k3.stored_bytes)} H200s of {H200_MEMORY / 1e9:.0f} GB, one agent's "
            f"{fmt_bytes(agent.stored_bytes)} at least {need(agent.stored_bytes)} (computed). Spreading a model over "
            "D devices divides its step time by up to D, so the ratios carry over when each model gets the same "
            "number of devices.")


def qualitative(s: cost.Scenario, table: pd.DataFrame, k3: cost.Cost, moa: cost.Cost) -> pd.DataFrame:
    cfg = K3Config.full()
    r = table.set_index("cost")["ratio"]
    expert = 3 * cfg.expert_width * cfg.expert_hidden
    has_aggregator = s.n_agents > 1              # N = 1 is a single dense model: no aggregator
    rows = [
        ("Differentiability",
         "The router is part of the network: the output weights p_i are differentiable router scores (K3 report "
         "Eq. 13), so one backward pass trains router and experts together (only the top-k pick itself is not "
         "differentiable; Quantile Balancing sets the bias without gradients, K3 report Eq. 14).",
         "Agents exchange sampled text: no gradient flows from the final answer back into the agents, so "
         "backpropagation cannot train them together (the MoA paper uses its models as they are).",
         f"{cfg.top_k} of {cfg.n_routed_experts} experts chosen per token in each of {len(cfg.moe_layers)} layers "
         f"(config) vs all {s.n_agents} agent{'' if s.n_agents == 1 else 's'} on every request, no routing"),
        ("Latency",
         "One pass per token; only the chosen experts' weights are read.",
         ("Agents run in parallel, but the aggregator must wait for the slowest proposer, then read every answer "
          "before writing its own: two sequential generations." if has_aggregator else
          "One dense model (N = 1): one pass per token, all its weights read every step."),
         f"{show(k3.seconds, 'seconds')} vs {show(moa.seconds, 'seconds')} for the answer: "
         f"{fmt_ratio(r['Time to the full answer'])} "
         f"(one step {show(k3.step_seconds, 'seconds')} vs {show(moa.step_seconds, 'seconds')})"),
        ("KV cache",
         "One cache per sequence.",
         ("One cache per agent, and the aggregator's context holds the prompt plus all N answers." if has_aggregator else
          "One cache per sequence, with the same attention stack as K3's."),
         f"{show(k3.cache_bytes, 'bytes')} vs {show(moa.cache_bytes, 'bytes')}: {fmt_ratio(r['Peak cache memory'])}"),
        ("Compute",
         f"{k3.flops_per_token / 1e9:,.0f} GFLOP per answer token.",
         ("Every agent does dense work on every token, then the aggregator again." if has_aggregator else
          "Dense work with all its weights on every token."),
         f"{show(k3.flops_per_token, 'FLOPs')} vs {show(moa.flops_per_token, 'FLOPs')}: "
         f"{fmt_ratio(r['FLOPs per answer token'])}"),
        ("Modularity",
         f"Experts are not separable: one expert is a {expert / 1e6:,.0f}M-parameter piece of a layer, trained "
         "with the router and the rest; it cannot be swapped or run alone.",
         "Agents are whole models: they can come from different vendors, be swapped, added or updated one at a time.",
         f"expert {expert / 1e6:,.0f}M parameters (derived: 3 × {cfg.expert_width:,} × {cfg.expert_hidden:,}) vs "
         f"agent {cost.agent_size(s) / 1e9:,.0f}B"),
    ]
    return pd.DataFrame(rows, columns=["aspect", "MoE (Kimi K3)", "Mixture of Agents", "the number on this page"])
