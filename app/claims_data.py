"""The claims of the Claims page (docs/APP.md page 10) and what a check of one gives: every claim of
docs/REFERENCES.md "The claims checked", quoted from the public article it comes from, the evidence level of
each component, the verdicts a check can reach, and the published figures the checks compare against.

A claim holds only quotations: sentences or fragments copied verbatim from the named article, with
none of this project's notes. The computed values and the verdicts are not typed in: the checks
(app/claims_architecture.py, app/claims.py) derive them at render time, registered here by claim number.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from model.accounting import count_params
from model.config import K3Config
from model.k3 import K3Model, K3Output

VERDICTS = ("holds", "holds with a caveat", "does not hold", "cannot be checked here")
VERDICT_COLOURS = {"holds": "green", "holds with a caveat": "orange", "does not hold": "red",
                   "cannot be checked here": "gray"}
VERDICT_ICONS = {"holds": ":material/check_circle:", "holds with a caveat": ":material/error:",
                 "does not hold": ":material/cancel:", "cannot be checked here": ":material/help:"}


@dataclass(frozen=True)
class Article:
    key: str
    title: str                      # as published
    short: str                      # how the page names it after the first mention


# The two public interactive articles about K3 that the claims come from (docs/REFERENCES.md).
ARTICLES = {
    "mechanics": Article("mechanics", "Kimi K3- Sparsity Mechanics, Multi-Tiered Token Compression, and MoE vs. "
                                      "Mixture-of-Agents Paradigms", "Sparsity Mechanics"),
    "trillion": Article("trillion", "Kimi K3 Goes Trillion-Scale With Sparse MoE Efficiency", "Trillion-Scale"),
}
SOURCE = ("two public articles about K3, “" + ARTICLES["mechanics"].title + "” and “" + ARTICLES["trillion"].title
          + "”; each quotation names its article, and nothing inside the quotation marks is ours")


@dataclass(frozen=True)
class Quote:
    article: str                    # a key of ARTICLES
    text: str                       # copied verbatim (inline $...$ is the article's own math)

    def __post_init__(self):
        if self.article not in ARTICLES:
            raise ValueError(f"unknown article {self.article!r}")


@dataclass(frozen=True)
class Claim:
    number: int
    title: str                      # the project's short name for the claim, not a quotation
    quotes: tuple[Quote, ...]       # what the articles say, verbatim
    page: str                       # url path of the page that shows it (app.navigation); "" for none
    components: tuple[str, ...] = ()
    report: str = ""                # where the check rests in the K3 report: "Eq. 7, sec 2.1.2"
    where: str = ""                 # the section of `page` that shows it (its subheader), if not the top

    @property
    def cite(self) -> str:
        """'K3 report Eq. 7, sec 2.1.2': what a student looks up in arXiv 2607.24653 v2."""
        return f"K3 report {self.report}" if self.report else ""

    @property
    def text(self) -> str:
        """The quotations, joined; each article named after its own."""
        return " … ".join(f"“{q.text}” ({ARTICLES[q.article].short})" for q in self.quotes)

    @property
    def articles(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(q.article for q in self.quotes))


def quote_markdown(claim: Claim) -> str:
    """The claim as a markdown block quote: each quotation, then the full title of its article.
    The text is ours (constants above), not user input, so the articles' inline $...$ math renders."""
    return "\n>\n".join(f"> “{q.text}”  \n> — *{ARTICLES[q.article].title}*" for q in claim.quotes)


def _q(article: str, *texts: str) -> tuple[Quote, ...]:
    return tuple(Quote(article, t) for t in texts)


