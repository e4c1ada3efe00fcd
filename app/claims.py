"""Data behind the Claims page (APP.md page 10): every claim of REFERENCES.md "Claims to check",
checked against what the code computes now (the accounting, the live model, the cost model).

The claims are quoted from REFERENCES.md; the computed values and the verdicts are not typed in:
each check function derives them at render time, and the verdict follows from the numbers where a
number decides it. Pure functions of (model, forward output); one cached wrapper at the end.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import streamlit as st
import torch

from app.attention import compression_planes, fmt_bytes
from app.overview import headlines
from app.parallel import expected_fanout, fanout, routing
from app.situ import CAP, grid2d
from model import cost, memory
from model.accounting import count_params
from model.activations import BETA_GATE, BETA_UP
from model.attnres import link_count, vectors_alive
from model.config import K3Config, hybrid_schedule
from model.k3 import K3Model, K3Output
from model.moe import route
from model.quant import FORMATS

VERDICTS = ("holds", "holds with a caveat", "does not hold", "cannot be checked here")
VERDICT_COLOURS = {"holds": "green", "holds with a caveat": "orange", "does not hold": "red",
                   "cannot be checked here": "gray"}
VERDICT_ICONS = {"holds": ":material/check_circle:", "holds with a caveat": ":material/error:",
                 "does not hold": ":material/cancel:", "cannot be checked here": ":material/help:"}
_SUP = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
SOURCE = "REFERENCES.md, \"Claims to check\" (as commonly stated about K3)"


@dataclass(frozen=True)
class Claim:
    number: int
    title: str
    text: str                       # quoted from REFERENCES.md
    page: str                       # the page that shows it
    components: tuple[str, ...] = ()


CLAIMS = (
    Claim(1, "2.8T total, 104B active", "2.8T total parameters, 104B active per token, about 3.7% of the weights per token.",
          "views/overview.py"),
    Claim(2, "1M-token context", "1,048,576-token native context.", "views/attention.py", ("KDA", "Gated MLA")),
    Claim(3, "896 experts, 16 active: sparsity 56x",
          "896 routed experts, 16 active per token plus 2 shared: sparsity 56x.", "views/routing.py",
          ("Stable LatentMoE",)),
    Claim(4, "93 layers, 69 KDA + 24 MLA",
          "93 layers in a 3:1 ratio: 69 KDA + 24 gated MLA (three KDA then one MLA, plus a final MLA).",
          "views/overview.py", ("KDA", "Gated MLA")),
    Claim(5, "KDA cuts 100% of the KV cache",
          "KDA \"cuts 100% of the KV cache\" in 69 layers: a fixed-size state replaces a growing cache.",
          "views/attention.py", ("KDA",)),
    Claim(6, "MLA cuts 75% of the attention cache",
          "MLA \"cuts 75% of the attention cache\" across 24 layers (check where the 75% really comes from: the 3:1 "
          "layer ratio, 1 - 24/93 = 74.2%, vs the latent compression 576 vs 24,576 values = 97.7%).",
          "views/attention.py", ("Gated MLA",)),
    Claim(7, "Block AttnRes compresses depth 11.6x",
          "Block AttnRes \"compresses depth 11.6x\": 93 layers into N = 8 blocks.", "views/attnres.py", ("Block AttnRes",)),
    Claim(8, "The latent halves cross-GPU dispatch",
          "Latent projection 7168 -> 3584 \"halves cross-GPU dispatch\" (check also: equal to K2's per-token volume, "
          "8 x 7168 = 16 x 3584).", "views/parallel.py", ("Stable LatentMoE",)),
    Claim(9, "SiTU-GLU is bounded by 100",
          "SiTU-GLU bounds activations at |f| <= 100, avoiding FP8 overflow where SwiGLU is unbounded.",
          "views/situ.py", ("SiTU-GLU",)),
    Claim(10, "112 experts per GPU, any shard", "896 experts over 8 GPUs is 112 per GPU; a token's 16 experts can land "
              "on any shard.", "views/parallel.py", ("Stable LatentMoE",)),
    Claim(11, "Quantile Balancing leaves the output weights alone",
          "Quantile Balancing keeps loads uniform without changing the output weights.", "views/balance.py",
          ("Quantile Balancing",)),
    Claim(12, "Sub-microsecond latency",
          "MoE routing runs at \"sub-microsecond latency\" and a 104B-active forward pass is \"sub-microsecond\" (check "
          "against a memory-bandwidth bound: reading 104B parameters at 4.25 bits from HBM).", "views/moa.py"),
    Claim(13, "K2's loss with 2.5x less compute",
          "Validation loss: K3 reaches K2's loss with 2.5x less compute (report Figure 7; one bundled number, no "
          "per-component ablation; cannot be checked here).", "views/model_card.py"),
    Claim(14, "AttnRes: 1.25x compute, N ≈ 8, L < 100",
          "AttnRes: Block AttnRes matches a baseline trained with 1.25x more compute; N ~ 8 recovers most of Full "
          "AttnRes's gain; Full is affordable while L < 100 (self-cited, same team, same year).", "views/attnres.py",
          ("Block AttnRes",)),
    Claim(15, "Mixture of Agents costs more",
          "Mixture of Agents with 8 dense agents costs more FLOPs, cache and latency per token than a sparse MoE of the "
          "same knowledge capacity.", "views/moa.py"),
)

# REFERENCES.md "Evidence confidence by component"
EVIDENCE = (
    ("KDA", "high", "Kimi Linear 2025 (arXiv 2510.26692), open code, independent reimplementations"),
    ("Gated MLA", "high", "DeepSeek-V2 2024 (arXiv 2405.04434) lineage"),
    ("Stable LatentMoE", "mixed", "LatentMoE by NVIDIA (arXiv 2601.18089); the stability changes are K3's own"),
    ("Block AttnRes", "self-cited", "one same-team preprint, 2026 (arXiv 2603.15031)"),
    ("SiTU-GLU", "self-cited", "K3 report only"),
    ("Quantile Balancing", "self-cited", "K3 report only"),
)
LEVELS = ("self-cited", "mixed", "high")


@dataclass(frozen=True)
class Check:
    claim: Claim
    computed: str                   # markdown: what the code computes, with its origin
    verdict: str
    why: str                        # one sentence
    values: dict = field(default_factory=dict)   # the raw numbers, for tests and the table

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}")


# ---- the checks -------------------------------------------------------------------------------------

def _planes() -> pd.DataFrame:
    return compression_planes(K3Config.full(), K3Config.kimi_k2())


def _plane(df: pd.DataFrame, plane: str, which: int = 0) -> pd.Series:
    return df[df["plane"] == plane].iloc[which]


def check_1(ctx: "Context") -> Check:
    h = {x.label: x for x in headlines(ctx.cfg)}
    tot, act, share = h["Total parameters"], h["Active per token"], h["Active share"]
    p = ctx.params
    ok = tot.holds and act.holds and share.holds
    return Check(CLAIMS[0],
                 f"**{p.total / 1e12:.2f}T** total ({p.total / 1e9:,.1f}B), **{p.active / 1e9:.1f}B** active, "
                 f"**{100 * p.active_share:.2f}%** per token (computed: accounting of the published config)",
                 "holds" if ok else "does not hold",
                 f"The accounting gives {p.total / 1e9:,.1f}B and {p.active / 1e9:.2f}B, which round to the published "
                 f"2.78T / 104.2B (headline 2.8T / 104B), and {p.active / 1e9:.1f} / {p.total / 1e9:,.1f} = "
                 f"{100 * p.active_share:.2f}%.",
                 {"total": p.total, "active": p.active, "share": p.active_share})


def check_2(ctx: "Context") -> Check:
    cfg = ctx.cfg
    T = cfg.context_length
    law = memory.hybrid(cfg)
    per_tok = law.nbytes(1) - law.nbytes(0)
    at_T = law.nbytes(T)
    return Check(CLAIMS[1],
                 f"config: **{T:,}** tokens = 2{str(int(math.log2(T))).translate(_SUP)}; cache at that length "
                 f"**{fmt_bytes(at_T)}** per "
                 f"sequence ({fmt_bytes(per_tok)} per token, bf16; computed by model/memory.py)",
                 "holds with a caveat" if T == 1_048_576 else "does not hold",
                 "The published config says so and nothing in the math caps the length (no positional encoding; KDA "
                 "keeps a fixed state, MLA grows one latent row per token), but whether the model uses a million "
                 "tokens well needs long-context evaluations we cannot run here.",
                 {"context": T, "cache_bytes": at_T, "bytes_per_token": per_tok})


def check_3(ctx: "Context") -> Check:
    cfg, live = ctx.cfg, ctx.model.cfg
    chosen = [ctx.out.trace.experts(i)[0] for i in live.moe_layers]                   # [T, k] each
    distinct = {int(torch.unique(row).numel()) for e in chosen for row in e}
    ok = cfg.sparsity == 56 and cfg.n_shared_experts == 2 and distinct == {live.top_k}
    return Check(CLAIMS[2],
                 f"config: **{cfg.n_routed_experts}** routed, top-**{cfg.top_k}**, **{cfg.n_shared_experts}** shared; "
                 f"sparsity {cfg.n_routed_experts} / {cfg.top_k} = **{cfg.sparsity:g}x**. Live: every token picks "
                 f"{', '.join(map(str, sorted(distinct)))} distinct experts of {live.n_routed_experts} in each of "
                 f"{len(live.moe_layers)} MoE layers",
                 "holds" if ok else "does not hold",
                 f"{cfg.n_routed_experts} / {cfg.top_k} = {cfg.sparsity:g}, and the live instance, which keeps these "
                 "counts, routes every token of the prompt to exactly that many distinct experts.",
                 {"sparsity": cfg.sparsity, "distinct": sorted(distinct)})


def check_4(ctx: "Context") -> Check:
    cfg = ctx.cfg
    mla = [i + 1 for i, t in enumerate(cfg.layer_types) if t == "mla"]
    want = list(range(4, cfg.num_layers, 4)) + [cfg.num_layers]
    live_kinds = tuple(layer.kind for layer in ctx.model.layers)
    same_rule = live_kinds == tuple(hybrid_schedule(len(live_kinds)))
    ok = (cfg.num_layers, cfg.n_kda, cfg.n_mla) == (93, 69, 24) and mla == want
    return Check(CLAIMS[3],
                 f"config: **{cfg.num_layers}** = **{cfg.n_kda}** KDA + **{cfg.n_mla}** MLA; MLA at positions "
                 f"{mla[0]}, {mla[1]}, …, {mla[-2]}, {mla[-1]}; the live model's {len(live_kinds)} layers "
                 + ("follow the same rule" if same_rule else "do not follow this rule"),
                 "holds" if ok else "does not hold",
                 f"Counting the schedule gives {cfg.n_kda} + {cfg.n_mla}: {cfg.n_mla - 1} groups of three KDA and one MLA "
                 f"({4 * (cfg.n_mla - 1)} layers) plus a final MLA, so the ratio is 3:1 up to that last layer.",
                 {"layers": cfg.num_layers, "kda": cfg.n_kda, "mla": cfg.n_mla, "mla_positions": mla,
                  "live_same_rule": same_rule})


def check_5(ctx: "Context") -> Check:
    cfg = ctx.cfg
    fixed = cfg.n_kda * memory.kda_layer_values(cfg)
    cross = memory.crossover(memory.hybrid(cfg), memory.all_mla(cfg))
    live = ctx.model.cfg
    T = int(ctx.out.cache.length)
    measured = ctx.out.cache.numel("kda")
    predicted = memory.predicted_numel(live, T)["kda"]
    return Check(CLAIMS[4],
                 f"per-token growth in the {cfg.n_kda} KDA layers: **0**; fixed state **{fixed:,}** values = "
                 f"**{fmt_bytes(memory.BF16 * fixed)}** per sequence (bf16), what the MLA cache of those layers would "
                 f"hold at {cross:,.0f} tokens. Live: the KDA caches hold {measured:,} values after {T} tokens, the "
                 f"fixed amount the accounting predicts ({predicted:,})",
                 "holds with a caveat",
                 "KDA layers add nothing per token, so the growing cache is gone there, but each keeps a fixed "
                 f"{memory.kda_layer_values(cfg):,}-value state, so the memory is not zero.",
                 {"per_token": 0, "fixed_values": fixed, "crossover": cross, "live_matches": measured == predicted})


def check_6(ctx: "Context") -> Check:
    planes = _planes()
    latent, layers = _plane(planes, "MLA latent", 0), _plane(planes, "MLA latent", 1)
    return Check(CLAIMS[5],
                 f"layers that cache: 1 − {layers['after']}/{layers['before']} = **{layers['cut']:.1%}**; MLA's latent: "
                 f"1 − {latent['after']:,}/{latent['before']:,} = **{latent['cut']:.1%}** per caching layer "
                 "(computed from the config, app/attention.compression_planes)",
                 "holds with a caveat",
                 f"The '75%' is the 3:1 layer ratio ({layers['cut']:.1%} of layers keep no growing cache), not MLA's "
                 f"compression, which is larger ({latent['cut']:.1%} fewer values per token than multi-head attention).",
                 {"layer_cut": float(layers["cut"]), "latent_cut": float(latent["cut"])})


def check_7(ctx: "Context") -> Check:
    cfg = ctx.cfg
    planes = _planes()
    blk = _plane(planes, "Block AttnRes", 0)
    L, S = cfg.num_layers, cfg.attnres_block_size
    full_links, block_links = link_count(L, None, 2, True), link_count(L, S, 2, True)
    full_vec, block_vec = vectors_alive(L, None), vectors_alive(L, S)
    live = ctx.model.cfg
    live_links = ctx.out.trace.link_count
    want = link_count(live.num_layers, live.attnres_block_size, 2, True)
    return Check(CLAIMS[6],
                 f"{blk['before']} / {blk['after']} = **{blk['ratio']:.1f}x** depth entries; as K3 runs it: vectors "
                 f"kept per token {full_vec} → {block_vec} (**{full_vec / block_vec:.1f}x**), links per token "
                 f"{full_links:,} → {block_links:,} (**{full_links / block_links:.1f}x**). Live trace: {live_links:,} "
                 f"links (closed form {want:,})",
                 "holds with a caveat" if abs(blk["ratio"] - 11.6) < 0.05 else "does not hold",
                 f"{L} layers into {blk['after']} blocks is {blk['ratio']:.1f}x, but what is saved depends on what is "
                 f"counted: with two reads per layer K3 keeps {full_vec / block_vec:.1f}x fewer vectors and reads "
                 f"{full_links / block_links:.1f}x fewer links.",
                 {"ratio": float(blk["ratio"]), "vectors": (full_vec, block_vec), "links": (full_links, block_links),
                  "live_links": live_links, "live_links_closed_form": want})


def check_8(ctx: "Context") -> Check:
    planes = _planes()
    copy, token = _plane(planes, "Latent dispatch", 0), _plane(planes, "Latent dispatch", 1)
    cfg, k2 = ctx.cfg, K3Config.kimi_k2()
    return Check(CLAIMS[7],
                 f"per routed copy {copy['before']:,} → {copy['after']:,} values: **{copy['cut']:.0%}** less; per token "
                 f"{cfg.top_k} × {cfg.expert_width:,} = **{token['after']:,}** = {k2.top_k} × {k2.expert_width:,} "
                 f"(K2) = {token['before']:,}",
                 "holds with a caveat" if copy["cut"] == 0.5 and token["after"] == token["before"] else "does not hold",
                 f"Each routed copy of a token is {copy['after'] / copy['before']:.0%} as wide, but K3 sends "
                 f"{cfg.top_k / k2.top_k:g}x as many copies as K2, so the volume per token equals K2's: halved only "
                 "against K3 without the latent.",
                 {"copy_cut": float(copy["cut"]), "per_token": int(token["after"]), "k2_per_token": int(token["before"])})


def check_9(ctx: "Context") -> Check:
    g = grid2d(1000.0)
    situ, swi = float(np.abs(g["situ"]).max()), float(np.abs(g["swiglu"]).max())
    return Check(CLAIMS[8],
                 f"max |SiTU-GLU| over g, u in ±1,000: **{situ:.4g}** (bound {BETA_GATE:g} × {BETA_UP:g} = {CAP:g}); "
                 "max |SwiGLU| on the same "
                 f"grid: **{swi:,.0f}** (computed by model/activations.py)",
                 "holds" if situ <= CAP < swi else "does not hold",
                 "4·tanh(g/4)·σ(g) stays below 4 and 25·tanh(u/25) below 25, so their product never exceeds 100, "
                 f"under FP8 E4M3's {FORMATS['e4m3'].max:g}; SwiGLU grows like g·u without limit.",
                 {"situ_max": situ, "swiglu_max": swi})


def check_10(ctx: "Context") -> Check:
    cfg, live = ctx.cfg, ctx.model.cfg
    G = 8
    measured = float(fanout(routing(ctx.out, live.moe_layers), G, live.n_routed_experts).mean())
    uniform = expected_fanout(cfg.n_routed_experts, cfg.top_k, G)
    return Check(CLAIMS[9],
                 f"{cfg.n_routed_experts} / {G} = **{cfg.n_routed_experts // G}** per GPU; a token's {cfg.top_k} experts "
                 f"reach **{measured:.2f}** of {G} shards on average (live routing, prompt), {uniform:.2f} if uniform",
                 "holds" if cfg.n_routed_experts % G == 0 and measured > 1 else "does not hold",
                 "The router may pick any 16 of 896, so nothing keeps a token on one shard: the live tokens touch "
                 "most of the 8 shards, which is why expert parallelism needs an all-to-all.",
                 {"per_gpu": cfg.n_routed_experts // G, "fanout": measured, "uniform": uniform})


def qb_weight_check(model: K3Model, out: K3Output) -> dict:
    """Route the live router scores with and without the balancing bias (model.moe.route): weights
    where the chosen set is the same, and how often the bias changes the set."""
    same_sets, changed, max_diff, max_raw = 0, 0, 0.0, 0.0
    k = model.cfg.top_k
    for i in model.cfg.moe_layers:
        s = out.trace.scores(i)[0].double()                                      # [T, E]
        bias = out.trace.bias(i).double()
        idx_b, w_b, _ = route(s, bias, k)
        idx_0, w_0, _ = route(s, None, k)
        raw = s.gather(-1, idx_b)
        max_raw = max(max_raw, float((w_b - raw / raw.sum(-1, keepdim=True)).abs().max()))
        sb, ob = idx_b.sort(-1)
        s0, o0 = idx_0.sort(-1)
        same = (sb == s0).all(-1)                                                # [T]
        same_sets += int(same.sum())
        changed += int((~same).sum())
        if same.any():
            d = (w_b.gather(-1, ob) - w_0.gather(-1, o0))[same].abs().max()
            max_diff = max(max_diff, float(d))
    return {"same": same_sets, "changed": changed, "max_diff": max_diff, "max_raw_diff": max_raw,
            "changed_share": changed / max(same_sets + changed, 1)}


def check_11(ctx: "Context") -> Check:
    r = qb_weight_check(ctx.model, ctx.out)
    ok = r["max_diff"] < 1e-12 and r["max_raw_diff"] < 1e-12
    return Check(CLAIMS[10],
                 f"live router scores routed with and without the bias (model.moe.route): weights on the same expert "
                 f"set differ by at most **{r['max_diff']:.1e}**; the bias changes the chosen set for "
                 f"**{r['changed_share']:.1%}** of (layer, token) pairs",
                 "holds with a caveat" if ok else "does not hold",
                 "The weights are the raw scores renormalised over the chosen set, so the bias never enters them, but "
                 "by changing which experts are chosen it still changes what a token's output is made of; how fast the "
                 "loads even out is on the Load balancing lab.",
                 r)


def check_12(ctx: "Context") -> Check:
    p, bw = ctx.params, cost.H200.bandwidth
    lower = cost.bandwidth_bound_step(p.active, 4.25, bw)
    k3 = cost.k3_decoder(ctx.cfg).weight_bytes / bw
    router = p.active_breakdown["router"] * cost.BF16_BITS / 8 / bw
    return Check(CLAIMS[11],
                 f"reading {p.active / 1e9:.1f}B active weights at 4.25 bits from HBM at {bw / 1e12:g} TB/s "
                 f"({cost.H200.name}, published by NVIDIA) takes **{lower * 1e3:.1f} ms**; at K3's real precisions "
                 f"(only routed experts at 4.25 bits) **{k3 * 1e3:.1f} ms**; the routers' weights alone "
                 f"{router * 1e3:.2f} ms (derived, model/cost.py)",
                 "does not hold" if lower > 1e-6 else "holds",
                 f"Even with every active weight at 4.25 bits a single-token forward pass needs about {lower / 1e-6:,.0f}x "
                 "longer than a microsecond on one accelerator (sharding over many divides it, but not by ten thousand).",
                 {"lower_s": lower, "k3_s": k3, "router_s": router})


def check_13(ctx: "Context") -> Check:
    return Check(CLAIMS[12], "no value: it needs K2 and K3 trained at scale (our live instance is "
                             f"{ctx.model.cfg.d_model} wide, against K3's {ctx.cfg.d_model:,}, and trained on a CPU)",
                 "cannot be checked here",
                 "Figure 7 of the report is one bundled number for all of K3's changes together, with no per-component "
                 "ablation; reproducing it needs both training runs.", {})


def check_14(ctx: "Context") -> Check:
    cfg = ctx.cfg
    L, S = cfg.num_layers, cfg.attnres_block_size
    full_links, block_links = link_count(L, None, 2, True), link_count(L, S, 2, True)
    return Check(CLAIMS[13],
                 f"only the counting part: at L = {L}, Full AttnRes reads {full_links:,} links and keeps "
                 f"{vectors_alive(L, None)} vectors per token, Block {block_links:,} and {vectors_alive(L, S)} "
                 f"(N = {len(cfg.attnres_blocks)}); Full's links grow as L²",
                 "cannot be checked here",
                 "The 1.25x and 'N ≈ 8 recovers most of the gain' are training results from one same-team preprint, and "
                 "'affordable while L < 100' is a judgement; we can only count the costs behind them.",
                 {"links": (full_links, block_links)})


def check_15(ctx: "Context") -> Check:
    s = cost.Scenario()                                  # N = 8 agents, matched, 32K context, 1,024 tokens, H200
    r = cost.ratios(s)
    sweep = [cost.ratios(replace(s, context=T, agent_bits=b)) for T in (2 ** k for k in range(10, 21))
             for b in (16.0, 8.0, 4.25)]
    lows = {key: min(x[key] for x in sweep) for key in ("flops", "cache", "seconds")}
    ok = all(v > 1 for v in lows.values())
    return Check(CLAIMS[14],
                 f"8 agents of {cost.agent_size(s) / 1e9:,.0f}B (K3's total / 8), {s.context:,}-token prompt, "
                 f"{s.output:,}-token answer: FLOPs **{r['flops']:.1f}x**, peak cache **{r['cache']:.1f}x**, time "
                 f"**{r['seconds']:.1f}x** K3's (derived, model/cost.py); lowest over 1K–1M contexts and bf16/FP8/MXFP4 "
                 f"agents: {lows['flops']:.1f}x, {lows['cache']:.1f}x, {lows['seconds']:.1f}x",
                 "holds with a caveat" if ok else "does not hold",
                 "Every agent computes and reads all its weights for every token, so all three costs come out higher "
                 "at every setting we tried; the size of the gap rests on the cost model's assumptions (batch 1, "
                 "bandwidth-bound decode, agents given K3's own attention).",
                 {"ratios": r, "lowest": lows})


CHECKS = (check_1, check_2, check_3, check_4, check_5, check_6, check_7, check_8, check_9, check_10, check_11,
          check_12, check_13, check_14, check_15)


@dataclass(frozen=True)
class Context:
    model: K3Model                  # the live instance
    out: K3Output                   # its forward on a prompt
    cfg: K3Config = field(default_factory=K3Config.full)

    @property
    def params(self):
        return count_params(self.cfg)


def check_all(model: K3Model, out: K3Output, cfg: K3Config | None = None) -> list[Check]:
    ctx = Context(model, out, cfg or K3Config.full())
    return [fn(ctx) for fn in CHECKS]


def summary_table(checks: list[Check], url_of) -> pd.DataFrame:
    return pd.DataFrame({"#": [c.claim.number for c in checks], "claim": [c.claim.title for c in checks],
                         "verdict": [c.verdict for c in checks], "shown on": [url_of(c.claim.page) for c in checks]})


def evidence_table(checks: list[Check] | None = None) -> pd.DataFrame:
    claims = checks and {comp: [c.claim.number for c in checks if comp in c.claim.components] for comp, _, _ in EVIDENCE}
    return pd.DataFrame([{"component": comp, "confidence": level, "sources": src,
                          "claims": ", ".join(map(str, (claims or {}).get(comp, [])))} for comp, level, src in EVIDENCE])


def parse_claim(raw: str | None, n: int = len(CLAIMS)) -> tuple[int | None, str | None]:
    """(claim number, notice) from a ?claim= link parameter; a bad value gives a notice and no filter."""
    if raw is None:
        return None, None
    text = str(raw).strip().removeprefix("claim-")
    try:
        k = int(text)
    except ValueError:
        return None, "not a claim number"
    if not 1 <= k <= n:
        return None, f"there are claims 1 to {n} only"
    return k, None


def parse_verdicts(raw: str | None) -> tuple[list[str], list[str]]:
    """(verdicts, unknown parts) from a ?verdict= parameter: comma-separated, e.g. holds,does-not-hold."""
    if not raw:
        return list(VERDICTS), []
    slug = {v.replace(" ", "-"): v for v in VERDICTS}
    parts = [p.strip() for p in str(raw).split(",") if p.strip()]
    good = [slug[p] for p in parts if p in slug]
    bad = [p for p in parts if p not in slug]
    return (list(dict.fromkeys(good)) or list(VERDICTS)), bad


def verdict_slug(v: str) -> str:
    return v.replace(" ", "-")


# ---- cached wrapper -------------------------------------------------------------------------------

@st.cache_data(show_spinner=False, max_entries=4)
def cached_checks(ids: tuple[int, ...]) -> list[Check]:
    from app.live import forward, live
    return check_all(live().model, forward(ids))
