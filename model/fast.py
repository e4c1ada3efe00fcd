"""Compiled inference kernels for the parts of the forward that torch runs as many small operations.

The plain references stay where they are and are what these are tested against (tests/test_fast.py):
* `kda`: model.kda.kda_recurrent's loop (decay each key row, delta-rule write, read after the write), one
  token at a time per head. 64 tokens x 2 heads of 16 x 16 take ~30 us here where kda_chunked's ~40 small
  operations take ~250 us (bench/bench_model.py).
* `experts`: model.moe.grouped_experts, one (token, slot) pair at a time: each pair's gate and up rows are read
  from the stacked expert tensors in place (no gathered copies of the weights), the activation runs in torch
  (vectorised, the same function as the reference), then the down projection and the weighted sum per token.
* `topk`: the router's selection (model.moe.grouped_topk: torch.topk's values, equal values by index), from the
  maxima of the strided groups (one torch operation) as a bar and a stable insertion of the values at or above it.
* `attnres`: model.attnres.AttnResQuery's read of the stacked sources (the key norm, the logits, the softmax over
  depth and the mix, per token): ~186 reads a forward, ~4 ms less than their ~12 torch operations each.

They run where nothing needs a gradient (the app's inference, evaluation), in float32 on the CPU (`usable`);
training, float64 (the equivalence tests) and other devices take the torch reference. A forward decides once
whether it uses them (model.k3 pins the choice for all its layers and records it in K3Output.kernels; a resume
computes as its base did). numba compiles each kernel on first use (~1 s on this machine) and keeps the machine
code in model/__pycache__ (`cache=True`); a later process loads it, though numba's own start costs ~0.6 s once per
process, which a server takes off its first visitor's path with later() and a background warm(). K3_FAST=0 in the
environment turns them off; `off()` does on one thread, e.g. to time the reference beside them.
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
    return all(t.device.type == "cpu" and t.dtype == torch.float32 and not (grad and t.requires_grad)
               for t in tensors)


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
    return t.detach().contiguous().numpy()


# ---- KDA -------------------------------------------------------------------------------------------

def _kda_loop(q, k, v, alpha, beta, scale, S, o):
    # q, k, alpha [B, T, H, K]; v, o [B, T, H, V]; beta [B, T, H]; S [B, H, K, V], updated in place.
    # Per token, as kda_recurrent: S <- diag(alpha) S; S <- S + k (beta (v - S^T k))^T; o = S^T (scale q)
    B, T, H, K = q.shape
    V = v.shape[3]
    delta = np.empty(V, dtype=S.dtype)
    for b in range(B):
        for h in range(H):
            for t in range(T):
                for i in range(K):
                    a = alpha[b, t, h, i]
                    for j in range(V):
                        S[b, h, i, j] *= a
                for j in range(V):
                    delta[j] = 0.0
                for i in range(K):
                    ki = k[b, t, h, i]
                    for j in range(V):
                        delta[j] += S[b, h, i, j] * ki                  # S^T k
                bt = beta[b, t, h]
                for j in range(V):
                    delta[j] = bt * (v[b, t, h, j] - delta[j])
                for j in range(V):
                    o[b, t, h, j] = 0.0
                for i in range(K):
                    ki = k[b, t, h, i]
                    qi = q[b, t, h, i] * scale
                    for j in range(V):
                        s = S[b, h, i, j] + ki * delta[j]
                        S[b, h, i, j] = s
                        o[b, t, h, j] += s * qi


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


# ---- routed experts -----------------------------------------------------------------------------------

def _gate_up_loop(z, idx, wg, wu, G, U):
    # z [N, l]; idx [N, k]; wg, wu [E, f, l] ([out, in]); G, U [N, k, f] = each pair's z W_gate^T, z W_up^T
    N, k = idx.shape
    f, w = wg.shape[1], wg.shape[2]
    for n in range(N):
        for s in range(k):
            e = idx[n, s]
            for a in range(f):
                g = np.float32(0.0)
                u = np.float32(0.0)
                for c in range(w):
                    g += wg[e, a, c] * z[n, c]
                    u += wu[e, a, c] * z[n, c]
                G[n, s, a] = g
                U[n, s, a] = u


def _down_loop(h, idx, p, wd, out):
    # h [N, k, f]; idx, p [N, k]; wd [E, l, f]; out [N, l] = sum_s p[n, s] h[n, s] W_down[idx[n, s]]^T
    N, k = idx.shape
    w, f = wd.shape[1], wd.shape[2]
    for n in range(N):
        for c in range(w):
            out[n, c] = 0.0
        for s in range(k):
            e = idx[n, s]
            ps = p[n, s]
            for c in range(w):
                acc = np.float32(0.0)
                for a in range(f):
                    acc += wd[e, c, a] * h[n, s, a]
                out[n, c] += ps * acc


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

def _topk_loop(x, gmax, m, vals, ids, cand):
    # x [R, E]; gmax [R, G]: the maxima of the strided groups (group j: experts j, j + G, ...); vals, ids [R, m]: each
    # row's m largest values, largest first, equal values by index. The m-th largest group maximum is a bar at most
    # the m-th largest value (m groups reach it), so only values at or above it are sorted. False at a NaN.
    R, E = x.shape
    G = gmax.shape[1]
    top = np.empty(m, dtype=x.dtype)
    for r in range(R):
        nan = 0
        for j in range(G):
            nan += gmax[r, j] != gmax[r, j]
        if nan:
            return False
        n = 0
        for j in range(G):                   # the m largest group maxima, by insertion (bar = the smallest of them)
            v = gmax[r, j]
            if n < m:
                i = n
                n += 1
            elif v > top[m - 1]:
                i = m - 1
            else:
                continue
            while i > 0 and top[i - 1] < v:
                top[i] = top[i - 1]
                i -= 1
            top[i] = v
        bar = top[m - 1]
        c = 0
        for e in range(E):                   # in index order, without a branch: each index written, kept if >= bar
            cand[c] = e
            c += x[r, e] >= bar
        n = 0
        for a in range(c):                   # stable insertion: an equal value stays behind the earlier index
            e = cand[a]
            v = x[r, e]
            if n < m:
                i = n
                n += 1
            elif v > vals[r, m - 1]:
                i = m - 1
            else:
                continue
            while i > 0 and vals[r, i - 1] < v:
                vals[r, i] = vals[r, i - 1]
                ids[r, i] = ids[r, i - 1]
                i -= 1
            vals[r, i] = v
            ids[r, i] = e
    return True


def topk(x: torch.Tensor, m: int, group: int = 8) -> tuple[torch.Tensor, torch.Tensor] | None:
    """torch.topk(x, m, dim=-1)'s values and indices (largest first; equal values by index) for a float32 CPU
    tensor whose last dimension is a multiple of `group` with m <= its number of groups; None when a row holds a
    NaN (the caller falls back)."""
    E = x.shape[-1]
    a = _arr(x).reshape(-1, E)
    gmax = x.reshape(-1, group, E // group).amax(1)                     # [R, E / group], one vectorised operation
    vals = np.empty((a.shape[0], m), dtype=np.float32)
    ids = np.empty((a.shape[0], m), dtype=np.int64)
    if not _kernel("topk")(a, _arr(gmax), m, vals, ids, np.empty(E + 1, dtype=np.int64)):
        return None
    lead = x.shape[:-1]
    return torch.from_numpy(vals).reshape(*lead, m), torch.from_numpy(ids).reshape(*lead, m)


# ---- the Attention Residuals read ---------------------------------------------------------------------------

def _attnres_loop(V, gain, proj, eps, h, a):
    # V [N, S, d] raw sources; gain, proj [d]; h [N, d]; a [N, S]. Per token, as AttnResQuery: the logit of source s
    # is RMSNorm_nogain(V_s) . (gain * proj) = (V_s . w) / sqrt(mean(V_s^2) + eps); a = softmax over s; h = a V
    N, S, d = V.shape
    w = np.empty(d, dtype=V.dtype)
    for c in range(d):
        w[c] = gain[c] * proj[c]
    for n in range(N):
        top = -np.inf
        for s in range(S):
            ss = np.float32(0.0)
            dot = np.float32(0.0)
            for c in range(d):
                v = V[n, s, c]
                ss += v * v
                dot += v * w[c]
            logit = dot / np.sqrt(ss / d + eps)
            a[n, s] = logit
            top = max(top, logit)
        total = np.float32(0.0)
        for s in range(S):
            e = np.exp(a[n, s] - top)
            a[n, s] = e
            total += e
        for s in range(S):
            a[n, s] /= total
        for c in range(d):
            acc = np.float32(0.0)
            for s in range(S):
                acc += a[n, s] * V[n, s, c]
            h[n, c] = acc


def attnres(V, gain, proj, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """AttnResQuery's read (h [..., d], a [..., S]) of the stacked sources V [..., S, d], for float32 CPU tensors
    (`usable`)."""
    lead, (S, d) = V.shape[:-2], V.shape[-2:]
    src = _arr(V).reshape(-1, S, d)
    h = np.empty((src.shape[0], d), dtype=np.float32)
    a = np.empty((src.shape[0], S), dtype=np.float32)
    _kernel("attnres")(src, _arr(gain), _arr(proj), np.float32(eps), h, a)
    return torch.from_numpy(h).reshape(*lead, d), torch.from_numpy(a).reshape(*lead, S)


# ---- compilation --------------------------------------------------------------------------------------

# name: (loop, fastmath). The experts' sums over the latent width are reductions, which the compiler vectorises
# only when it may reorder them (fastmath): ~1.3x here, each sum then in another order than the reference's (within
# float32 rounding). The KDA loop's inner loops run over the state's columns and vectorise as written.
_LOOPS = {"kda": (_kda_loop, False), "gate_up": (_gate_up_loop, True), "down": (_down_loop, True),
          "topk": (_topk_loop, False), "attnres": (_attnres_loop, False)}


@functools.lru_cache(maxsize=None)
def _kernel(name: str):
    # nogil: a session's forward runs beside the others' (the server's threads); cache: compiled once per machine
    loop, fastmath = _LOOPS[name]
    return _numba().njit(nogil=True, cache=True, fastmath=fastmath)(loop)


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
    _LOADED.set()
    return True


if __name__ == "__main__":      # python -m model.fast: compile into the cache (e.g. right after installing)
    import time
    t0 = time.perf_counter()
    print(f"kernels {'ready' if warm() else 'off (K3_FAST=0 or numba missing)'} in {time.perf_counter() - t0:.1f} s")
