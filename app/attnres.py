"""Data behind the Attention Residuals page: link counts (closed form, the real bookkeeping, the live
trace), the depth-attention weights of one token, "can layer r retrieve what layer s computed?", and
the vectors kept alive per token. Pure functions first; thin cached wrappers at the end.
"""
from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import streamlit as st
import torch

from app.live import CACHE_TTL_S
from app.text import SUPERSCRIPT
from model.attnres import AttnResQuery, DepthState, block_sizes, link_count, vectors_alive
from model.k3 import K3Model, K3Output, model_with_weights

# The two ways of counting (docs/ARCHITECTURE.md section 1 table).
VIEWS = {
    "per-layer": {"reads_per_layer": 1, "output_read": False, "label": "one read per layer"},
    "two-reads": {"reads_per_layer": 2, "output_read": True, "label": "two reads per layer + output"},
}
PAPER = "AttnRes paper, arXiv 2603.15031 (same team as K3, self-cited)"
# Who calls Full AttnRes affordable below 100 layers, and why K3 still uses Block: the K3 report, not
# the AttnRes paper (the O(L^2 d) arithmetic is affordable; the O(L d) memory and pipeline traffic
# are the practical overhead).
AFFORDABLE_SOURCE = "K3 report (arXiv 2607.24653, section 2.2)"
AFFORDABLE_LAYERS = 100


# ---- link counts ----------------------------------------------------------------------------------

def link_series(block_size: int, view: str, max_layers: int = 200) -> pd.DataFrame:
    v = VIEWS[view]
    L = np.arange(1, max_layers + 1)
    return pd.DataFrame({
        "layers": L,
        "Full": [link_count(int(n), None, v["reads_per_layer"], v["output_read"]) for n in L],
        "Block": [link_count(int(n), block_size, v["reads_per_layer"], v["output_read"]) for n in L],
    })


def sci(x: float, digits: int = 2) -> str:
    """2.52e8 -> '2.5 × 10⁸' (digits significant figures)."""
    if x == 0:
        return "0"
    e = int(np.floor(np.log10(abs(x))))
    m = x / 10 ** e
    if round(m, digits - 1) >= 10:
        m, e = m / 10, e + 1
    return f"{m:.{digits - 1}f} × 10{str(e).translate(SUPERSCRIPT)}"


def growth_at(block_size: int, depths: tuple[int, ...] = (100, 200), reads_per_layer: int = 1,
              output_read: bool = False) -> list[dict]:
    """Block links at fixed block size S for larger depths, beside their leading term r L^2 / (2S) (r reads
    per layer): at a fixed block size the number of blocks grows with L, so links grow quadratically, only
    r S times slower than Full's r^2 L^2 / 2. Linear only if the number of blocks is fixed instead (the block
    size then grows with L)."""
    r, o = reads_per_layer, output_read
    return [{"layers": L, "block": link_count(L, block_size, r, o), "leading": r * L * L / (2 * block_size),
             "full": link_count(L, None, r, o)} for L in depths]


def growth_note(block_size: int, view: str = "per-layer") -> str:
    """One sentence for the link-count chart: how Full's and Block's links grow, for the count the Count control
    shows and the block size the slider sets."""
    v = VIEWS[view]
    r = v["reads_per_layer"]
    rows = growth_at(block_size, reads_per_layer=r, output_read=v["output_read"])
    at = ", ".join(f"{row['block']:,} at L = {row['layers']}" for row in rows)
    # the leading terms of model.depth_counts.link_count: Full r^2 L^2 / 2, Block r L^2 / (2S)
    full_law, block_law, slower = {1: ("L²/2", "L²/(2S)", "S times"), 2: ("2L²", "L²/S", "2S times")}[r]
    return (f"Full AttnRes lets every read see every earlier output, so its links grow like {full_law}. Block keeps "
            f"one sum per block, but at a fixed block size S (what the slider sets) the number of blocks grows with "
            f"L, so Block's links still grow like {block_law}, {slower} slower: {at} at S = {block_size} "
            f"({v['label']}). They grow linearly only if the number of blocks is held fixed.")


