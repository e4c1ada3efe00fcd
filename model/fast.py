"""Compiled inference kernels for the parts of the forward that torch runs as many small operations.

The loops themselves are in model/kernels.py (numba); here is what each computes, when it runs and the conversion
between tensors and arrays. The plain references stay where they are and are what these are tested against
(tests/test_fast.py):
* `moe`: a whole model.moe.LatentMoE layer after its router's scores (torch's matmul and sigmoid): the top-k, the
  routed experts per (token, slot) pair in expert order, their weighted sum, its RMSNorm and W_up, and the shared
  experts, in one call where the torch layer takes ~120 operations.
* `kda_layer`: a whole model.kda.KimiDeltaAttention layer between its two projections: the convolution, the norms
  and gates, the recurrence of `kda`, the output norm and gate, in one call where torch takes ~120 operations.
* `kda`: model.kda.kda_recurrent's loop (decay each key row, delta-rule write, read after the write), one
  token at a time per head. 64 tokens x 2 heads of 16 x 16 take ~30 us here where kda_chunked's ~40 small
  operations take ~250 us (bench/bench_model.py).
* `experts`: model.moe.grouped_experts, one (token, slot) pair at a time: each pair's gate and up rows are read
  from the stacked expert tensors in place (no gathered copies of the weights), the activation runs in torch
  (vectorised, the same function as the reference), then the down projection and the weighted sum per token.
* `topk`: the router's selection (model.moe.grouped_topk: torch.topk's values, equal values by index), with few
  data-dependent branches (kernels._select).
* `attnres`: model.attnres.AttnResQuery's read of the stacked sources (the key norm, the logits, the softmax over
  depth and the mix, per token): ~186 reads a forward.
* `rms_norm`: model.norms.RMSNorm, one call where torch takes eight operations (~400 norms a forward).
* `mla`: a whole model.mla.GatedMLA layer without a cache up to W_o (projections, norms, causal attention, gate).
`moe`, `kda_layer` and `mla` serve the layers whole where they can (`WHOLE_LAYERS`; a MoE layer with quantisation,
the dense view of every expert or a NaN score, and an MLA layer with a cache, take their parts); `kda`, `experts`
and `topk` serve the parts.

They run where nothing needs a gradient (the app's inference, evaluation), in float32 on the CPU (`usable`);
training, float64 (the equivalence tests) and other devices take the torch reference. A forward decides once
whether it uses them (model.k3 pins the choice for all its layers and records it in K3Output.kernels; a resume
computes as its base did). numba compiles the kernels on first use (~10 s for all of them on this machine,
`python -m model.fast`) and keeps the machine code in model/__pycache__ (`cache=True`); a later process loads it,
though numba's own start costs ~0.6 s once per process, which a server takes off its first visitor's path with
later() and a background warm(). K3_FAST=0 in the environment turns them off; `off()` does on one thread, e.g. to
time the reference beside them.
"""
from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

_ENABLED = os.environ.get("K3_FAST", "1") != "0"
_LATER = False                   # later(): the kernels run only once warm() has loaded them
_LOADED = threading.Event()      # set by warm()
_LOCAL = threading.local()       # this thread's pinned choice (pinned())
# The whole-layer kernels (moe, kda_layer, mla) where they may run; False: those layers in parts, torch around the
# smaller kernels (bench/bench_model.py measures what the whole layers buy)
WHOLE_LAYERS = True


@functools.lru_cache(maxsize=1)
def _numba():
    try:
        import numba
    except ImportError:          # the torch reference answers everywhere
        return None
    return numba


def active() -> bool:
    """Whether a forward starting on this thread now would use the kernels (where its tensors allow: `usable`)."""
    use = getattr(_LOCAL, "use", None)
    if use is not None:
        return use
    if not _ENABLED:
        return False
    if _LATER:
        return _LOADED.is_set()
    return _numba() is not None


def usable(*tensors: torch.Tensor) -> bool:
    """Whether the kernels may compute with these tensors now: `active()`, every tensor float32 on the CPU, and no
    gradient wanted through any of them."""
    if not active():
        return False
    grad = torch.is_grad_enabled()
    f32 = torch.float32
    for t in tensors:   # ~3,000 checks a forward: a plain loop, and is_cpu (t.device builds an object each time)
        if t.dtype is not f32 or not t.is_cpu or (grad and t.requires_grad):
            return False
    return True


