"""Data behind the Overview page: every number computed from the configs and the accounting, set
beside the published figure it should reproduce. Pure functions; no Streamlit here."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from app import assets
from app.text import fmt_int
from model.accounting import count_params, mtp_layer
from model.config import K3Config

K3_SOURCE = "K3 report arXiv 2607.24653 v2, Table 1"
CONTEXT_SOURCE = ("released config.json of moonshotai/Kimi-K3, max_position_embeddings (K3 report Table 1 gives "
                  "\"1M\")")
FRONTIER_EXPERTS = "experts: routed / per token (+shared)"    # the frontier table's column, as the sources give it
SPARSITY_SOURCE = "K3 report sec 2.3 (\"a sparsity of 56\")"

# Table 1 of the K3 report gives K2 and K3 side by side: the published totals and active counts, in billions.
PUBLISHED_TOTAL_B = {"K2": 1040.0, "K3": 2780.0}
PUBLISHED_ACTIVE_B = {"K2": 32.6, "K3": 104.2}


@dataclass(frozen=True)
class Headline:
    label: str
    computed: float | tuple
    computed_text: str
    published: float | tuple
    published_text: str
    half_unit: float          # half a unit in the last digit the publication gives
    source: str
    how: str                  # how the computed value was obtained
    detail: str = ""          # a second computed line under the big number

    @property
    def holds(self) -> bool:
        c, p = np.atleast_1d(self.computed), np.atleast_1d(self.published)
        return c.shape == p.shape and bool(np.all(np.abs(c - p) <= self.half_unit + 1e-12))

    @property
    def verdict(self) -> str:
        if self.holds:
            return f"✓ matches published {self.published_text}"
        diff = np.atleast_1d(self.computed) - np.atleast_1d(self.published)
        return f"published {self.published_text}; differs by {', '.join(f'{x:+,.4g}' for x in diff)}"


def headlines(cfg: K3Config | None = None) -> list[Headline]:
    cfg = cfg or K3Config.full()
    p = count_params(cfg)
    tot_b, act_b = PUBLISHED_TOTAL_B["K3"], PUBLISHED_ACTIVE_B["K3"]
    share_published = 100 * act_b / tot_b                  # 3.748%: derived from the two published figures
    return [
        Headline("Total parameters", p.total / 1e12, f"{p.total / 1e12:.2f}T", tot_b / 1000, f"{tot_b / 1000:g}T",
                 0.005, K3_SOURCE,
                 "sum of every weight matrix in the config (accounting, docs/ARCHITECTURE.md §9)",
                 detail=f"{p.total / 1e9:,.1f}B (abstract: 2.8T)"),
        Headline("Active per token", p.active / 1e9, f"{p.active / 1e9:.1f}B", act_b, f"{act_b:g}B", 0.05,
                 K3_SOURCE, "total minus the embedding lookup minus the "
                 f"{cfg.n_routed_experts - cfg.top_k} idle experts of each MoE layer",
                 detail=f"{p.active / 1e9:.2f}B (abstract: 104B)"),
        Headline("Active share", 100 * p.active_share, f"{100 * p.active_share:.2f}%", share_published,
                 f"{share_published:.2f}%", 0.005,
                 f"derived from Table 1's {act_b:g}B / {tot_b / 1000:g}T", "active / total",
                 detail=f"{p.active / 1e9:.1f}B of {p.total / 1e9:,.1f}B"),
        Headline("Context", cfg.context_length, f"{cfg.context_length / 2**20:g}M", 1_048_576, "1,048,576", 0,
                 CONTEXT_SOURCE, "config: context_length",
                 detail=f"{fmt_int(cfg.context_length)} tokens = 2^{cfg.context_length.bit_length() - 1}"),
        Headline("Routed experts", cfg.n_routed_experts, f"{cfg.n_routed_experts}", 896, "896", 0, K3_SOURCE,
                 "config: n_routed_experts",
                 detail=f"in each of the {len(cfg.moe_layers)} MoE layers"),
        Headline("Experts per token", (cfg.top_k, cfg.n_shared_experts),
                 f"{cfg.top_k} + {cfg.n_shared_experts}", (16, 2), "16 + 2", 0, K3_SOURCE,
                 "config: top_k routed experts plus n_shared_experts that every token uses",
                 detail=f"{cfg.top_k} routed + {cfg.n_shared_experts} shared"),
        Headline("Sparsity", cfg.sparsity, f"{cfg.sparsity:g}x", 56, "56x", 0,
                 SPARSITY_SOURCE, "n_routed_experts / top_k: routed experts per routed expert a token uses",
                 detail=f"{cfg.n_routed_experts} / {cfg.top_k}"),
        Headline("Layers", (cfg.num_layers, cfg.n_kda, cfg.n_mla), f"{cfg.num_layers}", (93, 69, 24),
                 "69 + 24", 0, K3_SOURCE, "config: layer_types (3 KDA : 1 MLA, final MLA)",
                 detail=f"{cfg.n_kda} KDA + {cfg.n_mla} gated MLA"),
    ]


def layer_stack(cfg: K3Config) -> pd.DataFrame:
    """One row per layer: attention kind, FFN kind, AttnRes block, and a sentence for the hover."""
    rows = []
    block_of = _block_index(cfg)
    for i, kind in enumerate(cfg.layer_types):
        attn = "Kimi Delta Attention (fixed-size state)" if kind == "kda" else "gated MLA (latent KV cache)"
        ffn = "Stable LatentMoE" if cfg.is_moe(i) else "dense SiTU-GLU FFN"
        block = block_of[i]
        if cfg.is_moe(i):
            ffn += f" ({cfg.n_routed_experts} experts, top-{cfg.top_k} + {cfg.n_shared_experts} shared)"
        where = f"layer {i} (position {i + 1} of {cfg.num_layers})"
        in_block = f"{block + 1} of {len(cfg.attnres_blocks)}" if block >= 0 else "none"
        rows.append({
            "layer": i, "attention": kind.upper(), "ffn": "MoE" if cfg.is_moe(i) else "dense",
            "block": block, "where": where, "attention_detail": attn, "ffn_detail": ffn, "block_detail": in_block,
            "hover": f"{where}; attention: {attn}; FFN: {ffn}; AttnRes block {in_block}",
        })
    return pd.DataFrame(rows)


def _block_index(cfg: K3Config) -> list[int]:
    out = []
    for b, size in enumerate(cfg.attnres_blocks):
        out += [b] * size
    return out or [-1] * cfg.num_layers


def breakdown(cfg: K3Config) -> pd.DataFrame:
    p = count_params(cfg)
    df = pd.DataFrame({"component": list(p.breakdown), "total": list(p.breakdown.values())})
    df["active"] = [p.active_breakdown.get(c, 0) for c in df["component"]]
    df["share of total"] = df["total"] / p.total
    df["share of active"] = df["active"] / p.active
    return df


def frontier_table() -> pd.DataFrame:
    """Published total/active of public MoE models (assets table with a source per row), with K3's
    row replaced by the value our accounting computes."""
    df = assets.read_csv("frontier_moe.csv", ("model", "released", "total_b", "active_b", "experts", "source"))
    df[["total_b", "active_b"]] = df[["total_b", "active_b"]].apply(pd.to_numeric, errors="coerce")
    df["origin"] = "published"
    cfg = K3Config.full()
    p = count_params(cfg)
    published = df[df["model"] == "Kimi K3"]
    k3 = {"model": "Kimi K3 (computed)", "released": published["released"].iloc[0] if len(published) else "",
          "total_b": p.total / 1e9, "active_b": p.active / 1e9,
          "experts": f"{cfg.n_routed_experts} / {cfg.top_k} (+{cfg.n_shared_experts})",
          "source": "computed here from the published config (accounting)", "origin": "computed"}
    df = pd.concat([df[df["model"] != "Kimi K3"], pd.DataFrame([k3])], ignore_index=True)
    df["active share"] = df["active_b"] / df["total_b"]
    return df


def k2_vs_k3() -> pd.DataFrame:
    """Growth from K2 to K3, one row per metric; parameter counts computed by the accounting."""
    k2, k3 = K3Config.kimi_k2(), K3Config.full()
    p2, p3 = count_params(k2), count_params(k3)
    rows = [
        ("Total parameters (B)", p2.total / 1e9, p3.total / 1e9, "computed (main model)"),
        ("Active parameters (B)", p2.active / 1e9, p3.active / 1e9, "computed (main model)"),
        ("Layers", k2.num_layers, k3.num_layers, "config"),
        ("Attention heads", k2.mla_heads, k3.mla_heads, "config"),
        ("Routed experts", k2.n_routed_experts, k3.n_routed_experts, "config"),
        ("Experts per token (top-k)", k2.top_k, k3.top_k, "config"),
        ("Shared experts", k2.n_shared_experts, k3.n_shared_experts, "config"),
        ("Expert hidden width", k2.expert_hidden, k3.expert_hidden, "config"),
        ("Values a token sends to its experts", k2.top_k * k2.expert_width, k3.top_k * k3.expert_width,
         "derived: top-k x expert input width"),
        ("Context (tokens)", k2.context_length, k3.context_length, "config"),
    ]
    df = pd.DataFrame(rows, columns=["metric", "K2", "K3", "origin"])
    df["ratio"] = df["K3"] / df["K2"]
    return df


def k2_published_note() -> str:
    """Why K2's computed total differs from its published 1.04T: an inference of ours, labelled as one."""
    k2, k3 = K3Config.kimi_k2(), K3Config.full()
    p, extra = count_params(k2), mtp_layer(k2)
    p3, extra3 = count_params(k3), mtp_layer(k3)
    b = lambda n: f"{n / 1e9:,.1f}B"
    t2, t3, a2 = PUBLISHED_TOTAL_B["K2"] / 1000, PUBLISHED_TOTAL_B["K3"] / 1000, PUBLISHED_ACTIVE_B["K2"]
    return (f"Our accounting gives K2's main model {b(p.total)}; adding one multi-token-prediction (MTP) layer "
            f"(+{b(extra.total)}) gives {b(p.total + extra.total)}, which rounds to K2's published {t2:g}T. That the "
            f"published figure counts one MTP layer is our inference, not a published statement. It is not the "
            f"rule for K3: Table 1 lists an MTP layer for K3 too (one would add about {b(extra3.total)}), yet the "
            f"published {t3:g}T matches our count without it ({b(p3.total)}). Active per token: {b(p.active)} for "
            f"K2's main model, {b(p.active + extra.active)} with the MTP layer, against {a2:g}B published; the "
            f"remaining {b(a2 * 1e9 - p.active - extra.active)} we could not attribute to any part of the model.")


