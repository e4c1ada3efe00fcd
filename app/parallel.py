"""Data behind the Expert parallelism page (docs/ARCHITECTURE.md section 5; docs/REFERENCES.md claims 8
and 10).

Shards are contiguous: with G devices, device r holds experts r*n/G .. (r+1)*n/G - 1 (model.parallel
uses the same rule when it runs the layer for real). Tokens start on a source device by position
blocks or round robin (model.parallel.token_owner). Pure functions, plus the launcher glue and thin
Streamlit-cached wrappers at the end.
"""
from __future__ import annotations

import math
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st
import torch

from model.config import K3Config
from model.parallel import LaunchError, LocalRun, launch_local, token_owner, write_problem

N_EXPERTS = K3Config.full().n_routed_experts
DIVISORS = [g for g in range(1, N_EXPERTS + 1) if N_EXPERTS % g == 0]   # 1, 2, 4, 7, 8, 14, ..., 896
RUNNABLE = [g for g in DIVISORS if g <= 8]                                # local processes: 1, 2, 4, 7, 8
ASSIGN = {"blocks": "position blocks", "round_robin": "round robin"}
BYTES_BF16 = 2
# Published by NVIDIA (H200 datasheet): 141 GB of HBM3e per GPU (model/cost.py takes its bandwidth).
H200_MEMORY = 141e9
# The Claims page's claim 10 and this page's 8-device default are the second article's illustration
# ("Kimi K3 Goes Trillion-Scale With Sparse MoE Efficiency"); the K3 report names no expert-parallel size.
EXAMPLE_G = 8


def shard_of(experts: np.ndarray, G: int, n: int = N_EXPERTS) -> np.ndarray:
    if n % G:
        raise ValueError(f"{G} devices do not divide {n} experts")
    return np.asarray(experts) // (n // G)


def routing(out, layers: list[int]) -> np.ndarray:
    """Routed experts of every MoE layer of a recorded forward: [L, T, k]."""
    return np.stack([out.trace.experts(i)[0].cpu().numpy() for i in layers])


def shard_pairs(experts: np.ndarray, G: int, n: int = N_EXPERTS) -> np.ndarray:
    """(token, expert) pairs landing on each shard, per layer: [L, G] (the compute load per device)."""
    s = shard_of(experts, G, n).reshape(experts.shape[0], -1)                     # [L, T*k]
    return np.stack([np.bincount(row, minlength=G) for row in s])


def shard_tokens(experts: np.ndarray, G: int, n: int = N_EXPERTS) -> np.ndarray:
    """Distinct tokens that send at least one pair to each shard, per layer: [L, G]."""
    s = shard_of(experts, G, n)                                                   # [L, T, k]
    hit = np.zeros(s.shape[:2] + (G,), dtype=bool)                                # [L, T, G]
    np.put_along_axis(hit, s, True, axis=2)
    return hit.sum(1)


def fanout(experts: np.ndarray, G: int, n: int = N_EXPERTS) -> np.ndarray:
    """Distinct shards among each token's k experts: [L, T]."""
    s = shard_of(experts, G, n)
    hit = np.zeros(s.shape[:-1] + (G,), dtype=bool)
    np.put_along_axis(hit, s, True, axis=-1)
    return hit.sum(-1)


def expected_fanout(n: int, k: int, G: int) -> float:
    """E[distinct shards] when a token's k distinct experts are uniform: each of the G shards of n/G
    experts is missed with probability C(n - n/G, k) / C(n, k)."""
    per = n // G
    if n - per < k:
        return float(G)
    miss = math.exp(math.lgamma(n - per + 1) - math.lgamma(n - per - k + 1)
                    - math.lgamma(n + 1) + math.lgamma(n - k + 1))
    return G * (1 - miss)


def traffic(experts: np.ndarray, G: int, assign: str = "blocks", n: int = N_EXPERTS,
            dedup: bool = False) -> np.ndarray:
    """All-to-all dispatch matrix of one layer, experts [T, k] -> [G, G]: row = the token's source
    device, column = the expert's device. One row per (token, expert) pair (what model.parallel
    sends), or with dedup one per (token, destination device) (a token's latent vector sent once to a
    device however many of its experts live there)."""
    T = experts.shape[0]
    src = token_owner(T, G, assign).numpy()                                      # [T]
    dst = shard_of(experts, G, n)                                                 # [T, k]
    M = np.zeros((G, G), dtype=np.int64)
    if dedup:
        for t in range(T):
            for d in np.unique(dst[t]):
                M[src[t], d] += 1
    else:
        np.add.at(M, (np.repeat(src, experts.shape[1]), dst.reshape(-1)), 1)
    return M