def depth_attention_macs(num_layers: int, d: int, block_size: int | None = None, reads_per_layer: int = 2,
                         output_read: bool = True) -> int:
    """Multiply-adds of depth attention for one token: per link one dot product with the query (the
    logit) and one scaled add into the mix, d each (the key normalisation adds up to half as much again;
    not counted). Full AttnRes at K3's 93 layers: 2 x 17,578 x 7,168 = 2.5e8."""
    return 2 * d * link_count(num_layers, block_size, reads_per_layer, output_read)


def affordability(cfg, bytes_per_value: int = 2) -> dict:
    """Is Full AttnRes affordable at this depth? Depth-attention arithmetic against the rest of the
    model (one multiply-add per active weight, the accounting's active count) and the memory kept
    alive per token (vectors x d, bf16), Full against Block, as K3 runs it (two reads per layer plus
    the output read)."""
    from model.accounting import count_params
    L, d, S = cfg.num_layers, cfg.d_model, cfg.attnres_block_size
    full, block = depth_attention_macs(L, d, None), depth_attention_macs(L, d, S)
    model_macs = count_params(cfg).active
    fv, bv = vectors_alive(L, None), vectors_alive(L, S)
    return {"full_links": link_count(L, None, 2, True), "block_links": link_count(L, S, 2, True),
            "full_macs": full, "block_macs": block, "model_macs": model_macs, "share": full / model_macs,
            "full_vectors": fv, "block_vectors": bv, "full_bytes": fv * d * bytes_per_value,
            "block_bytes": bv * d * bytes_per_value}


def affordability_note(cfg) -> str:
    """Why the shaded region says 'affordable' and why K3 still runs Block, with the numbers."""
    a = affordability(cfg)
    return (f"The shaded region is where the {AFFORDABLE_SOURCE} calls Full AttnRes affordable (L < "
            f"{AFFORDABLE_LAYERS}): its arithmetic is small, {sci(a['full_macs'], 3)} multiply-adds per token at "
            f"L = {cfg.num_layers}, {a['share']:.2%} of the {sci(a['model_macs'], 3)} of the active weights (derived: "
            f"two multiply-adds per link and value, one per active weight). K3 still uses Block for what the report "
            f"names the practical overhead, memory: Full keeps {a['full_vectors']} vectors per token alive "
            f"({a['full_bytes'] / 1e6:.1f} MB at bf16, this page's assumption) and moves them between pipeline "
            f"stages; Block keeps {a['block_vectors']} ({a['block_bytes'] / 1e3:.0f} KB).")


def attnres_ratios(cfg) -> list[dict]:
    """The four Full-vs-Block ratios quoted for K3's AttnRes, each named by what it counts (K3's config, blocks
    of cfg.attnres_block_size): layers per block, vectors kept alive per token, and links read per token in the
    two ways of counting (docs/ARCHITECTURE.md section 1)."""
    L, S = cfg.num_layers, cfg.attnres_block_size
    N = len(cfg.attnres_blocks)
    rows = [("layers per block", L, N, f"{L} layers / {N} blocks"),
            ("vectors kept alive per token", vectors_alive(L, None), vectors_alive(L, S),
             "Full 2L + 1 / Block N + 1"),
            ("links read per token, one read per layer", link_count(L, None, 1), link_count(L, S, 1), "Full / Block"),
            ("links read per token, two reads per layer + output", link_count(L, None, 2, True),
             link_count(L, S, 2, True), "Full / Block")]
    return [{"name": n, "before": b, "after": a, "ratio": b / a, "how": h} for n, b, a, h in rows]


def ratios_note(cfg) -> str:
    """One sentence naming the four AttnRes ratios by what they count and saying why they differ."""
    r = {x["name"]: x for x in attnres_ratios(cfg)}
    lpb, vec = r["layers per block"], r["vectors kept alive per token"]
    one, two = (r[f"links read per token, {k}"] for k in ("one read per layer", "two reads per layer + output"))
    return (f"Four ratios compare K3's Block AttnRes with Full in this app, each counting something else (computed, "
            f"blocks of {cfg.attnres_block_size}): **layers per block**, {lpb['before']} layers / {lpb['after']} blocks = "
            f"{lpb['ratio']:.1f} (the ratio claim 7 quotes as a compression; nothing a token keeps), **vectors kept "
            f"alive per token** "
            f"{vec['before']} / {vec['after']} = {vec['ratio']:.1f}x (K3 has two modules per layer, each output its "
            f"own vector under Full), and **links read per token** {one['before']:,} / {one['after']:,} = "
            f"{one['ratio']:.1f}x with one read per layer or {two['before']:,} / {two['after']:,} = "
            f"{two['ratio']:.1f}x with two reads per layer and the output read (links add up every read's "
            "candidates, so they grow with the square of the depth and differ with the reads counted).")