M, T = "mechanics", "trillion"
# `report`: the K3 report's (arXiv 2607.24653 v2) equations and sections each check rests on, as numbered there:
# Eq. 1-6 KDA (1-2 the recurrence, 3-4 its chunkwise form, 5 the lower-bounded decay, 6 the output gate),
# Eq. 7 gated MLA, Eq. 8-10 AttnRes, Eq. 11 Stable LatentMoE, Eq. 12 SiTU-GLU, Eq. 13 biased top-k
# routing, Eq. 14 the Quantile Balancing update.
CLAIMS = (
    Claim(1, "2.8T total, 104B active",
          _q(M, "Kimi K3 achieves 2.8T parameters of representational capacity while executing only 104B "
                "parameters per token.", "~3.7% Computational Footprint"),
          "overview", report="Table 1, sec 3.2"),
    Claim(2, "1M-token context", _q(M, "1,048,576 Native Tokens"), "attention", ("KDA", "Gated MLA"),
          report="Table 1, sec 2.1.2, sec 3.4"),
    Claim(3, "896 experts, 16 active: sparsity 56x",
          _q(T, "Sparsity Ratio: 56×", "16 of 896 routed experts fire per token") + _q(M, "Top-16 Active + 2 Shared"),
          "routing", ("Stable LatentMoE",), report="Eq. 11, Eq. 13, sec 2.3, Table 1"),
    Claim(4, "93 layers, 69 KDA + 24 MLA",
          _q(M, "Confirmed 93 total layers structured in a 3:1 ratio (69 KDA linear layers and 24 Gated MLA latent "
                "attention layers).")
          + _q(T, "Every block: three Kimi Delta Attention (KDA) layers, then one Gated MLA layer — repeated across the "
                  "93-layer backbone, with an extra MLA layer at the very end."),
          "overview", ("KDA", "Gated MLA"), report="sec 2.1, Table 1"),
    Claim(5, "KDA cuts 100% of the KV cache",
          _q(M, "100% Cache Cut", "Replaces KV caching in 69 layers with a fixed-size associative memory matrix"),
          "attention", ("KDA",), report="Eq. 1–2, sec 2.1.1"),
    Claim(6, "MLA cuts 75% of the attention cache",
          _q(M, "75% Cache Cut", "Compresses key/value representations into a low-rank latent vector $c_t^{KV}$ "
                "across 24 global attention layers, operating without rotary positional encodings (NoPE)."),
          "attention", ("Gated MLA",), report="Eq. 7, sec 2.1.2"),
    Claim(7, "Block AttnRes compresses depth 11.6x",
          _q(M, "11.6x Compression", "Groups 93 layers into $N \\approx 8$ summary blocks."),
          "attnres", ("Block AttnRes",), report="Eq. 8–10, sec 2.2"),
    Claim(8, "The latent halves cross-GPU dispatch",
          _q(M, "50% NVLink Cut", "Projects full 7168-dim activations down to a 3584-dim latent vector before "
                "All-to-All GPU dispatch, halving cross-node communication overhead."),
          "parallel", ("Stable LatentMoE",), report="Eq. 11, sec 2.3, Table 1"),
    Claim(9, "SiTU-GLU is bounded by 100",
          _q(M, "SiTU-GLU enforces a mathematical soft-cap limit ($|f(z)| \\le 100$), eliminating FP8 activation "
                "overflows during 2.8T parameter training where standard SwiGLU diverges."),
          "situ-glu", ("SiTU-GLU",), report="Eq. 12, sec 2.3.2, App. B, sec 4.1.4"),
    Claim(10, "112 experts per GPU, any shard",
          _q(T, "896 experts sharded across 8 GPUs (~112 each). A token's top-16 experts can land on any shard — the "
                "activation hops the datacenter fabric to get there."),
          "parallel", ("Stable LatentMoE",), report="Eq. 13, sec 5.2"),
    Claim(11, "Quantile Balancing: output weights, history, cluster load",
          _q(M, "Kimi K3 utilizes Quantile Balancing, tracking historical selection quantiles to apply expert-specific "
                "selection biases during ranking while preserving rawrouter logits for output weighting. This "
                "maintains uniform hardware cluster load without distorting semantic learned weights."),
          "balance", ("Quantile Balancing",), report="Eq. 13–14, sec 2.3.3, App. D; sec 5.2.1, App. E"),
    Claim(12, "Sub-microsecond latency",
          _q(M, "Sub-Microsecond Latency: Dynamic token routing occurs synchronously within layer steps via "
                "high-speed NVLink interconnects.",
             "executing only 104 billion parameters per token at low sub-microsecond latency."),
          "moe-vs-moa", report="sec 4.1.4, sec 5.2.1", where="What one decode step reads"),
    Claim(13, "2.5x efficiency gain: one number for all of K3's changes",
          _q(T, "Validation Loss Scaling: K2 vs K3", "Figure 7's headline number — 2.5× efficiency gain — bundles KDA, "
                "Attention Residuals, Stable LatentMoE, and the data recipe together."),
          "", report="Figure 7, sec 3.2, sec 1"),
    Claim(14, "AttnRes: N ≈ 8, Full vs Block, L < 100",
          _q(T, "Attention Residuals traces almost entirely to a same-team, same-year preprint — including the \"N≈8\" "
                "claim and the Full-vs-Block comparison — and its own stated affordability condition, L < 100, is "
                "already strained at K3's 93 layers."),
          "attnres", ("Block AttnRes",), report="Eq. 8–10, sec 2.2"),
    Claim(15, "Mixture of Agents costs more",
          _q(M, "Chart 4: Compares relative active FLOPs per token, total KV-cache memory overhead, and total context "
                "decoding latency between sparse MoE and an 8-agent dense MoA setup.",
             "Every autonomous agent maintains its own replicated KV-cache for the sequence."),
          "moe-vs-moa", report="sec 4.1.4", where="The costs, side by side"),
)

