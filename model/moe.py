"""Stable LatentMoE with grouped dispatch, routing overrides and Quantile Balancing.

ARCHITECTURE.md section 5 (LatentMoE: sigmoid router on the full-width token, experts in a latent
space of width l = d/2, RMSNorm before the up-projection) and section 6 (Quantile Balancing of the
selection bias, with the DeepSeek-V3 sign rule for comparison). Section 7 for the quantised experts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from model import fast
from model.activations import ACTIVATIONS, GLUFFN
from model.config import BETA_GATE, BETA_UP, K3Config
from model.norms import RMSNorm
from model.quant import mx_fake_quant

# ---- routing -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class RoutingOverride:
    """Per-call routing choices for the app; never stored on the module (ARCHITECTURE sec 5)."""
    top_k: int | None = None           # None: the config's k; n_routed_experts is the "dense" view
    use_bias: bool = True              # add the balancing bias b before top-k
    knocked_out: tuple[int, ...] = ()  # never selected
    forced: tuple[int, ...] = ()       # always selected, in the first slots

    def __post_init__(self):
        # tuples of ints whatever was passed (lists, numpy ints), so an override is hashable and
        # equal overrides are equal keys of the app's caches
        for name in ("knocked_out", "forced"):
            object.__setattr__(self, name, tuple(int(e) for e in getattr(self, name)))

    def resolve(self, n_experts: int, default_k: int) -> int:
        """Validate against E and return the k to use."""
        k = default_k if self.top_k is None else int(self.top_k)
        ko, fo = set(self.knocked_out), set(self.forced)
        bad = [e for e in ko | fo if not 0 <= e < n_experts]
        if bad:
            raise ValueError(f"expert ids {sorted(bad)} are outside 0..{n_experts - 1}")
        if len(fo) != len(self.forced):
            raise ValueError(f"forced experts repeat: {self.forced}")
        if ko & fo:
            raise ValueError(f"experts {sorted(ko & fo)} are both forced and knocked out")
        if not 1 <= k <= n_experts - len(ko):
            raise ValueError(f"top_k={k} must lie in 1..{n_experts - len(ko)} "
                             f"({n_experts} experts, {len(ko)} knocked out)")
        if len(fo) > k:
            raise ValueError(f"{len(fo)} forced experts do not fit in top_k={k}")
        return k


@dataclass(frozen=True)
class RouteInfo:
    """What the router decided for every token: the seam the routing pages plot and QB reads."""
    scores: torch.Tensor    # [..., E] sigmoid router probabilities, fp32 (fp64 for fp64 input)
    indices: torch.Tensor   # [..., k] chosen experts: forced first, then by biased score
    weights: torch.Tensor   # [..., k] raw scores renormalised over the chosen set (sum to 1)
    cutoff: torch.Tensor    # [...] the (k+1)-th biased score (QB's alpha); -inf when none is left
    bias: torch.Tensor      # [E] the balancing bias the selection used (zeros when switched off)

    def reshape(self, *lead: int) -> "RouteInfo":
        """The same routing with leading dims `lead` (e.g. [N, k] -> [B, T, k])."""
        return RouteInfo(self.scores.reshape(*lead, -1), self.indices.reshape(*lead, -1),
                         self.weights.reshape(*lead, -1), self.cutoff.reshape(*lead), self.bias)


def grouped_topk(x: torch.Tensor, m: int, group: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.topk(x, m, dim=-1) (sorted) in two stages, ~3x faster for 64 rows of E = 896: the m
    largest values of a row lie in the m groups (of `group` experts) with the largest maxima, so a
    second top-m over those m * group candidates finds them. The same values; among exactly equal
    values the indices may come in another order. Falls back to torch.topk where it cannot help."""
    E = x.shape[-1]
    if E % group or m * group * 2 > E or x.dim() < 1:
        return torch.topk(x, m, dim=-1)
    if x.device.type == "cpu" and not x.requires_grad and x.dtype in (torch.float32, torch.float64):
        # the compiled selection where it may run (model/fast.py), else numpy's thresholds; each declines a NaN
        found = fast.topk(x, m, group) if fast.usable(x) else None
        if found is None:
            found = _partition_topk(x, m, group)
        if found is not None:
            return found
    g = x.unflatten(-1, (E // group, group))                                # [..., E/G, G]
    best = torch.topk(g.amax(-1), m, dim=-1, sorted=False).indices           # [..., m] groups
    cand = g.gather(-2, best.unsqueeze(-1).expand(*best.shape, group)).flatten(-2)   # [..., m G]
    vals, j = torch.topk(cand, m, dim=-1)                                   # sorted
    return vals, best.gather(-1, j // group) * group + j % group


def _partition_topk(x: torch.Tensor, m: int, group: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    # The same two stages with thresholds instead of torch.topk, whose per-row selection mispredicts a
    # branch on almost every element of fresh data (~80 us for 64 rows of 112, ~20 us on data it has
    # just seen): numpy's np.partition (SIMD on x86) finds each row's m-th largest group maximum and then
    # its m-th largest candidate, and comparisons against them pick the groups and the values. Groups
    # are strided (group j holds experts j, j + E/group, ...) so their maxima are a vectorised max over
    # `group` rows. None when a threshold is tied (or a value is NaN) in any row: the caller falls back.
    E = x.shape[-1]
    R, G, C = x.numel() // E, E // group, m * group
    a = x.detach().reshape(R, group, G)                                      # [R, group, G]
    gmax = a.amax(1)                                                         # [R, G]
    bar = torch.from_numpy(np.partition(gmax.numpy(), G - m, axis=1)[:, G - m : G - m + 1])
    groups = (gmax >= bar).nonzero()[:, 1]                                   # ascending per row
    if groups.numel() != R * m:
        return None
    groups = groups.view(R, m)                                               # the m groups of each row
    cand = a.gather(2, groups.unsqueeze(1).expand(R, group, m)).reshape(R, C)   # [R, C]: i * m + slot
    bar = torch.from_numpy(np.partition(cand.numpy(), C - m, axis=1)[:, C - m : C - m + 1])
    pos = (cand >= bar).nonzero()[:, 1]                                      # the m largest, in place order
    if pos.numel() != R * m:
        return None
    pos = pos.view(R, m)
    vals = cand.gather(1, pos)
    order = torch.from_numpy(np.argsort(-vals.numpy(), axis=1, kind="stable"))   # descending
    vals, pos = vals.gather(1, order), pos.gather(1, order)
    ids = torch.div(pos, m, rounding_mode="floor") * G + groups.gather(1, pos % m)
    return vals.reshape(*x.shape[:-1], m), ids.reshape(*x.shape[:-1], m)


def route(scores: torch.Tensor, bias: torch.Tensor | None, top_k: int,
          override: RoutingOverride | None = None):
    """(indices [..., k], weights [..., k], cutoff [...]) for scores [..., E].

    Selection uses s + b; the weights use the raw s only (K3 report: bias is for selection, and the
    routed scaling factor is 1.0), so the balancing bias never changes what an expert contributes.
    The top-k is grouped_topk: torch.topk's values, ~3x faster on 64 rows of 896 (the largest single
    cost of the live forward). Exactly equal biased scores may come in another order than torch.topk's,
    a choice between equals either way.
    """
    E = scores.shape[-1]
    ov = override or RoutingOverride()
    k = ov.resolve(E, top_k)
    biased = scores + bias if (ov.use_bias and bias is not None) else scores    # [..., E]
    blocked = tuple(ov.forced) + tuple(ov.knocked_out)
    if blocked:   # forced experts take their slots outside the top-k; knocked-out ones never compete
        biased = biased.index_fill(-1, torch.tensor(blocked, device=scores.device), -math.inf)
    free = k - len(ov.forced)                           # slots decided by score
    m = min(free + 1, E)                                # one more for the cutoff when it exists
    vals, idx = grouped_topk(biased, m)                                       # [..., m] sorted
    if free + 1 <= E:
        cutoff = vals[..., free]                                             # [...]
        idx = idx[..., :free]
    else:
        cutoff = torch.full_like(vals[..., 0], -math.inf)
    if ov.forced:
        lead = torch.tensor(ov.forced, device=scores.device).expand(*idx.shape[:-1], len(ov.forced))
        idx = torch.cat([lead, idx], dim=-1)                                 # [..., k]
    raw = scores.gather(-1, idx)                                             # [..., k]
    weights = raw / raw.sum(-1, keepdim=True).clamp_min(1e-30)
    return idx, weights, cutoff


class Router(nn.Module):
    """s = sigmoid(x W_r) on the full-width token, top-k of s + b, p_i = s_i / sum_T s (sec 5).

    Owns the router weight W_r and the balancing bias b. b is a buffer: Quantile Balancing sets it
    between batches (model/train.py), never a gradient and never a forward call.
    """

    def __init__(self, d: int, n_experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.weight = nn.Parameter(torch.empty(n_experts, d))                   # W_r [E, d], no bias
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))                   # nn.Linear's default
        self.register_buffer("expert_bias", torch.zeros(n_experts))             # b [E]

    def score(self, x: torch.Tensor) -> torch.Tensor:
        """s = sigmoid(x W_r) [..., E] for x [..., d], in fp32 (fp64 for fp64 x)."""
        rdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        return F.linear(x.to(rdt), self.weight.to(rdt)).sigmoid_()          # in place: no second [N, E] buffer

    def forward(self, x: torch.Tensor, override: RoutingOverride | None = None) -> RouteInfo:
        """x [..., d] -> RouteInfo with the leading dims of x. Scores in fp32 (fp64 for fp64 x)."""
        rdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        use_bias = override is None or override.use_bias
        bias_used = self.expert_bias.to(rdt) if use_bias else None
        bias = self.expert_bias.detach().clone() if use_bias else torch.zeros_like(self.expert_bias)
        if not (torch.is_grad_enabled() and (self.weight.requires_grad or x.requires_grad)):
            scores = self.score(x)                                              # [..., E]
            idx, p, cutoff = route(scores, bias_used, self.top_k, override)     # [..., k], [..., k], [...]
            return RouteInfo(scores, idx, p, cutoff, bias)
        # Training: the top-k has no gradient, so the loss reaches W_r (and x) only through the k chosen
        # scores in p_i. Choose without autograd, then recompute just the chosen scores with it: the same
        # values and gradients as differentiating all E scores, without keeping (or back-propagating
        # through) the [N, E] score matrix, which dominated a large batch's step.
        with torch.no_grad():
            scores = self.score(x)                                              # [..., E]
            idx, _, cutoff = route(scores, bias_used, self.top_k, override)
        w_sel = F.embedding(idx, self.weight.to(rdt))                           # [..., k, d] rows of W_r
        s_sel = torch.sigmoid((x.to(rdt).unsqueeze(-2) * w_sel).sum(-1))        # [..., k]
        p = s_sel / s_sel.sum(-1, keepdim=True).clamp_min(1e-30)
        return RouteInfo(scores, idx, p, cutoff, bias)


def expert_load(indices: torch.Tensor, n_experts: int) -> torch.Tensor:
    return torch.bincount(indices.reshape(-1), minlength=n_experts)          # [E] long


# ---- grouped dispatch --------------------------------------------------------------------------

def grouped_experts(z, indices, weights, w_gate, w_up, w_down, act, quant_act: bool = False):
    """sum_i p_i E_i(z) for every token, as batched matmuls over the experts' groups of tokens.

    z [N, w]; indices, weights [N, k]; w_gate, w_up [E, f, w]; w_down [E, w, f] -> [N, w]. Each
    expert's matrices are stored [out, in] like nn.Linear's weight (so MXFP4 blocks, cut along each
    expert's rows, run along the input dimension as in OCP MX and K3's checkpoint).
    For the tiles the (token, slot) pairs are sorted by expert, so each expert's tokens form one group
    (what an expert-parallel all-to-all sends to one rank); no loop over experts. Two layouts of the same
    computation, chosen by the mean group size (bench/bench_model.py, bench/bench_train.py):
    * tiles: each group is cut into tiles of c rows (c = 2..32, about the mean group size), zero-padded,
      and one bmm per matrix runs over all tiles with each tile's expert weights. The padding is at most
      one partial tile per expert, however skewed the groups are (a frequent token sends all its copies
      to the same 16 experts), which keeps a training step's cost independent of the routing;
    * per pair (groups of one or two, a short prompt): each (token, slot) pair gathers its expert's
      weights, one bmm over pairs, unsorted.
    """
    N, k = indices.shape
    E = w_gate.shape[0]
    flat = indices.reshape(-1)                                   # [P] expert of each pair
    P = flat.numel()
    if quant_act:   # MXFP8 per token row: tokens never share a block scale (keeps causality)
        z = mx_fake_quant(z, "e4m3", per_row=True)
    if fast.usable(z, weights, w_gate, w_up, w_down):    # inference: the compiled per-pair loop (model/fast.py)
        return fast.experts(z, indices, weights, w_gate, w_up, w_down, act, quant_act)
    c = 1 << max(0, min(5, (P // E).bit_length() - 1)) if P >= E else 1   # tile rows, a power of two
    if c == 1:
        # per pair, in (token, slot) order: no sort needed. A token's k gathered gate (and up) matrices are one
        # [k f, w] matrix, so z meets them in one matmul per token; each token's k outputs are one row of a
        # batched weighted sum
        zt = z.unsqueeze(1)                                      # [N, 1, w]
        f = w_gate.shape[1]
        h = act(torch.bmm(zt, w_gate.index_select(0, flat).view(N, k * f, -1).transpose(1, 2)),
                torch.bmm(zt, w_up.index_select(0, flat).view(N, k * f, -1).transpose(1, 2))).view(P, 1, f)
        if quant_act:
            h = mx_fake_quant(h, "e4m3", per_row=True)
        out = torch.bmm(h, w_down.index_select(0, flat).transpose(1, 2))         # [P, 1, w]
        return torch.bmm(weights.reshape(N, 1, k).to(out.dtype), out.view(N, k, -1)).squeeze(1)   # [N, w]
    order = _stable_order(flat, E)                               # [P] pairs grouped by expert
    expert = flat[order]                                         # [P] sorted expert ids
    token = torch.div(order, k, rounding_mode="floor")           # [P] token of each sorted pair
    counts = torch.bincount(flat, minlength=E)                   # [E] group sizes
    tiles = torch.div(counts + c - 1, c, rounding_mode="floor")  # [E] tiles per group
    first = torch.cumsum(tiles, 0) - tiles                       # [E] first tile of each group
    start = torch.cumsum(counts, 0) - counts                     # [E] first sorted pair of each group
    pos = torch.arange(P, device=flat.device) - start[expert]    # [P] place in its group
    slot = (first[expert] + torch.div(pos, c, rounding_mode="floor")) * c + pos % c   # [P] buffer row
    n = int(tiles.sum())
    owner = torch.repeat_interleave(torch.arange(E, device=flat.device), tiles)      # [n] tile's expert
    zt = z.new_zeros(n * c, z.shape[1]).index_copy(0, slot, z.index_select(0, token)).view(n, c, -1)
    h = act(torch.bmm(zt, w_gate.index_select(0, owner).transpose(1, 2)),
            torch.bmm(zt, w_up.index_select(0, owner).transpose(1, 2)))          # [n, c, f]
    if quant_act:
        h = mx_fake_quant(h, "e4m3", per_row=True)
    out = torch.bmm(h, w_down.index_select(0, owner).transpose(1, 2)).view(n * c, -1).index_select(0, slot)
    out = out * weights.reshape(-1)[order].unsqueeze(1).to(out.dtype)
    return out.new_zeros(N, out.shape[1]).index_add_(0, token, out)  # [N, w]


def _stable_order(flat: torch.Tensor, n_experts: int) -> torch.Tensor:
    # torch.argsort(flat, stable=True) for expert ids: numpy sorts 16-bit keys stably by radix, ~10x faster than
    # torch's comparison sort on the ~8,000 pairs of a 512-token batch (the held-out routing, training)
    if flat.device.type == "cpu" and n_experts <= np.iinfo(np.int16).max:
        return torch.from_numpy(np.argsort(flat.numpy().astype(np.int16), kind="stable"))
    return torch.argsort(flat, stable=True)


# ---- the layer ---------------------------------------------------------------------------------

class LatentMoE(nn.Module):
    """y = SharedExperts(x) + W_up RMSNorm( sum_{i in T} p_i E_i(x W_down) )   (ARCHITECTURE sec 5)."""

    def __init__(self, cfg: K3Config, init: bool = True):
        super().__init__()
        self.cfg = cfg
        d, E, f = cfg.d_model, cfg.n_routed_experts, cfg.expert_hidden
        w = cfg.expert_width                                      # l, or d without a latent space
        self.n_experts, self.top_k, self.activation = E, cfg.top_k, cfg.activation
        self.router = Router(d, E, cfg.top_k)                     # W_r and the balancing bias b
        if cfg.latent_dim:
            self.down = nn.Linear(d, w, bias=False)               # W_down d -> l
            self.up = nn.Linear(w, d, bias=False)                 # W_up l -> d
            self.norm = RMSNorm(w, cfg.norm_eps)                  # the "stable" norm, with gain
        else:                                                     # Kimi K2 style: full-width experts
            self.down = self.up = self.norm = None
        self.shared = GLUFFN(d, cfg.n_shared_experts * cfg.shared_hidden, cfg.activation)
        # Routed experts stacked so dispatch is index_select + bmm, never a loop over experts; each
        # expert's matrix [out, in] as nn.Linear stores it, so MXFP4 blocks run along its input dim.
        self.w_gate = nn.Parameter(torch.empty(E, f, w))          # [E, f, l]
        self.w_up = nn.Parameter(torch.empty(E, f, w))            # [E, f, l]
        self.w_down = nn.Parameter(torch.empty(E, w, f))          # [E, l, f]
        if init:                                                  # else loaded next (K3Model's init=False)
            for p, fan_in in ((self.w_gate, w), (self.w_up, w), (self.w_down, f)):
                nn.init.uniform_(p, -fan_in ** -0.5, fan_in ** -0.5)  # nn.Linear's default range
        # MXFP4 copies of the three expert tensors, made once by precompute_quant (at load time),
        # with the version of the weights they were made from. A forward only reads them.
        self._quantised: tuple | None = None

    @staticmethod
    def quantised_experts(p: torch.Tensor) -> torch.Tensor:
        """The MXFP4 value of a stacked expert tensor [E, out, in], in the model's blocks."""
        return _mxfp4_experts(p)

    def _expert_tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.w_gate, self.w_up, self.w_down

    def precompute_quant(self, on_grid: bool = False) -> None:
        """Quantise the routed experts to MXFP4 once, so quant=True forwards need not (about 17 ms per
        tiny layer). `on_grid`: the weights already are MXFP4 values (the shipped checkpoint stores
        them as MXFP4 codes), so they are their own quantisation and are shared, not copied."""
        ws = self._expert_tensors()
        with torch.no_grad():
            q = ws if on_grid else tuple(_mxfp4_experts(p) for p in ws)
        self._quantised = (_version_key(ws), q)

    def _expert_weights(self, quant: bool):
        ws = self._expert_tensors()
        if not quant:
            return ws
        if torch.is_grad_enabled() and any(p.requires_grad for p in ws):
            return tuple(_mxfp4_experts(p) for p in ws)           # straight-through in training
        if self._quantised is not None and self._quantised[0] == _version_key(ws):
            return self._quantised[1]
        with torch.no_grad():                                     # per call, and never stored:
            return tuple(_mxfp4_experts(p) for p in ws)           # a forward writes nothing here

    def forward(self, x: torch.Tensor, routing: RoutingOverride | None = None, quant: bool = False,
                activation: str | None = None) -> tuple[torch.Tensor, RouteInfo]:
        B, T, d = x.shape
        compiled = self._compiled(x.reshape(B * T, d), routing, quant, activation)
        if compiled is not None:
            y, r = compiled
            return y.reshape(B, T, d), r.reshape(B, T)
        r = self.router(x.reshape(B * T, d), routing)                         # indices, weights [N, k]
        return self.apply_route(x, r.indices, r.weights, quant, activation), r.reshape(B, T)

    def _compiled(self, xf: torch.Tensor, routing: RoutingOverride | None, quant: bool, activation: str | None
                  ) -> tuple[torch.Tensor, RouteInfo] | None:
        # The whole layer after the router's scores in one compiled call (model/fast.py moe, where router +
        # apply_route take ~120 operations) where it computes the same: inference in float32 on the CPU, with a latent
        # space, no quantisation, and a top-k the grouped selection serves (not the dense view of every expert).
        # None elsewhere, or at a NaN score: then the torch reference. Overrides of k, the bias and forced or
        # knocked-out experts are served too, so a what-if and its base compute their unchanged tokens alike.
        ov = routing or RoutingOverride()
        E = self.n_experts
        if quant or self.down is None or not fast.WHOLE_LAYERS:
            return None
        k = ov.resolve(E, self.top_k)
        if E % 8 or min(k - len(ov.forced) + 1, E) * 16 > E:            # grouped_topk's own condition
            return None
        # each parameter read once: a module attribute costs ~0.7 us (nn.Module.__getattr__), ~20 a layer
        router, shared = self.router, self.shared
        weights = (router.weight, router.expert_bias, self.down.weight, self.norm.weight, self.up.weight, self.w_gate,
                   self.w_up, self.w_down, shared.w_gate.weight, shared.w_up.weight, shared.w_down.weight)
        if not fast.usable(xf, *weights):
            return None
        w_r, b, w_down, gain, w_up, wg, wu, wd = weights[:8]
        scores = router.score(xf)                                             # [N, E]
        got = fast.moe(xf, scores, b if ov.use_bias else None, k, 8, w_down, gain, self.norm.eps, w_up,
                       self.cfg.router_scale, wg, wu, wd, weights[8:], activation or self.activation,
                       BETA_GATE, BETA_UP, ov.forced, ov.knocked_out)
        if got is None:
            return None
        y, idx, p, cutoff = got
        return y, RouteInfo(scores, idx, p, cutoff, b.detach().clone() if ov.use_bias else torch.zeros_like(b))

    def apply_route(self, x: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, quant: bool = False,
                    activation: str | None = None) -> torch.Tensor:
        """The layer's output for x [B, T, d] once the routing is decided: indices and weights p_i
        ([B, T, k] or [B*T, k]). `forward` = router, then this; K3Model.router_gradients calls it with
        recorded indices and differentiable scores, so the loss reaches the router only through p_i."""
        B, T, d = x.shape
        act_name = activation or self.activation
        act = ACTIVATIONS[act_name]
        xf = x.reshape(B * T, d)                                              # [N, d]
        k = indices.shape[-1]
        indices, weights = indices.reshape(B * T, k), weights.reshape(B * T, k)
        z = self.down(xf) if self.down is not None else xf                    # [N, l]
        wg, wu, wd = self._expert_weights(quant)
        u = grouped_experts(z, indices, weights, wg, wu, wd, act, quant_act=quant)   # [N, l]
        if self.cfg.router_scale != 1.0:                                      # K2: 2.827; K3: 1.0
            u = u * self.cfg.router_scale
        routed = self.up(self.norm(u)) if self.up is not None else u          # [N, d]
        y = self.shared(xf, act_name) + routed                                # [N, d]
        return y.reshape(B, T, d)

    def parts(self, x: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, quant: bool = False,
              activation: str | None = None) -> dict[str, torch.Tensor]:
        """Every intermediate of the layer for x [B, T, d] with the routing the forward chose (indices,
        weights [B, T, k]), by name, per token: the latent z = x W_down, each chosen expert's output
        E_i(z) ([B, T, k, l], slot order), their p-weighted sum u, RMSNorm(u), the routed output, the
        shared experts' hidden values and output, and `out` (= the forward's output). One token's experts
        are gathered per (token, slot) pair here, which the grouped dispatch avoids; fine for one layer."""
        B, T, d = x.shape
        act_name = activation or self.activation
        act = ACTIVATIONS[act_name]
        xf = x.reshape(B * T, d)                                              # [N, d]
        idx = indices.reshape(B * T, -1)                                      # [N, k]
        p = weights.reshape(B * T, -1)
        z = self.down(xf) if self.down is not None else xf                    # [N, l]
        wg, wu, wd = self._expert_weights(quant)
        zq = mx_fake_quant(z, "e4m3", per_row=True) if quant else z
        h = act(torch.einsum("nw,nkfw->nkf", zq, wg[idx]), torch.einsum("nw,nkfw->nkf", zq, wu[idx]))   # [N, k, f]
        if quant:
            h = mx_fake_quant(h.reshape(-1, h.shape[-1]), "e4m3", per_row=True).reshape(h.shape)
        e = torch.einsum("nkf,nkwf->nkw", h, wd[idx])                         # [N, k, l]  E_i(z)
        u = (p.unsqueeze(-1).to(e.dtype) * e).sum(1) * self.cfg.router_scale  # [N, l]
        normed = self.norm(u) if self.norm is not None else u
        routed = self.up(normed) if self.up is not None else u                # [N, d]
        shared = self.shared.parts(xf, act_name)
        w = lambda t: t.reshape(B, T, *t.shape[1:])
        return {"z": w(z), "expert_hidden": w(h), "expert_out": w(e), "u": w(u), "u_normed": w(normed),
                "routed": w(routed), "shared_hidden": w(shared["hidden"]), "shared": w(shared["out"]),
                "out": w(shared["out"] + routed)}


def _mxfp4_experts(p: torch.Tensor) -> torch.Tensor:
    # MXFP4 blocks of 32 along the row-major flattening of each expert's [out, in] matrix (sec 7): along
    # its input dimension, and where a row is shorter than 32 (16 or 8 in the tiny instance) one block
    # holds whole consecutive rows, 2 x 16 or 4 x 8.
    return mx_fake_quant(p.reshape(p.shape[0], -1), "e2m1", per_row=True).reshape(p.shape)


def _version_key(ws) -> tuple:
    # which tensors, and which in-place version of them: a precomputed copy is used only while the
    # weights are the ones it was made from (an in-place edit, as tests make, invalidates it)
    return tuple((p.data_ptr(), p._version, p.dtype) for p in ws)


# ---- Quantile Balancing (ARCHITECTURE sec 6) -----------------------------------------------------

def _cutoff(scores: torch.Tensor, bias: torch.Tensor, top_k: int) -> torch.Tensor:
    # alpha_i: the (k+1)-th largest biased score of token i, the bar a new expert has to clear
    if top_k >= scores.shape[-1]:
        raise ValueError("balancing needs top_k < number of experts")
    return grouped_topk(scores + bias, top_k + 1)[0][:, top_k]                 # [m]


def _target_rank(m: int, top_k: int, n_experts: int) -> int:
    # q = m k / n tokens per expert; floored when fractional (the expert then takes at most
    # floor(q) tokens from the quantile alone), and at most m - 1 so it indexes a real token.
    return min(m * top_k // n_experts, m - 1)


def quantile_balance(scores: torch.Tensor, bias: torch.Tensor, top_k: int,
                     centre: bool = True, cutoff: torch.Tensor | None = None) -> torch.Tensor:
    """Next bias [E] from scores [m, E] (after sigmoid) routed with the current bias [E].

    b^_j = -(the (q+1)-th largest margin s_ij - alpha_i of expert j): with it exactly the q tokens
    with the largest margins clear their cutoffs, i.e. the exact per-expert coordinate minimiser
    of the balancing dual. Mean-centred (unless centre=False), since a common shift changes no
    selection. The experts move together, so one step is not exact at scale; a few steps settle.
    `cutoff` [m]: the forward's own (k+1)-th biased scores (RouteInfo.cutoff), saving a top-k.
    """
    m, E = scores.shape
    alpha = _cutoff(scores, bias, top_k) if cutoff is None else cutoff
    margin = scores - alpha.unsqueeze(1)                                      # [m, E]
    q = _target_rank(m, top_k, E)
    b_hat = -grouped_topk(margin.T.contiguous(), q + 1)[0][:, q]               # [E] per expert (row)
    return b_hat - b_hat.mean() if centre else b_hat


class QuantileHistogram:
    """Histogram estimator of QB: counts of the required bias r = alpha_i - s_ij per expert.

    Counts add across micro-batches (and ranks: all-reduce .counts and .m), so the quantile never
    needs all scores in one place. The range [b_min - 1, b_max + 1] holds every r while scores lie
    in [0, 1]; the error of the read-out is at most one bin width.
    """

    def __init__(self, bias: torch.Tensor, top_k: int, bins: int = 1000):
        self.top_k, self.bins, self.dtype = top_k, bins, bias.dtype
        self.lo = float(bias.min()) - 1.0
        self.hi = float(bias.max()) + 1.0
        self.width = (self.hi - self.lo) / bins
        self.counts = torch.zeros(bias.shape[0], bins, dtype=torch.float64)   # [E, bins]
        self.m = 0

    def add(self, scores: torch.Tensor, bias: torch.Tensor, cutoff: torch.Tensor | None = None
            ) -> "QuantileHistogram":
        """Count a batch's scores [m, E] routed with `bias`; `cutoff` [m]: their (k+1)-th biased scores
        when the caller has them (RouteInfo.cutoff), saving a top-k."""
        E = scores.shape[1]
        alpha = _cutoff(scores, bias, self.top_k) if cutoff is None else cutoff
        r = alpha.unsqueeze(1) - scores                                         # [m, E]
        b = ((r.double() - self.lo) / self.width).floor().long().clamp(0, self.bins - 1)
        flat = (b + torch.arange(E).unsqueeze(0) * self.bins).reshape(-1)       # [m*E]
        self.counts += torch.bincount(flat, minlength=E * self.bins).reshape(E, self.bins)
        self.m += scores.shape[0]
        return self

    def bias(self, centre: bool = True) -> torch.Tensor:
        # b^_j is the (q+1)-th smallest r of expert j (= minus the (q+1)-th largest margin).
        E = self.counts.shape[0]
        target = _target_rank(self.m, self.top_k, E) + 1
        cum = torch.cat([torch.zeros(E, 1, dtype=torch.float64), self.counts.cumsum(1)], 1)  # [E, bins+1]
        j = (cum[:, 1:] < target).sum(1, keepdim=True).clamp(max=self.bins - 1)  # [E, 1] bin of it
        before = cum.gather(1, j)                                             # count below the bin
        inside = self.counts.gather(1, j).clamp_min(1)
        # Linear interpolation: the t-th of n values spread evenly in a bin sits at (t - 1/2) / n.
        b_hat = (self.lo + self.width * (j + (target - before - 0.5) / inside)).squeeze(1)   # [E]
        return (b_hat - b_hat.mean() if centre else b_hat).to(self.dtype)


class StepQuantile:
    """The exact QB quantile (quantile_balance) of one step's whole batch, gathered micro-batch by
    micro-batch: the report's Eq. 14 takes the quantile over one step's tokens, and a step may route its
    batch in pieces (gradient accumulation), all with the same bias. Exact, not binned: each piece keeps
    only its `r` largest margins s_ij - alpha_i per expert (r = the target rank + 1 of the whole step), and
    the r largest of a union lie among the r largest of its parts, so merging gives exactly what
    quantile_balance returns on the concatenated batch, without holding the [m, E] scores."""

    def __init__(self, n_experts: int, top_k: int, tokens: int):
        self.E, self.top_k, self.tokens = n_experts, top_k, tokens
        self.r = _target_rank(tokens, top_k, n_experts) + 1
        self.best: torch.Tensor | None = None      # [<= r, E] largest margins so far, per expert
        self.seen = 0

    def add(self, scores: torch.Tensor, cutoff: torch.Tensor) -> "StepQuantile":
        """scores [m, E] of one piece, cutoff [m] its (k+1)-th biased scores (RouteInfo.cutoff)."""
        margin = scores.detach().float() - cutoff.detach().float().unsqueeze(1)    # [m, E]
        if self.best is not None:
            margin = torch.cat([self.best, margin])
        self.best = torch.topk(margin, min(self.r, margin.shape[0]), dim=0).values   # [<= r, E]
        self.seen += scores.shape[0]
        return self

    def bias(self, centre: bool = True) -> torch.Tensor:
        if self.seen != self.tokens:
            raise ValueError(f"the step's batch has {self.tokens} tokens but {self.seen} were added")
        b_hat = -self.best[self.r - 1]                                            # [E]
        return b_hat - b_hat.mean() if centre else b_hat


def quantile_balance_hist(scores: torch.Tensor, bias: torch.Tensor, top_k: int,
                          bins: int = 1000, centre: bool = True) -> torch.Tensor:
    return QuantileHistogram(bias, top_k, bins).add(scores, bias).bias(centre).to(scores.dtype)


def sign_rule_update(load: torch.Tensor, bias: torch.Tensor, gamma: float = 1e-3) -> torch.Tensor:
    # DeepSeek-V3 (arXiv 2412.19437 sec 2.1.2): b_j += gamma * sign(mean load - load_j), a SignSGD
    # step on the same dual objective QB minimises exactly.
    load = load.to(bias.dtype)
    return bias + gamma * torch.sign(load.mean() - load)
