"""The Load balancing lab's page data: its explanations with their numbers, each method's run kept per process
(shared by every session) and the cached wrappers. The simulation itself is app/balance_sim.py."""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace

import pandas as pd
import streamlit as st
import torch

from app.balance_sim import (
    LABELS,
    HistCheck,
    Run,
    Setup,
    SignStory,
    WeightCheck,
    continue_runs,
    heldout_text,
    hist_check,
    noise_floor,
    sign_story,
    weight_check,
)

# ---- the page's explanations, with their numbers ---------------------------------------------------

# The project's own target for the shipped live instance (Model card): max/mean expert load at most this
# on its 65,536-token held-out batch, and no expert without tokens. A choice of this project, not K3's.
LIVE_TARGET = 1.3
LIVE_EVAL_TOKENS = 65_536
FLOOR_EXAMPLES = (8_192, 65_536)


def goal_note(setup: Setup, floor: float) -> str:
    """Which max/mean number is the goal on this page, where it comes from, and how it relates to the
    Model card's numbers (one sentence each)."""
    q = setup.target
    sd = (q * (1 - setup.top_k / setup.n_experts)) ** 0.5        # a binomial load's standard deviation
    from model.config import K3Config
    k3 = K3Config.full()
    n, k = k3.n_routed_experts, k3.top_k
    examples = ", ".join(f"{m:,} tokens give {cached_noise_floor(m, k, n):.2f}" for m in FLOOR_EXAMPLES)
    live_floor = cached_noise_floor(LIVE_EVAL_TOKENS, k, n)
    return (f"**The goal is the floor** ({floor:.2f} here, derived): the max/mean that even a perfectly balanced "
            f"router shows on a fresh batch of {setup.tokens:,} tokens, from sampling noise alone. With "
            f"q = m·k/n = {q:,.1f} tokens per expert, loads vary by about √(q(1 − k/n)) = {sd:.1f} tokens from "
            f"batch to batch (binomial), and the busiest of {setup.n_experts} experts sits about "
            f"{(floor - 1) * q / sd:.1f} of those above the mean, so no bias fixed before the batch does better on "
            "average; a method has balanced when it "
            f"reaches the floor. Only larger batches lower it: at {n} experts and top-{k}, {examples}. The Model "
            f"card's {LIVE_TARGET:g} is a different number, the project's own target for the shipped live model on "
            f"its {LIVE_EVAL_TOKENS:,}-token held-out batch, where the floor is {live_floor:.2f}.")


def table_note(table: pd.DataFrame, floor: float, setup: Setup) -> str:
    """The caption under the summary table: where exact QB ends against the floor, and why not on it."""
    head = ("Computed by this page's simulation; 1.5 × the floor, the last column's mark for 'near', is this "
            "page's own choice. ")
    steps = int(table["step"].max())
    if steps < 2:
        return head + "At step 1 no method has a bias yet: every method routes the raw scores."
    qb = float(table[(table["step"] == steps) & (table["method"] == LABELS["qb"])]["max/mean"].iloc[0])
    if qb < floor:
        return head + (f"Exact QB ends at {qb:.2f}, below the floor {floor:.2f}: the floor is an expected value "
                       "over fresh batches, and one batch can beat it.")
    return (head + f"Exact QB ends at {qb:.2f}, {qb / floor - 1:.0%} above the floor: its bias comes from one "
            f"earlier batch of {setup.tokens:,} tokens and carries that batch's sampling noise. K3 takes each "
            "quantile over a whole global batch, millions of margins (K3 report sec 2.3.3), and names an average "
            "over steps as an optional refinement (App. D).")