def growth_caption(growth: pd.DataFrame | None = None) -> str:
    """The caption of the K2 -> K3 chart, saying why its parameter ratios differ from Table 1's."""
    g = (growth if growth is not None else k2_vs_k3()).set_index("metric")
    tot, act = g.loc["Total parameters (B)", "ratio"], g.loc["Active parameters (B)", "ratio"]
    pt = PUBLISHED_TOTAL_B["K3"] / PUBLISHED_TOTAL_B["K2"]
    pa = PUBLISHED_ACTIVE_B["K3"] / PUBLISHED_ACTIVE_B["K2"]
    k2, k3 = K3Config.kimi_k2(), K3Config.full()
    return (f"Each metric on its own scale; the bold number is the K3 / K2 ratio. The parameter ratios "
            f"(x{tot:.2f} total, x{act:.2f} active) are of the two main models as our accounting counts them; "
            f"Table 1's published figures give x{pt:.2f} and x{pa:.2f}. The difference is K2's: its published "
            f"{PUBLISHED_TOTAL_B['K2'] / 1000:g}T and {PUBLISHED_ACTIVE_B['K2']:g}B are larger than our count of "
            f"its main model, by about one MTP layer (our inference) and, for the active count, a remainder we "
            f"could not attribute (see below). K3 has {k3.n_routed_experts / k2.n_routed_experts:.1f}x the experts "
            f"and routes each token to {k3.top_k / k2.top_k:g}x as many, yet a token sends the same number of values "
            f"to its experts ({k3.top_k} x {k3.expert_width:,} = {k2.top_k} x {k2.expert_width:,}) because LatentMoE "
            "halves the width experts work in.")


