"""One typed config for Kimi K3 and its shrunken live instances.

`full` is K3 as published (it feeds the accounting, never a set of weights); `tiny` is the live
instance: it keeps `full`'s layers (93, 69 KDA + 24 gated MLA, layer 0 dense), experts (896, top-16, 2
shared), AttnRes blocks of 12, SiTU-GLU caps and MX formats, and two ratios of widths (latent = d/2, shared
experts as wide as routed ones), and shrinks the widths, the head counts (96 -> 2) and the vocabulary
(163,840 -> 4,096; app.model_card.kept_and_shrunk says it on the page); `micro` is a few-layer,
few-expert version for fast unit tests. `kimi_k2` is K2's published configuration, kept so
the accounting can compare the two generations.

Sources: K3 technical report arXiv 2607.24653 v2 (Table 1) and the published config.json of
moonshotai/Kimi-K3 ("published"; the exact context, 1,048,576, is that config's max_position_embeddings,
where Table 1 says "1M"); Kimi K2 arXiv 2507.20534 and its config.json. Values marked "derived" follow
from published ones by the rule given beside them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Literal

BETA_GATE, BETA_UP = 4.0, 25.0   # SiTU-GLU's bounds (K3 report): |SiTU-GLU| <= 4 * 25 = 100 elementwise

AttnKind = Literal["kda", "mla"]


def hybrid_schedule(num_layers: int, period: int = 4) -> list[str]:
    # K3 report: three KDA layers then one gated MLA layer, repeated, plus a final MLA layer, so the
    # MLA layers sit at 1-based positions 4, 8, ..., 92 and 93.
    return ["mla" if (i + 1) % period == 0 or i == num_layers - 1 else "kda" for i in range(num_layers)]


@dataclass(frozen=True)
class K3Config:
    name: str = "full"

    # ---- the stack -------------------------------------------------------------------------------
    num_layers: int = 93                       # published: 69 KDA + 24 gated MLA
    layer_types: tuple[str, ...] = field(default_factory=lambda: tuple(hybrid_schedule(93)))
    d_model: int = 7168                        # published hidden size
    vocab_size: int = 163_840                  # published; untied LM head
    context_length: int = 1_048_576            # published: config max_position_embeddings (2^20; Table 1: "1M"); NoPE
    norm_eps: float = 1e-5

    # ---- Kimi Delta Attention (69 layers) --------------------------------------------------------
    kda_heads: int = 96                        # published
    kda_head_dim: int = 128                    # published d_k (= d_v)
    kda_conv: int = 4                          # published short-conv kernel
    kda_gate_bound: float = -5.0               # published lower bound of the log decay

    # ---- gated MLA, no positional encoding (24 layers) -------------------------------------------
    mla_heads: int = 96                        # published
    q_lora_rank: int = 1536                    # published
    kv_lora_rank: int = 512                    # published
    qk_nope_dim: int = 128                     # published
    qk_rope_dim: int = 64                      # published (kept, never rotated: NoPE)
    v_head_dim: int = 128                      # published
    mla_gate: bool = True                      # K3's per-channel sigmoid output gate (K2: none)

    # ---- FFNs ------------------------------------------------------------------------------------
    first_dense_layers: int = 1                # published: layer 0 is a dense FFN
    dense_hidden: int = 33_792                 # published
    n_routed_experts: int = 896                # published
    top_k: int = 16                            # published
    n_shared_experts: int = 2                  # published
    expert_hidden: int = 3072                  # published per-expert hidden f
    shared_hidden: int = 3072                  # published: each shared expert as wide as a routed one
    # published (config routed_expert_hidden_size, Table 1); = d / 2; None = experts at full width
    latent_dim: int | None = 3584
    activation: str = "situ_glu"               # published: SiTU-GLU in every FFN
    situ_beta_gate: float = 4.0                # published
    situ_beta_up: float = 25.0                 # published
    router_scale: float = 1.0                  # published routed scaling factor

    # ---- residual over depth ---------------------------------------------------------------------
    attnres: str | None = "block"              # published: Block AttnRes; "full" or None (plain residual)
    attnres_block_size: int = 12               # published: 93 layers -> 8 blocks (7 x 12 + 9)

    # ---- quantisation ----------------------------------------------------------------------------
    expert_weight_format: str = "e2m1"         # published: MXFP4 routed-expert weights
    expert_act_format: str = "e4m3"            # published: MXFP8 activations in experts (E4M3 elements: K3's serving kernels)

    # Which values of this preset are taken from a publication; the rest are derived or chosen.
    sources: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "layer_types", tuple(self.layer_types))
        if len(self.layer_types) != self.num_layers:
            raise ValueError(f"layer_types has {len(self.layer_types)} entries for {self.num_layers} layers")
        bad = set(self.layer_types) - {"kda", "mla"}
        if bad:
            raise ValueError(f"unknown layer types {sorted(bad)}")
        if not 1 <= self.top_k <= self.n_routed_experts:
            raise ValueError("top_k must lie in 1..n_routed_experts")
        if self.attnres not in (None, "block", "full"):
            raise ValueError("attnres is 'block', 'full' or None")

    # ---- derived quantities ----------------------------------------------------------------------
    @property
    def kda_proj(self) -> int:                 # P = H * d_k
        return self.kda_heads * self.kda_head_dim

    @property
    def n_kda(self) -> int:
        return sum(t == "kda" for t in self.layer_types)

    @property
    def n_mla(self) -> int:
        return sum(t == "mla" for t in self.layer_types)

    @property
    def moe_layers(self) -> list[int]:
        return list(range(self.first_dense_layers, self.num_layers))

    @property
    def sparsity(self) -> float:               # routed experts per active routed expert
        return self.n_routed_experts / self.top_k

    @property
    def expert_width(self) -> int:             # the width a routed expert reads and writes
        return self.latent_dim if self.latent_dim else self.d_model

    @property
    def attnres_blocks(self) -> list[int]:     # layers per block, e.g. [12]*7 + [9]
        if self.attnres != "block":
            return []
        s, L = self.attnres_block_size, self.num_layers
        return [min(s, L - i) for i in range(0, L, s)]

    def is_moe(self, layer: int) -> bool:
        return layer >= self.first_dense_layers

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("sources")
        d["layer_types"] = list(self.layer_types)
        return d

    def with_(self, **changes) -> "K3Config":
        if "num_layers" in changes and "layer_types" not in changes:
            changes["layer_types"] = tuple(hybrid_schedule(changes["num_layers"]))
        return replace(self, **changes)

    # ---- presets ---------------------------------------------------------------------------------
    @classmethod
    def full(cls) -> "K3Config":
        return cls(sources=_K3_SOURCES)

    @classmethod
    def tiny(cls) -> "K3Config":
        # `full`'s counts (93 layers, 69/24, 896 experts, top-16, 2 shared, blocks of 12) and latent = d/2;
        # the widths, the head counts and the vocabulary shrink (the other width ratios are not K3's).
        return cls(
            name="tiny", d_model=32, vocab_size=4096, context_length=1_048_576,
            kda_heads=2, kda_head_dim=16,
            mla_heads=2, q_lora_rank=16, kv_lora_rank=16, qk_nope_dim=8, qk_rope_dim=4, v_head_dim=16,
            dense_hidden=128, expert_hidden=8, shared_hidden=8, latent_dim=16,
        )

    @classmethod
    def micro(cls) -> "K3Config":
        # For unit tests: 6 layers (KDA, KDA, KDA, MLA, KDA, MLA) so every mechanism appears, blocks
        # of 2 so several AttnRes blocks seal, 16 experts top-4.
        return cls(
            name="micro", num_layers=6, layer_types=tuple(hybrid_schedule(6)), d_model=16,
            vocab_size=64, kda_heads=2, kda_head_dim=8,
            mla_heads=2, q_lora_rank=8, kv_lora_rank=8, qk_nope_dim=4, qk_rope_dim=2, v_head_dim=8,
            dense_hidden=32, n_routed_experts=16, top_k=4, expert_hidden=4, shared_hidden=4,
            latent_dim=8, attnres_block_size=2,
        )

    @classmethod
    def kimi_k2(cls) -> "K3Config":
        # Kimi K2 (arXiv 2507.20534, config.json): 61 MLA layers with 64 heads and no output gate, one
        # dense layer, 384 experts top-8 plus 1 shared at full width, SwiGLU, plain residual stream.
        return cls(
            name="kimi_k2", num_layers=61, layer_types=("mla",) * 61, d_model=7168, vocab_size=163_840,
            context_length=131_072, mla_heads=64, mla_gate=False, dense_hidden=18_432,
            n_routed_experts=384, top_k=8, n_shared_experts=1, expert_hidden=2048, shared_hidden=2048,
            latent_dim=None, activation="swiglu", router_scale=2.827, attnres=None,
            expert_weight_format="bf16", expert_act_format="bf16", sources=_K2_SOURCES,
        )


_K3 = "K3 report arXiv 2607.24653 v2, Table 1 / moonshotai/Kimi-K3 config.json"
_K3_SOURCES = {
    "num_layers": _K3, "layer_types": _K3 + " (3 KDA : 1 MLA, final MLA)", "d_model": _K3,
    "vocab_size": _K3, "context_length": _K3, "kda_heads": _K3, "kda_head_dim": _K3, "kda_conv": _K3,
    "kda_gate_bound": _K3, "mla_heads": _K3, "q_lora_rank": _K3, "kv_lora_rank": _K3,
    "qk_nope_dim": _K3, "qk_rope_dim": _K3, "v_head_dim": _K3, "mla_gate": _K3,
    "first_dense_layers": _K3, "dense_hidden": _K3, "n_routed_experts": _K3, "top_k": _K3,
    "n_shared_experts": _K3, "expert_hidden": _K3, "shared_hidden": _K3, "activation": _K3,
    "situ_beta_gate": _K3, "situ_beta_up": _K3, "router_scale": _K3, "attnres": _K3,
    "attnres_block_size": _K3, "expert_weight_format": _K3, "latent_dim": _K3 + " (routed_expert_hidden_size)",
    "expert_act_format": "K3 report (MXFP8); E4M3 elements as K3's serving kernels take them",
}
# Values computed from published ones rather than read off a table.
DERIVED = {
    "kda_proj": "kda_heads x kda_head_dim",
    "sparsity": "n_routed_experts / top_k",
    "n_kda": "count of 'kda' in layer_types",
    "n_mla": "count of 'mla' in layer_types",
}
_K2 = "Kimi K2 arXiv 2507.20534 / moonshotai/Kimi-K2 config.json"
_K2_SOURCES = {k: _K2 for k in (
    "num_layers", "d_model", "vocab_size", "context_length", "mla_heads", "q_lora_rank", "kv_lora_rank",
    "qk_nope_dim", "qk_rope_dim", "v_head_dim", "dense_hidden", "n_routed_experts", "top_k",
    "n_shared_experts", "expert_hidden", "router_scale")}


def provenance(cfg: K3Config, field_name: str) -> tuple[str, str]:
    """('published' | 'derived' | 'chosen', where from) for one field of a preset."""
    if field_name in cfg.sources:
        return "published", cfg.sources[field_name]
    if field_name in DERIVED:
        return "derived", DERIVED[field_name]
    return "chosen", "set for this preset"
