"""The Load balancing lab's simulation (docs/ARCHITECTURE.md section 6; docs/REFERENCES.md claim 11).

The rebalancing protocol, the same for every method: step t draws a fresh batch of m tokens (new
router scores from the same distribution), routes it top-k with the bias as it stands, records each
expert's load, and only then updates the bias from that batch, so a batch is never routed with a
bias derived from itself (what K3 does in training: QB's bias takes effect from the next batch).
Every method sees the same batches. Pure functions (no Streamlit): the scores, the five methods, a run and its
continuation, the metrics and the checks. app/balance.py holds the page's explanations, the runs kept per
process and the cached wrappers.
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from model.config import K3Config
from model.moe import QuantileHistogram, grouped_topk, quantile_balance, route, sign_rule_update

METHODS = ("none", "sign", "aux", "qb_hist", "qb")
LABELS = {
    "none": "No balancing",
    "sign": "Sign rule (DeepSeek-V3)",
    "aux": "Auxiliary loss",
    "qb_hist": "Quantile Balancing, histogram",
    "qb": "Quantile Balancing, exact",
}
SOURCES = {"synthetic": "Synthetic skewed scores", "live": "The live model's router"}
ASSETS = Path(__file__).resolve().parent.parent / "assets"
HELDOUT = ASSETS / "heldout_sample.txt"


@dataclass(frozen=True)
class Setup:
    n_experts: int = K3Config.full().n_routed_experts
    top_k: int = 16
    tokens: int = 2048          # m, tokens per batch
    steps: int = 12
    skew: float = 1.0           # synthetic only: spread of the experts' popularity (logit units)
    seed: int = 0
    bins: int = 1000            # QB histogram bins

    def check(self) -> None:
        if not 2 <= self.n_experts:
            raise ValueError("at least 2 experts")
        if not 1 <= self.top_k < self.n_experts:
            raise ValueError(f"top-k must lie in 1..{self.n_experts - 1} (balancing needs k < experts)")
        if self.tokens * self.top_k < self.n_experts:
            raise ValueError("m x k must be at least the number of experts (a target load of one token)")
        if not 1 <= self.steps <= 500:
            raise ValueError("steps must lie in 1..500")

    @property
    def target(self) -> float:          # q = m k / n tokens per expert
        return self.tokens * self.top_k / self.n_experts


# What one run may cost, in router scores routed (tokens per batch x experts x steps): the work of a run grows
# with each of the three (a top-k over every batch, for five methods), and a link may ask for any of them. One
# and a half times the default run's (2,048 x 896 x 12): the largest runs it allows take 1.3-1.6 s for all five
# methods on this 2-core machine (2,048 x 18 steps, 8,192 x 4), where the largest run the ranges allowed
# (16,384 x 896 x 30) took minutes. MAX_TOKENS keeps the fixed part of a run (the checks drawn beside it, the
# histogram's error and the output weights, grow with the batch) within the same time.
SCORE_BUDGET = 3 * Setup.tokens * Setup.n_experts * Setup.steps // 2
MAX_TOKENS = 8192
MAX_STEPS = 30


def steps_within_budget(tokens: int, n_experts: int) -> int:
    """The most steps a run of `tokens` per batch over `n_experts` may take (1..MAX_STEPS)."""
    return max(1, min(MAX_STEPS, SCORE_BUDGET // (tokens * n_experts)))


# ---- where the scores come from ------------------------------------------------------------------

class Scores:
    """batch(t) -> [m, n] router probabilities of step t, reproducible (one generator per step)."""

    def __init__(self, setup: Setup, pool: torch.Tensor | None = None):
        self.s, self.pool = setup, pool
        if pool is None:   # synthetic: a fixed popularity per expert, fresh token noise per batch
            g = torch.Generator().manual_seed(setup.seed)
            self.popularity = torch.randn(setup.n_experts, generator=g)            # [n]
        elif pool.shape[1] < setup.n_experts:
            raise ValueError(f"the pool has {pool.shape[1]} experts, fewer than {setup.n_experts}")

    def batch(self, t: int) -> torch.Tensor:
        s = self.s
        g = torch.Generator().manual_seed(1_000_003 * (s.seed + 1) + t)
        if self.pool is None:
            logits = torch.randn(s.tokens, s.n_experts, generator=g) + s.skew * self.popularity
            return torch.sigmoid(logits)                                             # [m, n]
        rows = torch.randint(0, self.pool.shape[0], (s.tokens,), generator=g)       # with replacement
        return self.pool[rows, : s.n_experts]


def heldout_text(presets: dict[str, str]) -> tuple[str, str]:
    """The fixed held-out text for the live source, and where it came from."""
    if HELDOUT.exists():
        text = HELDOUT.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            return text, f"assets/{HELDOUT.name}"
    return "\n".join(presets.values()), "the four preset prompts, joined"


# ---- the methods ---------------------------------------------------------------------------------

AUX_LR = 1.0   # plain SGD on the offsets; the coefficient alpha sets the size of the push


def aux_loss_step(scores: torch.Tensor, offset: torch.Tensor, top_k: int, coef: float
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Route a batch with the router's per-expert logit offsets, then take one gradient step of a
    Switch-style auxiliary loss alpha * n * sum_j f_j P_j on those offsets. Returns (top-k indices
    [m, k] the batch was routed with, the next offsets [n]).

    The assumption: the router can shift each expert's logit for every token alike, as a learned
    router bias would; f_j = share of routed slots (not differentiable), P_j = mean normalised
    score. Nothing else pulls on the offsets (no language-model loss): the best case for the loss."""
    n = scores.shape[1]
    logits = torch.logit(scores.float().clamp(1e-6, 1 - 1e-6))
    beta = offset.detach().float().requires_grad_(True)
    s = torch.sigmoid(logits + beta)                                                # [m, n]
    idx = grouped_topk(s.detach(), top_k)[1]                                        # [m, k] routing
    f = torch.bincount(idx.reshape(-1), minlength=n).float() / idx.numel()           # [n] sums to 1
    P = (s / s.sum(-1, keepdim=True)).mean(0)                                        # [n] sums to 1
    loss = coef * n * (f * P).sum()
    (grad,) = torch.autograd.grad(loss, beta)
    return idx, (beta - AUX_LR * grad).detach().to(offset.dtype)