def sign_rule_intuition(story: SignStory, k: int, steps: int) -> str:
    """The plain-words half of 'why the sign rule struggles': lead with the picture, numbers from the run."""
    return (f"Both methods turn the same knob: one bias per expert, added to the router's scores only to choose "
            f"the top-{k}. The **sign rule** (DeepSeek-V3, arXiv 2412.19437) nudges every bias by the same small "
            f"step γ = {story.gamma:g} each batch, up if the expert was underused and down if overused, however far "
            f"it is from balance. **Quantile Balancing** (K3 report Eq. 14, sec 2.3.3) instead asks, for each "
            f"expert, which bias would have given it exactly its fair share of the last batch if every token's "
            f"cutoff had stayed where it was, and sets it there in one move; the cutoffs then shift with the other "
            f"experts' biases, so a few batches settle it. Only differences between biases change a token's "
            f"top-{k}, and in this run QB spread the experts' biases over **{story.qb_spread:.3f}** (largest minus "
            f"smallest). One sign-rule step widens that spread by at most 2γ, so at γ = {story.gamma:g} the sign "
            f"rule needs at least **{story.steps_needed:,} steps** to get there; after its {steps - 1} "
            f"update{'' if steps - 1 == 1 else 's'} in this run its biases span **{story.sign_spread:.3f}**.")


def sign_rule_details(story: SignStory, k: int, qb_loads: list[float], sign_loads: list[float]) -> str:
    """The expandable half: why a larger step does not help, and the optimisation view."""
    return (f"*Why not a larger γ?* The step is the same for every expert. At γ = {story.gamma:g} one +γ step "
            f"would pull on average **{story.tokens_per_step:.1f} tokens** into an expert whose target is "
            f"{story.target:,.1f}, and {story.flips:.0%} of the experts reversed direction on the last step. A larger "
            "γ pulls more tokens per step, too many for the experts near balance, which then overshoot, while those "
            "far from it still need many steps. This page's reading: with near a thousand experts a token's k-th "
            "and (k+1)-th choices are close in score, so one fixed step cannot suit both.\n\n"
            "*The optimisation view* (the K3 report's App. C, self-cited): both rules are descent methods on the "
            "same dual objective of the balancing problem. The sign rule is a SignSGD step on it; QB is the exact "
            "minimiser in each expert's coordinate: the bias at which exactly q = m·k/n tokens of the batch clear "
            "their cutoff c (each token's (k+1)-th highest biased score), i.e. the (q+1)-th largest margin s − c, "
            "negated. The experts move together, so each one's cutoff shifts and a few steps settle: here QB's "
            f"max/mean went {' → '.join(f'{v:.2f}' for v in qb_loads[:4])} in the first steps (sign rule: "
            f"{' → '.join(f'{v:.2f}' for v in sign_loads[:4])}).")


# ---- cached wrappers for the page ----------------------------------------------------------------

@st.cache_resource(max_entries=8, show_spinner=False)
def live_pool(layer: int) -> tuple[torch.Tensor, str, int]:
    """Router probabilities [P, 896] of one MoE layer of the live model on the held-out text."""
    from app.live import MAX_TOKENS, PRESETS, forward, live
    lv = live()
    text, origin = heldout_text(PRESETS)
    ids = lv.tokenizer.encode(text)[:MAX_TOKENS]
    out = forward(ids)
    return out.trace.scores(layer)[0].detach().float().clone(), origin, len(ids)


# The page's defaults besides Setup's own (views/balance.py declares its controls with these; the server's
# warm-up, app/warm.py, computes default_runs() before the page's first visit).
DEFAULT_SOURCE = "synthetic"
DEFAULT_GAMMA = 0.001        # DeepSeek-V3's sign-rule step
DEFAULT_AUX = 1000.0
DEFAULT_LAYER = 5            # the live MoE layer, when the scores are the live model's


def method_params(gamma: float, aux: float) -> dict[str, float]:
    return {"none": 0.0, "sign": float(gamma), "aux": float(aux), "qb_hist": 0.0, "qb": 0.0}


# Each method's run, kept per process and shared by every session: a control that changes one method's
# parameter (gamma, alpha, the histogram's bins) recomputes that method only, and more steps continue the
# run kept rather than start again. A run of 30 steps over 896 experts is ~0.2 MB; 64 of them are kept.
RUN_ENTRIES = 64
_runs: OrderedDict = OrderedDict()
_runs_lock = threading.Lock()


