"""Kimi Delta Attention (ARCHITECTURE.md section 2; Kimi Linear arXiv 2510.26692; K3 report).

Two kernels compute the same gated delta rule: `kda_recurrent`, the plain per-token loop that is the
reference, and `kda_chunked`, the chunked UT-transform form used by the live model. The layer
`KimiDeltaAttention` wraps them with projections, short causal convs, the K3 decay gate and the gated
output norm. Its decode state (`KDACache`) is fixed size whatever the context length.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from model import fast
from model.norms import RMSNorm


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    # CONTRACT.md: float64 stays float64 (equivalence tests); anything else runs in float32.
    return torch.float64 if x.dtype == torch.float64 else torch.float32


# ---------------------------------------------------------------------------------------------------
# Kernels. q, k [B,T,H,K]; v [B,T,H,V]; g [B,T,H,K] log decay (<= 0); beta [B,T,H]; states [B,H,K,V].
# ---------------------------------------------------------------------------------------------------

def kda_recurrent(q, k, v, g, beta, scale=None, initial_state=None):
    """Section 2 step 6, one token at a time: decay, delta-rule write, then read."""
    in_dtype = v.dtype
    B, T, H, K = q.shape
    V = v.shape[-1]
    dt = _compute_dtype(q)
    scale = K ** -0.5 if scale is None else scale
    q, k, v, g, beta = (t.to(dt) for t in (q, k, v, g, beta))
    q = q * scale
    alpha = g.exp()                                                        # [B, T, H, K]
    S = (torch.zeros(B, H, K, V, dtype=dt, device=q.device) if initial_state is None
         else initial_state.to(dt))                                        # [B, H, K, V]
    outs = []
    for t in range(T):
        S = alpha[:, t, :, :, None] * S                                    # decay each key row
        pred = torch.einsum("bhkv,bhk->bhv", S, k[:, t])                   # S^T k from decayed S
        delta = beta[:, t, :, None] * (v[:, t] - pred)                     # [B, H, V]
        S = S + k[:, t, :, :, None] * delta[:, :, None, :]                 # k ⊗ beta (v - S^T k)
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))             # read after the write
    o = torch.stack(outs, 1) if outs else v.new_zeros(B, 0, H, V)          # [B, T, H, V]
    return o.to(in_dtype), S


def kda_states(k, v, g, beta, initial_state=None):
    """The recurrent state after every token, [B, T, H, K, V] (the same loop as kda_recurrent, keeping
    each S; the state never depends on q). For showing the state as tokens stream in; the layer itself
    never keeps it."""
    B, T, H, K = k.shape
    dt = _compute_dtype(k)
    k, v, g, beta = (t.to(dt) for t in (k, v, g, beta))
    alpha = g.exp()                                                        # [B, T, H, K]
    S = (torch.zeros(B, H, K, v.shape[-1], dtype=dt, device=k.device) if initial_state is None
         else initial_state.to(dt))
    states = []
    for t in range(T):
        S = alpha[:, t, :, :, None] * S
        delta = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, t]))
        S = S + k[:, t, :, :, None] * delta[:, :, None, :]
        states.append(S)
    return torch.stack(states, 1) if states else S.new_zeros(B, 0, H, K, v.shape[-1])


# The largest decay within a chunk (in log units, summed over its tokens) for which the intra-chunk decays are
# computed as two factors: each lies within e^(+-60) (1e26, far from float32's overflow at e^88). A factor can take
# a term below float32's normal range only where q or k is ~1e-12 of its row, a term that small beside the others.
# Chunks of 16 of the trained model decay by at most ~46 (the held-out text); a chunk that decays more takes the
# pairwise form with its masked entries at -inf.
FACTOR_SPAN = 60.0


@functools.lru_cache(maxsize=16)
def _above_diagonal(C: int, device: torch.device) -> torch.Tensor:
    # cached across calls, so never create it as an inference tensor: a mask made inside
    # torch.inference_mode (the app) could not be saved for backward later (training, tests)
    with torch.inference_mode(False):
        return torch.ones(C, C, dtype=torch.bool, device=device).triu(1)[:, :, None]   # [C(i), C(j), 1]


def kda_chunked(q, k, v, g, beta, scale=None, initial_state=None, chunk_size=64):
    """Section 2 chunked form. All chunks are processed at once except the state hand-over."""
    in_dtype = v.dtype
    B, T, H, K = q.shape
    V = v.shape[-1]
    dt = _compute_dtype(q)
    scale = K ** -0.5 if scale is None else scale
    S = (torch.zeros(B, H, K, V, dtype=dt, device=q.device) if initial_state is None
         else initial_state.to(dt))                                        # [B, H, K, V]
    if T == 0:
        return v.new_zeros(B, 0, H, V), S
    C = min(chunk_size, T)                    # a short input (e.g. one decode token) needs no padding
    N = -(-T // C)
    # One cat + one pad for all five inputs; padding is q = k = v = 0, g = 0, beta = 0 (section 2),
    # so padded tokens neither decay nor write the state.
    x = torch.cat([q.to(dt) * scale, k.to(dt), v.to(dt), g.to(dt), beta.to(dt)[..., None]], -1)
    x = F.pad(x, (0, 0, 0, 0, 0, N * C - T))                               # [B, N*C, H, 3K+V+1]
    x = x.view(B, N, C, H, -1).permute(0, 3, 1, 2, 4)                      # [B, H, N, C, 3K+V+1]
    q, k, v, g, b = x.split([K, K, V, K, 1], -1)                           # b: [B, H, N, C, 1]

    G = g.cumsum(-2)                                                       # [B, H, N, C, K] inclusive
    gamma = G.exp()                                                        # decay from chunk start
    span = G[..., 0, :] - G[..., -1, :]                                    # [B, H, N, K] >= 0: a chunk's decay
    if float(span.detach().max()) <= FACTOR_SPAN:
        # e^(G_i - G_j) = e^(G_i - G_r) e^(G_r - G_j) around the chunk's middle token r: both factors lie within
        # e^(+-FACTOR_SPAN), so Aqk and Akk are one matmul of [C, K] rows, without the [C, C, K] tensor of
        # pairwise decays. Aqk's entries j > i are zeroed; Akk's are never read (unitriangular solve below).
        r = G[..., C // 2 : C // 2 + 1, :]                                 # [B, H, N, 1, K]
        rows = (torch.stack([q, k], -3) * (G - r).exp().unsqueeze(-3)).flatten(-3, -2)   # [B, H, N, 2C, K]: q, k
        A = rows @ ((r - G).exp() * k).transpose(-1, -2)                   # [B, H, N, 2C, C]
        Aqk = A[..., :C, :].masked_fill(_above_diagonal(C, q.device)[..., 0], 0.0)
        Akk = A[..., C:, :]                                                # [B, H, N, C, C]
    else:
        # exp(G_i - G_j) only where j <= i: the masked entries (j > i) would overflow, so they become -inf
        # before the exp (section 2: exponentiate only masked differences).
        diff = G[..., :, None, :] - G[..., None, :, :]                     # [B, H, N, i, j, K]
        decay = diff.masked_fill(_above_diagonal(C, q.device), -math.inf).exp()
        kdec = decay * k[..., None, :, :]                                  # [B, H, N, i, j, K]
        # Aqk[i, j] and Akk[i, j] in one batched matmul over i: sum_c {q, k}[i, c] k[j, c] e^(G[i,c]-G[j,c])
        A = kdec @ torch.stack([q, k], -1)                                 # [B, H, N, C, C, 2]
        Aqk, Akk = A[..., 0], A[..., 1]                                    # [B, H, N, C, C]
    # UT transform: (I + diag(beta) Akk)^-1 diag(beta) [Gamma ⊙ K, V]. unitriangular=True reads only
    # the strict lower triangle, so Akk's diagonal (j = i) is ignored as the equation requires.
    WU = torch.linalg.solve_triangular(b * Akk, b * torch.cat([gamma * k, v], -1),
                                       upper=False, unitriangular=True)    # [B, H, N, C, K+V]
    W, U = WU.split([K, V], -1)
    # S' = diag(Gamma_C) S + Kd^T (U - W S) = (diag(Gamma_C) - Kd^T W) S + Kd^T U, so each chunk's
    # hand-over is one affine map (M, c) precomputed for all chunks at once.
    kd = (G[..., -1:, :] - G).exp() * k                                    # k_j decayed to chunk end
    KdWU = kd.transpose(-1, -2) @ WU                                       # [B, H, N, K, K+V]
    M = torch.diag_embed(gamma[..., -1, :]) - KdWU[..., :K]                # [B, H, N, K, K]
    c = KdWU[..., K:]                                                      # [B, H, N, K, V]
    entering = []
    for n in range(N):                        # the only sequential part: a loop over chunks
        entering.append(S)
        S = c[:, :, n] + M[:, :, n] @ S
    Sn = torch.stack(entering, 2)                                          # [B, H, N, K, V]
    O = (q * gamma) @ Sn + Aqk @ (U - W @ Sn)                              # [B, H, N, C, V]
    o = O.permute(0, 2, 3, 1, 4).reshape(B, N * C, H, V)[:, :T]            # [B, T, H, V]
    return o.to(in_dtype), S


# ---------------------------------------------------------------------------------------------------
# The layer
# ---------------------------------------------------------------------------------------------------

@dataclass
class KDACache:
    state: torch.Tensor        # [B, H, d_k, d_v] recurrent state after the last token
    conv_tail: torch.Tensor    # [B, conv - 1, 3P] last pre-conv inputs of q | k | v

    def numel(self) -> int:
        return self.state.numel() + self.conv_tail.numel()

    def nbytes(self) -> int:
        return (self.state.numel() * self.state.element_size()
                + self.conv_tail.numel() * self.conv_tail.element_size())


class KimiDeltaAttention(nn.Module):
    """One KDA layer (section 2). Every projection that reads x is fused into `in_proj` (one matmul
    instead of six: per-op overhead dominates the live model), sliced W_q|W_k|W_v|W_fa|W_b|W_g."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        H, dk, P, d = cfg.kda_heads, cfg.kda_head_dim, cfg.kda_proj, cfg.d_model
        self.H, self.dk, self.P, self.kc = H, dk, P, cfg.kda_conv
        self.bound = cfg.kda_gate_bound
        self.chunk_size = 16    # speed knob only; fastest for 16..256 tokens on the tiny widths (CPU)
        self.in_proj = nn.Linear(d, 3 * P + dk + H + P, bias=False)   # W_q|W_k|W_v|W_fa|W_b|W_g
        self.conv = nn.Conv1d(3 * P, 3 * P, cfg.kda_conv, groups=3 * P, bias=False)  # q|k|v depthwise
        self.W_fb = nn.Linear(dk, P, bias=False)                        # decay low rank, d_k -> P
        self.A_log = nn.Parameter(torch.zeros(H))                       # section 2: init 0
        self.dt_bias = nn.Parameter(torch.empty(H, dk))
        self.o_norm = RMSNorm(dk, cfg.norm_eps)                         # one gain shared by all heads
        self.out_proj = nn.Linear(P, d, bias=False)                     # W_o
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self):
        for lin in (self.in_proj, self.W_fb, self.out_proj):
            nn.init.normal_(lin.weight, std=0.02)
        self.conv.reset_parameters()
        self.A_log.zero_()
        # Decay per channel: |g| log-uniform in [1e-3, 0.5] at z = 0 (per-token retention 0.61..0.999,
        # memories of ~2 to ~1000 tokens). Inverting g = bound * sigmoid(dt_bias) gives the bias.
        mag = torch.empty_like(self.dt_bias).uniform_(math.log(1e-3), math.log(0.5)).exp()
        self.dt_bias.copy_(torch.logit(mag / -self.bound))

    def _prepare(self, x, cache):
        B, T, _ = x.shape
        H, dk, P, kc = self.H, self.dk, self.P, self.kc
        pre, fa, b_logit, og = self.in_proj(x).split([3 * P, dk, H, P], -1)
        tail = cache.conv_tail if cache is not None else x.new_zeros(B, kc - 1, 3 * P)
        xs = torch.cat([tail.to(x.dtype), pre], 1)                     # [B, kc-1+T, 3P]
        new_tail = xs[:, xs.shape[1] - (kc - 1):]                      # last kc-1 pre-conv inputs
        # Depthwise causal conv, current token on the last tap, then SiLU (section 2 step 2). Written
        # as unfold + weighted sum: on these widths ~3x cheaper than mkldnn's depthwise conv1d.
        y = F.silu((xs.unfold(1, kc, 1) * self.conv.weight[:, 0]).sum(-1))  # [B, T, 3P]
        qk = y[..., :2 * P].reshape(B, T, 2 * H, dk)                   # q heads then k heads
        qk = qk * torch.rsqrt(qk.pow(2).sum(-1, keepdim=True) + 1e-6)  # step 3: L2 norm per head
        q, k = qk.split(H, 2)                                          # [B, T, H, dk] each
        v = y[..., 2 * P:].reshape(B, T, H, dk)                        # [B, T, H, dv]
        # Steps 4-5 in fp32 (or fp64 when the module is): beta per head, the K3 bounded decay.
        ft = _compute_dtype(x)
        z = self.W_fb(fa).view(B, T, H, dk).to(ft)                     # [B, T, H, dk]
        g = self.bound * torch.sigmoid(self.A_log.to(ft).exp()[:, None] * (z + self.dt_bias.to(ft)))
        beta = torch.sigmoid(b_logit.to(ft))                           # [B, T, H]
        return q, k, v, g, beta, og, new_tail

    def kernel_inputs(self, x, cache=None):
        """(q, k, v, g, beta) exactly as `forward` feeds them to the kernel (q unscaled: the kernel's
        default scale d_k^-1/2 is the one the layer uses)."""
        return self._prepare(x, cache)[:5]

    def parts(self, x):
        """Every intermediate of `forward(x)` (no cache), by name, for the pages that show one layer
        step by step: the kernel inputs, the low-rank decay logits z, the state after every token
        (`states`, [B, T, H, d_k, d_v], from the recurrent form: the chunked kernel never forms it), the
        read o, its norm, the gate and the output. `out` equals forward(x)[0] (tests/test_layer.py)."""
        B, T, _ = x.shape
        q, k, v, g, beta, og, _ = self._prepare(x, None)
        scale = self.dk ** -0.5
        if T > 1:
            o, final = kda_chunked(q, k, v, g, beta, scale, chunk_size=self.chunk_size)
        else:
            o, final = kda_recurrent(q, k, v, g, beta, scale)
        states = kda_states(k, v, g, beta)                             # [B, T, H, dk, dv]
        fa = self.in_proj(x).split([3 * self.P, self.dk, self.H, self.P], -1)[1]
        z = self.W_fb(fa).view(B, T, self.H, self.dk)                  # decay logits before dt_bias
        normed = self.o_norm(o)                                        # [B, T, H, dv]
        gate = torch.sigmoid(og)                                       # [B, T, P]
        gated = normed.reshape(B, T, self.P) * gate
        return {"q": q, "k": k, "v": v, "z": z, "g": g, "beta": beta, "o": o, "states": states, "final_state": final,
                "o_normed": normed, "gate": gate, "gated": gated, "out": self.out_proj(gated)}

    def forward(self, x, cache=None, chunked=True):
        B, T, _ = x.shape
        # each parameter read once (an nn.Module attribute costs ~0.7 us)
        weights = (self.in_proj.weight, self.conv.weight, self.W_fb.weight, self.A_log, self.dt_bias, self.o_norm.weight)
        if chunked and fast.WHOLE_LAYERS and fast.usable(x, *weights, *(() if cache is None else (cache.state,))):
            # inference: everything between the two projections in one compiled pass (model/fast.py kda_layer)
            tail = (cache.conv_tail.to(x.dtype) if cache is not None
                    else x.new_zeros(B, self.kc - 1, 3 * self.P))
            o, state, new_tail = fast.kda_layer(F.linear(x, weights[0]), tail, *weights[1:5], self.bound,
                                                self.dk ** -0.5, weights[5], self.o_norm.eps,
                                                cache.state if cache is not None else None)
            return self.out_proj(o), KDACache(state=state, conv_tail=new_tail)
        q, k, v, g, beta, og, new_tail = self._prepare(x, cache)
        init = cache.state if cache is not None else None
        scale = self.dk ** -0.5                                        # step 3, applied in the kernel
        if chunked and fast.usable(q, k, v, g, beta, *(() if init is None else (init,))):
            o, state = fast.kda(q, k, v, g, beta, scale, init)           # inference: the compiled recurrence
        elif chunked and T > 1:
            o, state = kda_chunked(q, k, v, g, beta, scale, init, chunk_size=self.chunk_size)
        else:   # one decode token: the plain step is the same math in fewer ops than a 1-token chunk
            o, state = kda_recurrent(q, k, v, g, beta, scale, init)
        o = self.o_norm(o).reshape(B, T, self.P) * torch.sigmoid(og)  # step 7: norm, full-rank gate
        return self.out_proj(o), KDACache(state=state, conv_tail=new_tail)