@functools.lru_cache(maxsize=256)
def bookkeeping_links(num_layers: int, block_size: int | None, reads_per_layer: int, output_read: bool) -> int:
    """Links counted by running the real DepthState (model/attnres.py) on one-value dummy vectors:
    the same code the live model's residual stream runs, with any number of modules per layer."""
    mode = "full" if block_size is None else "block"
    x = torch.zeros(1, 1, 1)
    query = AttnResQuery(1)
    with torch.inference_mode():
        state = DepthState(x, mode, block_size or 1, record=False)
        for i in range(num_layers):
            state.begin_layer(i)
            for _ in range(reads_per_layer):
                state.read(query)
                state.add(x)
        if output_read:
            state.read(query, "out")
    return state.links


def count_table(view: str, block_size: int, num_layers: int, live_block: int | None,
                live_full: int | None) -> pd.DataFrame:
    """Closed form, bookkeeping and (where the live instance runs this setting) the live trace."""
    v = VIEWS[view]
    r, o = v["reads_per_layer"], v["output_read"]
    rows = [
        {"count": "closed form (model.attnres.link_count)",
         "Full": link_count(num_layers, None, r, o), "Block": link_count(num_layers, block_size, r, o)},
        {"count": "the real DepthState bookkeeping, run on dummy vectors",
         "Full": bookkeeping_links(num_layers, None, r, o), "Block": bookkeeping_links(num_layers, block_size, r, o)},
    ]
    if view == "two-reads":
        rows.append({"count": "the live model's forward (out.trace.link_count)",
                     "Full": live_full, "Block": live_block})
    return pd.DataFrame(rows)


# ---- depth-attention weights of one token ---------------------------------------------------------

def source_order(labels: list[str]) -> list[str]:
    """Columns of the heatmap: the order sources first appear, with the partial sum last."""
    seen = list(dict.fromkeys(labels))
    return [s for s in seen if s != "partial"] + (["partial"] if "partial" in seen else [])


def depth_matrix(out: K3Output, token: int) -> tuple[np.ndarray, list[str], list[str]]:
    """Every read (rows) x every source (columns) for one token; NaN where a read had no such source."""
    reads = out.trace.reads
    cols = source_order([s for _, _, names in reads for s in names])
    index = {s: j for j, s in enumerate(cols)}
    z = np.full((len(reads), len(cols)), np.nan)
    for i, (_, a, names) in enumerate(reads):
        z[i, [index[s] for s in names]] = a[0, token].float().numpy()
    return z, [label for label, _, _ in reads], cols


def boundary_rows(read_labels: list[str], block_size: int) -> list[int]:
    """Row (or column) indices where a new block of layers starts (layer 12, 24, ... at block size 12)."""
    starts = {f"L{i}.attn" for i in range(block_size, 10_000, block_size)}
    return [i for i, label in enumerate(read_labels) if label in starts]


# ---- can layer r retrieve what layer s computed? --------------------------------------------------

@functools.lru_cache(maxsize=32)
def source_members(mode: str, block_size: int, num_layers: int) -> dict[str, dict[str, tuple]]:
    """For every read: each source label -> the module outputs summed in it, as (layer, module) pairs
    ("emb" for the embedding). Found by running the real DepthState on tuples: adding two tuples
    concatenates them, so a partial sum becomes the list of what was summed."""
    state = DepthState(("emb",), mode, block_size, record=False)
    out = {}
    for i in range(num_layers):
        state.begin_layer(i)
        for module in ("attn", "ffn"):
            srcs, names = state.sources()
            out[f"L{i}.{module}"] = dict(zip(names, srcs))
            state.add(((i, module),))
    srcs, names = state.sources()
    out["out"] = dict(zip(names, srcs))
    return out