@contextmanager
def pinned(use: bool) -> Iterator[None]:
    """The kernels on (where numba is there) or off on this thread meanwhile, whatever warm() does elsewhere: a
    forward decides once, so that all its layers compute alike and a resume computes as its base did."""
    before = getattr(_LOCAL, "use", None)
    _LOCAL.use = bool(use) and _ENABLED and _numba() is not None
    try:
        yield
    finally:
        _LOCAL.use = before


def off():
    """The torch references on this thread meanwhile (tests, benchmarks: the reference beside the kernels)."""
    return pinned(False)


def later() -> None:
    """From now on the kernels run only once warm() has loaded them, the torch references until then: for a server,
    whose first visitor should not wait for numba to start (~0.6 s: its import, then LLVM's with the first kernel)."""
    global _LATER
    _LATER = True


def _arr(t: torch.Tensor) -> np.ndarray:
    # each step only where it is needed: a forward converts ~2,000 tensors, and detach() alone costs ~1 us
    if t.requires_grad:
        t = t.detach()
    return (t if t.is_contiguous() else t.contiguous()).numpy()


# ---- KDA -------------------------------------------------------------------------------------------


def kda(q, k, v, g, beta, scale: float, initial_state=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(o [B, T, H, V], final state [B, H, K, V]) as kda_recurrent(q, k, v, g, beta, scale, initial_state),
    for float32 CPU tensors (`usable`)."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    S = (np.zeros((B, H, K, V), dtype=np.float32) if initial_state is None
         else _arr(initial_state).copy())                                  # the caller's state is not written
    o = np.empty((B, T, H, V), dtype=np.float32)
    _kernel("kda")(_arr(q), _arr(k), _arr(v), _arr(g.exp()), _arr(beta), np.float32(scale), S, o)
    return torch.from_numpy(o), torch.from_numpy(S)