def bytes_table(G: int, fanout_measured: float, cfg: K3Config | None = None) -> pd.DataFrame:
    """Values and bytes one token sends to its experts at K3 scale (dispatch; the combine returns as
    many), at BF16 (2 bytes per value; an assumption: the report does not give the transit format)."""
    cfg = cfg or K3Config.full()
    k2 = K3Config.kimi_k2()
    k, d, l = cfg.top_k, cfg.d_model, cfg.expert_width
    uniform = expected_fanout(cfg.n_routed_experts, k, G)
    rows = [
        ("K3 experts at full width: k x d", k * d, f"derived: {k} x {d:,}"),
        ("K3 latent (published design): k x l", k * l, f"derived: {k} x {l:,}"),
        ("Kimi K2: k x d", k2.top_k * k2.d_model, f"derived: {k2.top_k} x {k2.d_model:,} (K2 config)"),
        (f"K3 latent, one copy per device (G = {G}, uniform routing)", uniform * l,
         f"derived: E[fan-out] {uniform:.2f} x {l:,}"),
        (f"K3 latent, one copy per device (G = {G}, live routing)", fanout_measured * l,
         f"computed fan-out {fanout_measured:.2f} (live model) x {l:,}"),
    ]
    df = pd.DataFrame(rows, columns=["what is sent", "values per token", "how"])
    df["KB per token (BF16)"] = df["values per token"] * BYTES_BF16 / 1000
    return df


def routed_expert_bytes(cfg: K3Config | None = None) -> float:
    """Bytes of K3's routed-expert weights as stored (MXFP4, 4.25 bits a value), from the accounting."""
    from model import cost
    return next(w.bytes_k3 for w in cost.weight_bytes(cfg or K3Config.full()) if w.component == "routed experts")


@dataclass(frozen=True)
class ExpertMemory:
    layer_bytes: float       # one MoE layer's routed experts as stored (MXFP4)
    layers: int              # MoE layers
    total_bytes: float       # every MoE layer's routed experts
    least_devices: int       # devices of `device_bytes` that could hold them all, at the least

    @property
    def layer_fits(self) -> bool:
        return self.layer_bytes <= H200_MEMORY


def expert_memory(cfg: K3Config | None = None, device_bytes: float = H200_MEMORY) -> ExpertMemory:
    """K3's routed-expert bytes per MoE layer and for the whole model, from the accounting (model.cost's
    weight bytes: 896 experts x 3 matrices of l x f values at MXFP4's 4.25 bits), and the fewest devices of
    `device_bytes` that hold them: their sum over the device memory, rounded up."""
    cfg = cfg or K3Config.full()
    total = routed_expert_bytes(cfg)
    layers = len(cfg.moe_layers)
    return ExpertMemory(total / layers, layers, total, math.ceil(total / device_bytes))


def fit_note(cfg: K3Config | None = None) -> str:
    """Why the experts are sharded at all: one layer's experts fit on one accelerator, all of them do not."""
    cfg = cfg or K3Config.full()
    m = expert_memory(cfg)
    return (f"One MoE layer's {cfg.n_routed_experts} experts (about {m.layer_bytes / 1e9:.1f} GB in MXFP4) would fit "
            f"on one {H200_MEMORY / 1e9:.0f} GB accelerator, but the routed experts of all {m.layers} MoE layers "
            f"(about {m.total_bytes / 1e12:.2f} TB) do not: they need at least {m.least_devices} such devices")


# The load of the devices: Quantile Balancing evens the experts (over large batches), and K3 evens the devices
# with MoonEP's dynamic redundant experts (K3 report sec 5.2.1, appendix E), not with the bias.
DEVICE_BALANCE = ("Quantile Balancing evens the experts' loads over large batches, not on one short prompt; "
                  "even experts still leave one device busier whenever its shard draws more pairs, and K3's training "
                  "evens the devices themselves with MoonEP, which places extra copies of busy experts on other "
                  "devices for each "
                  "micro-batch (dynamic redundant experts, K3 report sec 5.2.1 and App. E), so that every device "
                  "receives exactly as many pairs as the others")


def shard_note(cfg: K3Config | None = None) -> str:
    """The Routing explorer's 8 bands of 112 experts, labelled as what they are."""
    cfg = cfg or K3Config.full()
    m = expert_memory(cfg)
    return (f"The {EXAMPLE_G} bands of {cfg.n_routed_experts // EXAMPLE_G} are the second article's {EXAMPLE_G}-GPU "
            "illustration (docs/REFERENCES.md claim 10), not K3's deployment: the K3 report names no expert-parallel "
            f"size, and K3's routed experts ({m.total_bytes / 1e12:.2f} TB in MXFP4) need at least {m.least_devices} "
            f"H200s of {H200_MEMORY / 1e9:.0f} GB")