def retrieval(out: K3Output, read: str, token: int) -> pd.DataFrame:
    """How much of each earlier layer's output one read mixes in, for one token.

    The read's softmax weight a_s of each source is split among the layers summed in that source by
    their share of its module-output norms: share(l) = sum_m |o_(l,m)| / sum over every module output
    in the source of |o|. In Full mode every source is one module, so the share is 1 and a layer's
    weight is a(L.attn) + a(L.ffn). The effective weights of all layers plus the embedding's sum to 1.
    """
    depth = out.trace.depth
    labels = [label for label, _, _ in out.trace.reads]
    if read not in labels:
        raise ValueError(f"no read named {read}")
    _, a, names = out.trace.reads[labels.index(read)]
    members = source_members(depth.mode, depth.block_size, out.trace.num_layers)[read]
    emb = depth.blocks[0][0, token].float()                              # the embedding, [d]

    def norm(m) -> float:
        return float(emb.norm() if m == "emb" else out.trace.outputs[m][0, token].float().norm())

    rows = []
    for j, name in enumerate(names):
        mods = members[name]
        norms = {m: norm(m) for m in mods}
        total = sum(norms.values()) or 1.0
        for layer in sorted({m[0] for m in mods if m != "emb"}):
            share = sum(v for m, v in norms.items() if m != "emb" and m[0] == layer) / total
            rows.append({"layer": layer, "source": name, "source weight": float(a[0, token, j]),
                         "share": share, "weight": float(a[0, token, j]) * share})
        if "emb" in mods:
            rows.append({"layer": -1, "source": name, "source weight": float(a[0, token, j]),
                         "share": norms["emb"] / total, "weight": float(a[0, token, j]) * norms["emb"] / total})
    df = pd.DataFrame(rows)
    # Full mode: a layer appears once per module source; sum them into one row per layer
    return (df.groupby("layer", as_index=False)
              .agg(source=("source", " + ".join), **{"source weight": ("source weight", "sum")},
                   share=("share", "mean"), weight=("weight", "sum")))


# ---- memory kept alive per token ------------------------------------------------------------------

def depth_memory(num_layers: int, block_size: int, d: int, bytes_per_value: int = 2) -> pd.DataFrame:
    rows = []
    for name, bs in (("Full", None), ("Block", block_size)):
        n = vectors_alive(num_layers, bs)
        rows.append({"design": name, "vectors": n, "values": n * d, "bytes": n * d * bytes_per_value})
    return pd.DataFrame(rows)


def vectors_by_block_size(num_layers: int) -> pd.DataFrame:
    bs = np.arange(1, num_layers + 1)
    return pd.DataFrame({"block size": bs, "blocks": [len(block_sizes(num_layers, int(b))) for b in bs],
                         "vectors": [vectors_alive(num_layers, int(b)) for b in bs]})


# ---- the Full variant of the live model -----------------------------------------------------------

def full_variant(model: K3Model) -> K3Model:
    """The same weights run with Full AttnRes (config switch attnres="full"). Parameter shapes are
    identical, so the state dict loads as is; the tensors are shared, never written."""
    return model_with_weights(model.cfg.with_(attnres="full"), model.state_dict())


# ---- cached wrappers for the page -----------------------------------------------------------------

@st.cache_resource(show_spinner="Building the Full-AttnRes variant of the live model…")
def live_full_model() -> K3Model:
    from app.live import computing, live
    model = live().model
    with computing():
        return full_variant(model)


# a run of the Full variant is as heavy as a forward (~60 MB at 128 tokens): kept like app.live's (bounded, expiring)
FULL_ENTRIES = 4


@st.cache_resource(max_entries=FULL_ENTRIES, ttl=CACHE_TTL_S, show_spinner=False)
def full_forward(ids: tuple[int, ...]) -> K3Output:
    from app.live import MAX_TOKENS, computing
    model = live_full_model()
    with computing():
        return model(torch.tensor([ids]), max_tokens=MAX_TOKENS)


@st.cache_resource(max_entries=64, show_spinner=False)
def cached_spec(name: str, *args, theme_type: str | None = None) -> dict:
    """Chart specs that depend only on closed forms and a control or two, built once per process (and per
    light / dark theme: their labels take its text colour). Shared: never mutate the returned spec."""
    from app.charts import attnres as charts
    if name == "links":
        block_size, view, mark = args
        return charts.links_spec(link_series(block_size, view), mark, block_size, theme_type=theme_type)
    if name == "vectors":
        num_layers, block_size, d = args
        return charts.vectors_spec(vectors_by_block_size(num_layers), vectors_alive(num_layers, None), block_size, d,
                                   theme_type=theme_type)
    raise ValueError(f"no chart named {name}")