def apply_offset(scores: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.logit(scores.clamp(1e-6, 1 - 1e-6)) + offset.to(scores.dtype))


@dataclass
class Run:
    method: str
    param: float
    loads: np.ndarray       # [steps, n] load of each expert at each step
    biases: np.ndarray      # [steps, n] bias (or, for aux, logit offset) each batch was routed with


def _route(biased: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(the top-k experts of each token [m, k]; the (k+1)-th biased score [m], QB's cutoff)."""
    vals, idx = grouped_topk(biased, k + 1)                                        # [m, k + 1] sorted
    return idx[:, :k], vals[:, k]


def _step(method: str, param: float, S: torch.Tensor, b: torch.Tensor, setup: Setup
          ) -> tuple[np.ndarray, torch.Tensor]:
    """One step of one method: route batch S [m, n] with bias b, then the bias for the next batch.
    Returns (each expert's load [n], the next bias [n])."""
    n, k = setup.n_experts, setup.top_k
    if method == "aux":
        top, b_next = aux_loss_step(S, b, k, param)                                 # routes, then steps
    else:
        top, cutoff = _route(S + b, k)
    load = torch.bincount(top.reshape(-1), minlength=n)
    if method == "qb":
        b_next = quantile_balance(S, b, k, cutoff=cutoff)
    elif method == "qb_hist":
        b_next = QuantileHistogram(b, k, setup.bins).add(S, b, cutoff).bias().to(b.dtype)
    elif method == "sign":
        b_next = sign_rule_update(load, b, param)
    elif method == "none":
        b_next = b
    return load.numpy(), b_next


def _check_methods(methods) -> None:
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValueError(f"method is one of {METHODS}, not {bad}")


def simulate_all(setup: Setup, params: dict[str, float], pool: torch.Tensor | None = None,
                 progress=None) -> dict[str, Run]:
    """Every method in `params` (method -> gamma for the sign rule, alpha for the auxiliary loss, unused
    otherwise) over the same setup.steps fresh batches (see the module docstring for the protocol). Each
    batch is drawn once and routed by every method. progress(step, steps) is called after each step."""
    done = continue_runs(setup, params, pool, progress=progress)
    return {m: run for m, (run, _) in done.items()}


def continue_runs(setup: Setup, params: dict[str, float], pool: torch.Tensor | None = None,
                  starts: dict[str, tuple[Run, torch.Tensor]] | None = None, workers: int = 1,
                  progress=None) -> dict[str, tuple[Run, torch.Tensor]]:
    """simulate_all, continuing earlier runs: `starts` maps a method to a run of fewer steps of the same
    setup and its bias for the next batch. Step t's batch and bias depend only on the steps before t, so
    the first steps of a longer run are the shorter run and only the missing steps are computed. Returns
    each method's run and the bias for the batch after its last. `workers` > 1 runs the methods of a step
    side by side (torch and numpy release the interpreter inside their operations)."""
    setup.check()
    _check_methods(params)
    n = setup.n_experts
    empty = (np.zeros((0, n), np.int64), np.zeros((0, n), np.float32))
    state = {}
    for m in params:
        run, bias = (starts or {}).get(m) or (Run(m, params[m], *empty), torch.zeros(n))
        state[m] = ([run.loads], [run.biases], bias, len(run.loads))
    src = Scores(setup, pool)
    pool_ex = ThreadPoolExecutor(max_workers=workers) if workers > 1 else None

    def one(m, S):
        loads, biases, bias, _ = state[m]
        biases.append(bias.numpy().copy()[None])
        load, nxt = _step(m, params[m], S, bias, setup)
        loads.append(load[None])
        return m, nxt

    try:
        for t in range(min((st[3] for st in state.values()), default=setup.steps), setup.steps):
            due = [m for m in params if state[m][3] <= t]
            S = src.batch(t)                                                       # [m, n], once for all
            results = pool_ex.map(one, due, [S] * len(due)) if pool_ex else [one(m, S) for m in due]
            for m, nxt in results:
                loads, biases, _, _ = state[m]
                state[m] = (loads, biases, nxt, t + 1)
            if progress is not None:
                progress(t + 1, setup.steps)
    finally:
        if pool_ex:
            pool_ex.shutdown()
    return {m: (Run(m, params[m], np.concatenate(st[0]), np.concatenate(st[1])), st[2]) for m, st in state.items()}


def simulate(setup: Setup, method: str, param: float = 0.0, pool: torch.Tensor | None = None) -> Run:
    """One method over setup.steps fresh batches. param: gamma for the sign rule, alpha for the auxiliary
    loss, unused otherwise."""
    if method not in METHODS:
        raise ValueError(f"method is one of {METHODS}")
    return simulate_all(setup, {method: param}, pool)[method]


def metrics(run: Run, setup: Setup) -> pd.DataFrame:
    L = run.loads.astype(np.float64)                                               # [steps, n]
    mean = setup.target
    return pd.DataFrame({
        "step": np.arange(1, len(L) + 1), "method": LABELS[run.method],
        "max/mean": L.max(1) / mean, "cv": L.std(1) / mean, "dead": (L == 0).sum(1),
        "max load": L.max(1), "min load": L.min(1)})


def steps_to(df: pd.DataFrame, threshold: float) -> int | None:
    hit = df.loc[df["max/mean"] <= threshold, "step"]
    return int(hit.iloc[0]) if len(hit) else None


def noise_floor(tokens: int, top_k: int, n_experts: int) -> float:
    """E[max_j load_j] / mean for a perfectly balanced router on a fresh batch: every load is
    Binomial(m, k/n) (each token picks k distinct experts uniformly), experts treated as independent.
    With tokens drawn independently, any bias fixed before the batch makes every load a binomial;
    the even split is the best case, so this is (about) the floor of the expected max/mean."""
    m, p = tokens, top_k / n_experts
    x = np.arange(0, m + 1)
    logpmf = (np.array([math.lgamma(m + 1) - math.lgamma(i + 1) - math.lgamma(m - i + 1) for i in x])
              + x * math.log(p) + (m - x) * math.log1p(-p))
    cdf = np.clip(np.cumsum(np.exp(logpmf)), 0.0, 1.0)
    e_max = float(np.sum(1.0 - cdf[:-1] ** n_experts))      # E[max] = sum_{x >= 0} P(max > x)
    return e_max / (m * p)


# ---- the checks --------------------------------------------------------------------------------

@dataclass
class HistCheck:
    exact: np.ndarray       # [n] uncentred b^ from exact quantiles
    hist: np.ndarray        # [n] uncentred b^ from the histogram
    bin_width: float

    @property
    def max_error_bins(self) -> float:
        return float(np.abs(self.hist - self.exact).max() / self.bin_width)


def hist_check(setup: Setup, bias: np.ndarray, step: int, pool: torch.Tensor | None = None) -> HistCheck:
    """Exact QB vs its histogram estimate on one batch and bias (the histogram method's own state)."""
    S = Scores(setup, pool).batch(step)
    b = torch.as_tensor(bias, dtype=S.dtype)
    exact = quantile_balance(S, b, setup.top_k, centre=False)
    h = QuantileHistogram(b, setup.top_k, setup.bins).add(S, b)
    return HistCheck(exact.numpy(), h.bias(centre=False).numpy(), h.width)


@dataclass
class WeightCheck:
    tokens: int
    changed_sets: int            # tokens whose chosen experts differ with the bias
    compared: int                # tokens with at least 2 experts chosen both with and without it
    max_formula_error: float     # weights vs raw score / sum of raw scores of the chosen set
    max_diff_qb: float           # common experts' weights, renormalised over them: with vs without bias
    max_diff_if_biased: float    # what the weights would differ by had they used s + b
    max_diff_aux: float          # the same comparison for the auxiliary loss's logit offsets
    pairs: pd.DataFrame          # (without, with) renormalised weight of sampled pairs, by method


def _dense(idx: torch.Tensor, w: torch.Tensor, n: int) -> torch.Tensor:
    return torch.zeros(idx.shape[0], n, dtype=w.dtype).scatter_(1, idx, w)            # [m, n]


def _on_common(W0: torch.Tensor, W1: torch.Tensor):
    """Both weight rows restricted to the experts chosen in both and renormalised over them."""
    common = (W0 > 0) & (W1 > 0)                                                       # [m, n]
    keep = common.sum(1) >= 2
    a, b = W0 * common, W1 * common
    a = a / a.sum(1, keepdim=True).clamp_min(1e-300)
    b = b / b.sum(1, keepdim=True).clamp_min(1e-300)
    return a, b, common & keep.unsqueeze(1), keep


WEIGHT_SAMPLE = 500      # expert pairs per method the weights chart draws


def weight_check(setup: Setup, qb_bias: np.ndarray, aux_offset: np.ndarray, step: int,
                 pool: torch.Tensor | None = None, sample: int = WEIGHT_SAMPLE) -> WeightCheck:
    """Claim 11: the bias chooses experts but never enters the output weights. A token's weights are
    raw scores renormalised over its chosen set, so any experts chosen both with and without the bias
    keep exactly their relative weights; logit offsets (the auxiliary-loss router) change them. The maxima
    are over every pair; `pairs` holds a random `sample` of them per method, what the chart draws (each drawn
    point costs the page's reload ~0.1 ms in the browser: 1,500 per method were ~0.25 s)."""
    S = Scores(setup, pool).batch(step).double()
    n, k = setup.n_experts, setup.top_k
    b = torch.as_tensor(qb_bias, dtype=torch.float64)
    idx0, w0, _ = route(S, None, k)
    idxb, wb, _ = route(S, b, k)
    W0, Wb = _dense(idx0, w0, n), _dense(idxb, wb, n)
    changed = (W0 > 0).ne(Wb > 0).any(1)
    raw = S.gather(1, idxb)
    formula = (raw / raw.sum(1, keepdim=True) - wb).abs().max()
    biased = (S + b).gather(1, idxb)
    if_biased = (biased / biased.sum(1, keepdim=True) - wb).abs().max()
    Sa = apply_offset(S, torch.as_tensor(aux_offset, dtype=torch.float64))
    idxa, wa, _ = route(Sa, None, k)
    Wa = _dense(idxa, wa, n)
    g = torch.Generator().manual_seed(7)
    frames, diffs, counted = [], {}, 0
    for name, W in (("Quantile Balancing bias", Wb), ("Auxiliary-loss offsets", Wa)):
        a, c, mask, keep = _on_common(W0, W)
        diffs[name] = float((a - c)[mask].abs().max()) if mask.any() else float("nan")
        counted = counted or int(keep.sum())
        t, e = torch.nonzero(mask, as_tuple=True)
        pick = torch.randperm(len(t), generator=g)[:sample]
        frames.append(pd.DataFrame({"without": a[t[pick], e[pick]].numpy(),
                                    "with": c[t[pick], e[pick]].numpy(), "method": name}))
    return WeightCheck(int(S.shape[0]), int(changed.sum()), counted, float(formula),
                       diffs["Quantile Balancing bias"], float(if_biased), diffs["Auxiliary-loss offsets"],
                       pd.concat(frames, ignore_index=True))


@dataclass
class SignStory:
    """The numbers behind 'why the sign rule struggles near 1000 experts', from one run."""
    gamma: float
    steps: int
    qb_max_abs_bias: float       # how far QB moved the farthest expert's bias
    steps_needed: int            # at least QB's spread / (2 gamma) sign steps (the spread grows <= 2 gamma a step)
    sign_max_abs_bias: float     # how far the sign rule got (<= steps * gamma)
    tokens_per_step: float       # mean over experts: tokens one +gamma step would pull in
    target: float                # q = m k / n
    flips: float                 # share of experts whose update direction flipped on the last step
    qb_spread: float = 0.0       # QB's largest minus smallest bias: what balancing needs (a common offset is free)
    sign_spread: float = 0.0     # the sign rule's, <= 2 x gamma x the updates it made


def sign_story(setup: Setup, qb: Run, sign: Run, pool: torch.Tensor | None = None) -> SignStory:
    gamma = float(sign.param)
    qb_far = float(np.abs(qb.biases[-1]).max()) if len(qb.biases) > 1 else 0.0
    # Only differences between biases change a top-k, so the sign rule must reach QB's bias up to a common
    # offset: its spread (largest minus smallest), which one sign step widens by at most 2 gamma.
    qb_spread = float(np.ptp(qb.biases[-1])) if len(qb.biases) > 1 else 0.0
    last = len(sign.biases) - 1
    S = Scores(setup, pool).batch(last)
    b = torch.as_tensor(sign.biases[-1], dtype=S.dtype)
    alpha = torch.topk(S + b, setup.top_k + 1, dim=-1).values[:, setup.top_k:setup.top_k + 1]   # [m, 1]
    gap = alpha - (S + b)                                                          # [m, n] >= 0 if out
    pulled = ((gap > 0) & (gap <= gamma)).sum(0).double().mean()
    if len(sign.loads) >= 2:
        d1 = np.sign(setup.target - sign.loads[-1])
        d0 = np.sign(setup.target - sign.loads[-2])
        flips = float(((d1 * d0) < 0).mean())
    else:
        flips = 0.0
    return SignStory(gamma, setup.steps, qb_far, math.ceil(qb_spread / (2 * gamma)) if gamma > 0 else 0,
                     float(np.abs(sign.biases[-1]).max()), float(pulled), setup.target, flips, qb_spread,
                     float(np.ptp(sign.biases[-1])))