def example_note(G: int, cfg: K3Config | None = None) -> str:
    """The 8-GPU picture labelled as what it is, with the memory arithmetic that rules it out for K3."""
    cfg = cfg or K3Config.full()
    routed = routed_expert_bytes(cfg)
    least = math.ceil(routed / H200_MEMORY)
    fits = [g for g in DIVISORS if g >= least]
    return (f"{EXAMPLE_G} GPUs with {cfg.n_routed_experts // EXAMPLE_G} experts each is the article's illustration "
            f"(“Kimi K3 Goes Trillion-Scale With Sparse MoE Efficiency”), not K3's deployment: the K3 report names no "
            f"expert-parallel size, and K3's routed experts alone hold {routed / 1e12:.2f} TB at MXFP4, more than "
            f"{EXAMPLE_G} × {H200_MEMORY / 1e9:.0f} GB = {EXAMPLE_G * H200_MEMORY / 1e12:.2f} TB of NVIDIA H200 memory "
            f"(at least {least} such GPUs, {fits[0]} for an even split). The arithmetic holds at any G: "
            f"{cfg.n_routed_experts} / {G} = {cfg.n_routed_experts // G} per device.")


# ---- running it for real -------------------------------------------------------------------------

_run_lock = threading.Lock()       # one distributed run at a time per server (the machine has few cores)


@dataclass
class RealRun:
    G: int
    layer: int
    assign: str
    tokens: int
    max_abs_diff: float          # expert-parallel vs the single-process LatentMoE, computed here
    rank0_diff: float            # the same check made by rank 0 inside the run
    ranks: pd.DataFrame
    seconds_layer: float         # the layer itself, slowest rank, between barriers
    seconds_total: float         # including starting the processes (and their `import torch` when spawned)
    forked: bool                 # forked from the process server (model.fork_server), not new Pythons


_server_asked = threading.Event()


def process_server_soon() -> None:
    """Once per process, when this page is open: start the process server that forks the real run's ranks
    (model/fork_server.py) in the background, if the warm-up has not, so a first press of the button does
    not wait for its ~2 s start. A prefetch job: it waits until no visitor's computation is under way."""
    if _server_asked.is_set():
        return
    _server_asked.set()
    from app import jobs
    from model import fork_server
    jobs.submit(jobs.Kind.PREFETCH, "the process server", fork_server.server)


def run_layer(model, x: torch.Tensor, layer: int, G: int, assign: str = "blocks", progress=None,
              timeout_s: float = 300.0) -> RealRun:
    """Run MoE layer `layer` of `model` on x [T, d] over G local processes (gloo) and compare."""
    moe = model.layers[layer].ffn
    if not 1 <= G <= 8 or moe.n_experts % G:
        raise LaunchError(f"{G} processes: this runs 1..8 local processes that divide the "
                          f"{moe.n_experts} experts evenly")
    if not _run_lock.acquire(blocking=False):
        raise LaunchError("another distributed run is in progress on this server; try again in a minute")
    try:
        with tempfile.TemporaryDirectory(prefix="k3-ep-") as tmp:
            path = write_problem(Path(tmp) / "problem.safetensors", moe, x)
            run: LocalRun = launch_local(path, G, assign, timeout_s=timeout_s, progress=progress, fork=True)
    finally:
        _run_lock.release()
    from app.live import computing
    with computing():
        ref, _ = moe(x.unsqueeze(0))
    diff = float((run.y - ref[0]).abs().max())
    ranks = pd.DataFrame([{
        "rank": r["rank"], "experts": f"{r['experts'][0]}–{r['experts'][1] - 1}", "source tokens": r["tokens"],
        "pairs sent to others": sum(c for j, c in enumerate(r["pairs_to"]) if j != r["rank"]),
        "pairs kept local": r["pairs_to"][r["rank"]],
        "bytes sent: dispatch": r["bytes_dispatch"], "bytes sent: combine": r["bytes_combine"],
        "layer time (ms)": r["seconds"] * 1e3} for r in run.result["ranks"]])
    return RealRun(G, layer, assign, int(x.shape[0]), diff, float(run.result.get("max_abs_diff", float("nan"))),
                   ranks, float(run.result["seconds"]), run.seconds_total, run.forked)


# ---- cached wrappers for the page ----------------------------------------------------------------

@st.cache_data(max_entries=32, show_spinner=False)
def cached_routing(ids: tuple[int, ...]) -> np.ndarray:
    from app.live import forward, live
    return routing(forward(ids), live().model.cfg.moe_layers)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_traffic(ids: tuple[int, ...], layer_pos: int, G: int, assign: str, dedup: bool) -> np.ndarray:
    return traffic(cached_routing(ids)[layer_pos], G, assign, dedup=dedup)


def ffn_input_of(ids: tuple[int, ...], layer: int) -> torch.Tensor:
    from app.live import forward
    return forward(ids).trace.module_input(layer, "ffn")[0]                     # [T, d]