def frontier_note(df: pd.DataFrame | None = None) -> str:
    """Where K3 sits by active share among the models of the table, computed from the table."""
    df = df if df is not None else frontier_table()
    d = df.sort_values("active share").reset_index(drop=True)
    k3 = d.index[d["origin"] == "computed"][0]
    sparser = d.iloc[:k3]
    names = " and ".join(f"{m} ({x:.2%})" for m, x in zip(sparser["model"], sparser["active share"]))
    rank = ("the smallest share" if k3 == 0 else f"the {ordinal(k3 + 1)} smallest share")
    return (f"Log axes: total parameters (what must be stored) against active parameters (what each token computes "
            f"with). Dotted lines mark a constant active share. K3 uses {d.loc[k3, 'active share']:.2%} of its "
            f"weights per token, {rank} of the {len(d)} models in this table"
            + (f": {names} use{'s' if len(sparser) == 1 else ''} a smaller share. " if len(sparser) else ". ")
            + "K3's star is computed here; the other points are the published figures of the sources in the table.")


def ordinal(n: int) -> str:
    """1 -> '1st', 2 -> '2nd', 3 -> '3rd', 11 -> '11th', 22 -> '22nd'."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# ---- the page's sentences, computed from the config and the accounting ------------------------------------

def lead(cfg: K3Config | None = None) -> str:
    """The lead: total and active computed by the accounting, the experts per MoE layer from the config."""
    cfg = cfg or K3Config.full()
    p = count_params(cfg)
    return (f"Kimi K3 stores **{p.total / 1e12:.1f} trillion** parameters but uses only about "
            f"**{p.active / 1e9:.0f} billion** for each token: in each of its {len(cfg.moe_layers)} mixture-of-experts "
            f"layers a token visits {cfg.top_k} of {cfg.n_routed_experts} routed experts, plus {cfg.n_shared_experts} "
            "shared ones that every token uses. K3's numbers on this page are computed now from its published "
            "configuration, and the headline numbers are set beside the figures the K3 report publishes; the other "
            "models' numbers are their published figures.")


def try_this(cfg: K3Config | None = None) -> str:
    cfg = cfg or K3Config.full()
    return f"hover over the layer stack to see what each of the {cfg.num_layers} layers is made of."


def headline_note() -> str:
    """Where the headline cards' numbers come from, card by card."""
    return ("Computed: the parameter counts by the accounting of docs/ARCHITECTURE.md §9 (the formulas the tests "
            "check against the real PyTorch modules), the other cards read from `K3Config.full()`. Published: "
            "the K3 report's Table 1; the exact context is the released config's max_position_embeddings (Table 1 "
            "says \"1M\"), the sparsity is stated in sec 2.3, and the active share is derived from Table 1's two "
            "parameter figures.")