def _run_key(setup: Setup, method: str, param: float, source: str, layer: int) -> tuple:
    # only what changes this method's numbers: the steps are a prefix, the bins matter to the histogram
    # method alone, the skew to synthetic scores alone, the layer to the live model's alone
    s = replace(setup, steps=0, bins=setup.bins if method == "qb_hist" else 0,
                skew=setup.skew if source == "synthetic" else 0.0)
    return (s, method, float(param) if method in ("sign", "aux") else 0.0, source, layer if source == "live" else 0)


def _kept(key: tuple) -> tuple[Run, torch.Tensor] | None:
    with _runs_lock:
        return _runs.get(key)


def _keep(key: tuple, value: tuple[Run, torch.Tensor]) -> None:
    with _runs_lock:
        _runs[key] = value
        _runs.move_to_end(key)
        while len(_runs) > RUN_ENTRIES:
            _runs.popitem(last=False)


def method_runs(setup: Setup, params: dict[str, float], source: str, layer: int,
                pool: torch.Tensor | None = None) -> dict[str, Run]:
    """The methods' runs of `setup` from the process-wide store; those missing or too short are computed
    (continued) together, one batch stream for all, two methods at a time (the server's two cores).
    `pool`: the live router scores when source is "live"."""
    keys = {m: _run_key(setup, m, p, source, layer) for m, p in params.items()}
    kept = {m: _kept(key) for m, key in keys.items()}
    todo = {m: p for m, p in params.items() if kept[m] is None or len(kept[m][0].loads) < setup.steps}
    if todo:
        done = continue_runs(setup, todo, pool if source == "live" else None,
                             starts={m: kept[m] for m in todo if kept[m] is not None}, workers=2)
        for m, value in done.items():
            _keep(keys[m], value)
            kept[m] = value
    return {m: Run(m, p, kept[m][0].loads[: setup.steps], kept[m][0].biases[: setup.steps])
            for m, p in params.items()}


def cached_runs(setup: Setup, gamma: float, aux: float, source: str, layer: int) -> dict[str, Run]:
    """All five methods: the page's whole simulation."""
    return method_runs(setup, method_params(gamma, aux), source, layer, _pool(source, layer))


def default_runs() -> dict[str, Run]:
    """The page's default view's simulation: the same call, so the same runs kept, as the page's."""
    return cached_runs(Setup(), DEFAULT_GAMMA, DEFAULT_AUX, DEFAULT_SOURCE, DEFAULT_LAYER)


def _pool(source: str, layer: int) -> torch.Tensor | None:
    return live_pool(layer)[0] if source == "live" else None


@st.cache_data(max_entries=64, show_spinner=False)
def cached_hist_check(setup: Setup, step: int, source: str, layer: int) -> HistCheck:
    run = method_runs(setup, {"qb_hist": 0.0}, source, layer, _pool(source, layer))["qb_hist"]
    return hist_check(setup, run.biases[step], step, _pool(source, layer))


@st.cache_data(max_entries=64, show_spinner=False)
def cached_weight_check(setup: Setup, aux: float, step: int, source: str, layer: int) -> WeightCheck:
    pool = _pool(source, layer)
    runs = method_runs(setup, {"qb": 0.0, "aux": aux}, source, layer, pool)
    return weight_check(setup, runs["qb"].biases[step], runs["aux"].biases[step], step, pool)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_sign_story(setup: Setup, gamma: float, source: str, layer: int) -> SignStory:
    pool = _pool(source, layer)
    runs = method_runs(setup, {"qb": 0.0, "sign": gamma}, source, layer, pool)
    return sign_story(setup, runs["qb"], runs["sign"], pool)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_noise_floor(tokens: int, top_k: int, n_experts: int) -> float:
    return noise_floor(tokens, top_k, n_experts)