# docs/REFERENCES.md "Evidence confidence by component". High: the lineage was published by another team
# and is in wide use; mixed: the base idea is published (or open) but what K3 changes appears only in the
# K3 report, or the corroboration is the same team's; self-cited: the only source is the K3 team.
EVIDENCE = (
    ("KDA", "mixed", "Kimi Linear (arXiv 2510.26692) is the K3 team's own paper; its code is open and has been "
                     "reimplemented, but a reimplementation is not a reproduction of the results, and K3's changes "
                     "to KDA appear only in the K3 report (arXiv 2607.24653)"),
    ("Gated MLA", "high", "MLA from DeepSeek-V2 (arXiv 2405.04434), another team, used since in DeepSeek-V3 and "
                          "Kimi K2; the output gate and NoPE are described in the K3 report"),
    ("Stable LatentMoE", "mixed", "LatentMoE by NVIDIA (arXiv 2601.18089); the stability changes are K3's own"),
    ("Block AttnRes", "self-cited", "one same-team preprint, 2026 (arXiv 2603.15031), and the K3 report"),
    ("SiTU-GLU", "self-cited", "K3 report only"),
    ("Quantile Balancing", "self-cited", "K3 report only"),
)
LEVELS = ("self-cited", "mixed", "high")
LEVEL_MEANING = {
    "high": "the lineage was published by another team and is widely used",
    "mixed": "the base idea is published or open, but K3's version rests on the K3 team's own reports",
    "self-cited": "the only source is the K3 team",
}


# Published by DeepSeek (github.com/deepseek-ai/DeepEP, the V1 performance table, now docs/legacy.md): DeepEP's
# low-latency kernels on H800 GPUs, each with a 400 Gb/s InfiniBand card (RDMA), 128 tokens per batch, hidden 7,168,
# top-8 experts, FP8 dispatch and BF16 combine, at 8-way expert parallelism.
DEEPEP = {"dispatch_s": 77e-6, "combine_s": 114e-6, "ep": 8, "tokens": 128, "hidden": 7168, "top_k": 8}
DEEPEP_SOURCE = ("DeepEP's low-latency kernels (published by DeepSeek, github.com/deepseek-ai/DeepEP: H800 GPUs over "
                 "RDMA, 128 tokens per batch, hidden 7,168, top-8, FP8 dispatch, BF16 combine)")


@dataclass(frozen=True)
class Part:
    """One separately judged part of a claim whose parts fare differently."""
    label: str
    verdict: str
    why: str

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}")


@dataclass(frozen=True)
class Check:
    claim: Claim
    computed: str                   # markdown: what the code computes, with its origin
    verdict: str                    # for a split claim: the summary of its parts
    why: str                        # one sentence
    values: dict = field(default_factory=dict)   # the raw numbers, for tests and the table
    parts: tuple[Part, ...] = ()    # a claim judged in parts (claims 6, 11, 13, 14)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}")

    @property
    def verdicts(self) -> tuple[str, ...]:
        """Every verdict this check carries: its summary and those of its parts."""
        return tuple(dict.fromkeys((self.verdict,) + tuple(p.verdict for p in self.parts)))

    def matches(self, picked) -> bool:
        """For the verdict filter: shown when the summary or any part has a picked verdict."""
        return any(v in picked for v in self.verdicts)


# ---- what a check reads, and the register of checks ----------------------------------------------------

@dataclass(frozen=True)
class Context:
    model: K3Model                  # the live instance
    out: K3Output                   # its forward on a prompt
    cfg: K3Config = field(default_factory=K3Config.full)

    @property
    def params(self):
        return count_params(self.cfg)


CHECKS: dict = {}             # claim number -> the function that checks it (Context -> Check)


def check(number: int):
    """Register the decorated function as the check of claim `number` (once)."""
    def register(fn):
        if number in CHECKS:
            raise ValueError(f"claim {number} has two checks")
        CHECKS[number] = fn
        return fn
    return register


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


def verdict_slug(v: str) -> str:
    return v.replace(" ", "-")