def stack_title(cfg: K3Config | None = None) -> str:
    cfg = cfg or K3Config.full()
    return f"{cfg.num_layers} layers: three KDA, then one gated MLA"


def stack_caption(cfg: K3Config | None = None) -> str:
    """The layer stack's caption: the schedule (K3 report sec 2.1) and the AttnRes blocks (Eq. 10, sec 2.2)."""
    cfg = cfg or K3Config.full()
    blocks, S = cfg.attnres_blocks, cfg.attnres_block_size
    full_blocks, rest = blocks.count(S), [b for b in blocks if b != S]
    sizes = f"{full_blocks} of {S} layers" + "".join(f" and one of {b}" for b in rest)
    return (f"{cfg.n_kda} Kimi Delta Attention layers (fixed-size state) and {cfg.n_mla} gated MLA layers "
            f"(a compressed cache that grows with the text): three KDA then one MLA, {cfg.n_mla - 1} times, plus a "
            f"final MLA (K3 report sec 2.1, Table 1). Layer 0 has a dense FFN; the other {len(cfg.moe_layers)} are "
            f"mixtures of experts. Shaded bands: the {len(blocks)} Attention-Residual blocks ({sizes}); each layer "
            "attends over the embedding, the sums of the earlier blocks and the partial sum of its own block "
            "(K3 report Eq. 10, sec 2.2).")


def stack_alt(cfg: K3Config | None = None) -> str:
    cfg = cfg or K3Config.full()
    return (f"Chart of K3's {cfg.num_layers} layers: attention type per layer (KDA or MLA), FFN type, and the "
            f"{len(cfg.attnres_blocks)} AttnRes blocks.")


def breakdown_caption(bd: pd.DataFrame, cfg: K3Config | None = None) -> str:
    """The breakdown's caption: shares of the parameters stored and of the parameters a token uses."""
    cfg = cfg or K3Config.full()
    routed = bd.set_index("component").loc["routed experts"]
    return (f"Routed experts hold {routed['share of total']:.1%} of all weights, but a token uses only {cfg.top_k} "
            f"of the {cfg.n_routed_experts} in each MoE layer, so they are {routed['share of active']:.1%} of the "
            "parameters a token uses. The embedding is a table lookup, so it is not counted as active (the "
            f"convention under which our count matches Table 1's {PUBLISHED_ACTIVE_B['K3']:g}B).")