def kda_layer(proj, tail, conv_w, w_fb, a_log, dt_bias, bound: float, scale: float, gain, eps: float, state
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """KimiDeltaAttention.forward between in_proj and out_proj for float32 CPU tensors (`usable`), in one compiled
    pass (model/kernels.py kda_layer): (the gated, normalised read [B, T, P], the state after the last token [B, H,
    K, V], the convolution's new tail [B, kc - 1, 3P]) from proj = in_proj(x) [B, T, C], the tail before the first
    token [B, kc - 1, 3P], the depthwise convolution's weight [3P, 1, kc], W_fb [P, K], A_log [H], dt_bias [H, K],
    the gate's bound, the read's scale, o_norm's gain and eps, and the state before (None: zeros)."""
    B, T, _ = proj.shape
    H, K = dt_bias.shape
    V = gain.shape[0]
    S = (np.zeros((B, H, K, V), dtype=np.float32) if state is None
         else _arr(state).copy())                                          # the caller's state is not written
    out = np.empty((B, T, H * V), dtype=np.float32)
    new_tail = np.empty(tuple(tail.shape), dtype=np.float32)
    _kernel("kda_layer")(_arr(proj), _arr(tail), _arr(conv_w[:, 0]), _arr(w_fb), _arr(a_log), _arr(dt_bias),
                         np.float32(bound), np.float32(scale), _arr(gain), np.float32(eps), S, out, new_tail)
    return torch.from_numpy(out), torch.from_numpy(S), torch.from_numpy(new_tail)


def mla(x, w_dq, q_gain, w_uq, w_dkv, kv_gain, w_ukv, w_g, eps: float, nope: int, rope: int, scale: float
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GatedMLA.forward without a cache up to W_o for float32 CPU tensors (`usable`), in one compiled call
    (model/kernels.py mla): (the gated attention output [B, T, H v], the cache's latent [B, T, kv_lora] and k_rope
    [B, T, rope]) from x [B, T, d] and the layer's matrices as nn.Linear stores them, its norms' gains and eps."""
    B, T, _ = x.shape
    out = np.empty((B, T, w_g.shape[0]), dtype=np.float32)
    latent = np.empty((B, T, kv_gain.shape[0]), dtype=np.float32)
    k_rope = np.empty((B, T, rope), dtype=np.float32)
    _kernel("mla")(_arr(x), _arr(w_dq), _arr(q_gain), _arr(w_uq), _arr(w_dkv), _arr(kv_gain), _arr(w_ukv), _arr(w_g),
                   np.float32(eps), nope, np.float32(scale), out, latent, k_rope)
    return torch.from_numpy(out), torch.from_numpy(latent), torch.from_numpy(k_rope)


# ---- routed experts -----------------------------------------------------------------------------------


def experts(z, indices, weights, w_gate, w_up, w_down, act, quant_act: bool = False) -> torch.Tensor:
    """grouped_experts(z, indices, weights, w_gate, w_up, w_down, act, quant_act) ([N, l]) for float32 CPU
    tensors (`usable`); z already in its MXFP8 value when quant_act (grouped_experts does that first)."""
    from model.quant import mx_fake_quant
    N, k = indices.shape
    f, w = w_gate.shape[1], w_down.shape[1]
    idx = _arr(indices.to(torch.int64))
    G = np.empty((N, k, f), dtype=np.float32)
    U = np.empty((N, k, f), dtype=np.float32)
    _kernel("gate_up")(_arr(z), idx, _arr(w_gate), _arr(w_up), G, U)
    h = act(torch.from_numpy(G), torch.from_numpy(U))                     # [N, k, f], the reference's function
    if quant_act:   # per (token, slot) row, as the reference's [P, 1, f] rows
        h = mx_fake_quant(h.reshape(N * k, 1, f), "e4m3", per_row=True).reshape(N, k, f)
    out = np.empty((N, w), dtype=np.float32)
    _kernel("down")(_arr(h), idx, _arr(weights), _arr(w_down), out)
    return torch.from_numpy(out)


# ---- the router's top-k --------------------------------------------------------------------------------


def topk(x: torch.Tensor, m: int, group: int = 8) -> tuple[torch.Tensor, torch.Tensor] | None:
    """torch.topk(x, m, dim=-1)'s values and indices (largest first; equal values by index) for a float32 CPU
    tensor whose last dimension is a multiple of `group` with m <= its number of groups; None when a row holds a
    NaN (the caller falls back)."""
    E = x.shape[-1]
    a = _arr(x).reshape(-1, E)
    vals = np.empty((a.shape[0], m), dtype=np.float32)
    ids = np.empty((a.shape[0], m), dtype=np.int64)
    if not _kernel("topk")(a, m, group, vals, ids):
        return None
    lead = x.shape[:-1]
    return torch.from_numpy(vals).reshape(*lead, m), torch.from_numpy(ids).reshape(*lead, m)


# ---- the Attention Residuals read ---------------------------------------------------------------------------


def attnres(V, gain, proj, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """AttnResQuery's read (h [..., d], a [..., S]) of the stacked sources V [..., S, d], for float32 CPU tensors
    (`usable`)."""
    lead, (S, d) = V.shape[:-2], V.shape[-2:]
    src = _arr(V).reshape(-1, S, d)
    h = np.empty((src.shape[0], d), dtype=np.float32)
    a = np.empty((src.shape[0], S), dtype=np.float32)
    _kernel("attnres")(src, _arr(gain), _arr(proj), np.float32(eps), h, a)
    return torch.from_numpy(h).reshape(*lead, d), torch.from_numpy(a).reshape(*lead, S)


# ---- RMSNorm -------------------------------------------------------------------------------------------------------

def rms_norm(x: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:
    """model.norms.RMSNorm(x) with this gain for float32 CPU tensors (`usable`): one call where the reference takes
    eight operations (~400 norms a forward)."""
    a = _arr(x).reshape(-1, x.shape[-1])
    out = np.empty_like(a)
    _kernel("rms_norm")(a, _arr(gain), np.float32(eps), out)
    return torch.from_numpy(out).reshape(x.shape)


# ---- a whole MoE layer -------------------------------------------------------------------------------------------

def moe(x, scores, bias, k: int, group: int, w_down, gain, eps: float, w_up, scale: float, w_gate, w_up_e, w_down_e,
        shared, activation: str, beta_gate: float, beta_up: float, forced: tuple[int, ...] = (),
        knocked_out: tuple[int, ...] = ()):
    """model.moe.LatentMoE.forward's output y [N, d] and routing (indices [N, k], weights [N, k], cutoff [N]) for x
    [N, d] and its router's scores sigmoid(x W_r^T) [N, E] (torch computes them: a matmul it does ~4x faster), selecting
    with scores + bias ([E], or None) as model.moe.route does (the `forced` experts in the first slots, the
    `knocked_out` ones never), in one compiled call (model/kernels.py moe): the top-k, the routed experts in
    the latent space (w_down [l, d], gain, eps: its RMSNorm, w_up [d, l], scale: the routed scaling factor; the
    stacked expert tensors w_gate, w_up_e [E, f, l] and w_down_e [E, l, f]) and the shared experts (`shared`: their
    gate, up and down matrices as nn.Linear stores them); the activation "situ_glu" (with its bounds beta_gate,
    beta_up) or "swiglu". For float32 CPU tensors (`usable`), E a multiple of `group` and the free slots + 1 at most
    E // group (the caller checks); None when a score is NaN (the caller falls back to the reference)."""
    N, E = scores.shape
    m = min(k - len(forced) + 1, E)
    b = np.zeros(E, dtype=np.float32) if bias is None else _arr(bias)
    blocked = np.zeros(E, dtype=np.int8)
    blocked[list(forced) + list(knocked_out)] = 1
    idx = np.empty((N, k), dtype=np.int64)
    p = np.empty((N, k), dtype=np.float32)
    cut = np.empty(N, dtype=np.float32)
    y = np.empty((N, x.shape[1]), dtype=np.float32)
    sg, su, sd = (_arr(w) for w in shared)
    act = {"situ_glu": 0, "swiglu": 1}[activation]
    if not _kernel("moe")(_arr(x), _arr(scores), b, np.array(forced, dtype=np.int64), blocked, k, m, group,
                          _arr(w_down), _arr(gain), np.float32(eps),
                          _arr(w_up), np.float32(scale), _arr(w_gate), _arr(w_up_e), _arr(w_down_e), sg, su, sd,
                          act, np.float32(beta_gate), np.float32(beta_up), idx, p, cut, y):
        return None
    return torch.from_numpy(y), torch.from_numpy(idx), torch.from_numpy(p), torch.from_numpy(cut)


# ---- compilation --------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _kernel(name: str):
    # the loops live in model/kernels.py, which imports numba: imported at the first kernel a process runs
    from model import kernels
    return getattr(kernels, name)


def warm() -> bool:
    """Compile (or load from the cache) every kernel now, on tiny inputs of the live model's types, so that no
    forward waits for it; after later(), forwards use them from then on. False when the kernels are switched off
    or numba is missing."""
    if not _ENABLED or _numba() is None:
        return False
    z = torch.zeros(1, 1, 2, 2)
    kda(z, z, z, z, torch.zeros(1, 1, 2), 1.0)
    experts(torch.zeros(1, 2), torch.zeros(1, 1, dtype=torch.int64), torch.ones(1, 1), torch.zeros(1, 2, 2),
            torch.zeros(1, 2, 2), torch.zeros(1, 2, 2), torch.mul)
    topk(torch.zeros(1, 8), 1)
    attnres(torch.zeros(1, 2, 2), torch.ones(2), torch.zeros(2), 1e-5)
    rms_norm(torch.zeros(1, 2), torch.ones(2), 1e-5)
    w = torch.zeros(1, 1)
    mla(torch.zeros(1, 1, 1), w, torch.ones(1), torch.zeros(2, 1), torch.zeros(2, 1), torch.ones(1),
        torch.zeros(2, 1), torch.zeros(1, 1), 1e-5, 1, 1, 1.0)
    kda_layer(torch.zeros(1, 1, 10), torch.zeros(1, 1, 6), torch.zeros(6, 1, 2), torch.zeros(2, 1), torch.zeros(2),
              torch.zeros(2, 1), -5.0, 1.0, torch.ones(1), 1e-5, None)
    e = torch.zeros(16, 1, 1)
    moe(w, torch.zeros(1, 16), None, 1, 8, w, torch.ones(1), 1e-5, w, 1.0, e, e, e, (w, w, w), "situ_glu", 4.0, 25.0)
    _LOADED.set()
    return True


if __name__ == "__main__":      # python -m model.fast: compile into the cache (e.g. right after installing)
    import time
    t0 = time.perf_counter()
    print(f"kernels {'ready' if warm() else 'off (K3_FAST=0 or numba missing)'} in {time.perf_counter() - t0:.1f} s")
