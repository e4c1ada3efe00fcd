"""Load balancing lab: Quantile Balancing vs the sign rule vs an auxiliary loss vs nothing."""
import pandas as pd
import streamlit as st

from app import state, ui
from app.balance import (
    DEFAULT_AUX,
    DEFAULT_GAMMA,
    DEFAULT_LAYER,
    DEFAULT_SOURCE,
    cached_hist_check,
    cached_noise_floor,
    cached_runs,
    cached_sign_story,
    cached_weight_check,
    goal_note,
    live_pool,
    sign_rule_details,
    sign_rule_intuition,
    table_note,
)
from app.balance_sim import (
    LABELS,
    METHODS,
    SCORE_BUDGET,
    SOURCES,
    WEIGHT_SAMPLE,
    Setup,
    metrics,
    steps_to,
    steps_within_budget,
)
from app.charts.balance import hist_error_spec, load_spec, steps_spec, weights_spec
from model.config import K3Config

EXPERTS = [16, 32, 64, 128, 256, 384, 512, 768, 896]
TOKENS = [1024, 2048, 4096, 8192]              # up to app.balance_sim.MAX_TOKENS: a run's cost is capped
GAMMAS = [0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1]
AUX = [0.01, 0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0]
SKEWS = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0]
BINS = [50, 100, 300, 1000, 3000]

ui.page_header(
    "Load balancing lab",
    "A router left alone can send most tokens to a few favourite experts (the grey line below). K3's **Quantile "
    "Balancing** adds a per-expert bias that only decides *which* experts a token visits (K3 report Eq. 13), "
    "sets it in one move from the last batch, and has no step size to tune (K3 report Eq. 14, sec 2.3.3, App. C).",
    "raise the sign rule's γ from DeepSeek-V3's 0.001 towards 0.1: does a larger step bring it down to the "
    "dotted noise floor that QB comes near, or make it overshoot? Then set 32 experts and compare the auxiliary "
    "loss at α = 100 with α = 1,000.",
)

# ---- controls --------------------------------------------------------------------------------------
MOE_LAYERS = K3Config.tiny().moe_layers          # the live instance's MoE layers (1..92), without loading it
view = state.page(
    state.Choice("src", DEFAULT_SOURCE, "score source", options=tuple(SOURCES)),
    state.Choice("n", Setup.n_experts, "number of experts", options=tuple(EXPERTS)),
    state.Int("k", Setup.top_k, "top-k", lo=1, hi=32),
    state.Choice("m", Setup.tokens, "tokens per batch", options=tuple(TOKENS)),
    state.Int("steps", Setup.steps, "steps", lo=1, hi=30),
    state.Choice("gamma", DEFAULT_GAMMA, "sign-rule step γ", options=tuple(GAMMAS)),
    state.Choice("aux", DEFAULT_AUX, "auxiliary-loss coefficient", options=tuple(AUX)),
    state.Choice("skew", Setup.skew, "skew", options=tuple(SKEWS)),
    state.Choice("bins", Setup.bins, "histogram bins", options=tuple(BINS)),
    state.Choice("layer", DEFAULT_LAYER, "layer", options=tuple(MOE_LAYERS)),
    state.Int("step", None, "step", lo=1, hi=30),
    state.Choice("view", "qb", "method", options=tuple(METHODS)),
    state.Flag("sort", False, "sorted"),
    prefix="bal",
)
source = view.draw(st.segmented_control, "src", "Router scores", format_func=SOURCES.get)
c1, c2, c3, c4 = st.columns(4)
n = view.draw(c1.select_slider, "n", "Experts n")
k = view.draw(c2.slider, "k", "Top-k")
m = view.draw(c3.select_slider, "m", "Tokens per batch m")
max_steps = steps_within_budget(m, n)
steps = view.draw(c4.slider, "steps", "Steps", 1, max_steps, options=range(1, max_steps + 1))
c1, c2, c3, c4 = st.columns(4)
gamma = view.draw(c1.select_slider, "gamma", "Sign rule step γ",
                  help="DeepSeek-V3 (arXiv 2412.19437) set γ = 0.001 for most of its pre-training.")
aux = view.draw(c2.select_slider, "aux", "Auxiliary-loss coefficient α",
                help="Scales the gradient step on the router's per-expert logit offsets (learning rate 1).")
bins = view.draw(c3.select_slider, "bins", "QB histogram bins")
if source == "synthetic":
    skew = view.draw(c4.select_slider, "skew", "Skew of expert popularity",
                     help="Logit of token i for expert j: noise N(0,1) + skew × a fixed popularity N(0,1) of j.")
    layer = view["layer"]
else:
    layer = view.draw(c4.select_slider, "layer", "Live MoE layer")
    skew = view["skew"]

if max_steps < 30:
    st.caption(f":material/speed: With {m:,} tokens per batch and {n} experts a run is capped at {max_steps} steps, "
               f"so that it stays within the lab's budget of {SCORE_BUDGET / 1e6:.0f} million router scores "
               "(about 1-2 s on this server, once per setting); fewer tokens or experts allow up to 30.")
if k >= n:
    st.info((f"Top-{k} of {n} experts leaves nothing to balance" if k == n else
             f"Top-{k} is more than the {n} experts there are")
            + f": using top-{n // 2} instead.", icon=":material/tune:")
    k = n // 2
setup = Setup(n_experts=n, top_k=k, tokens=m, steps=steps, skew=float(skew if source == "synthetic" else 0.0),
              bins=bins)

if source == "live":
    with st.spinner("Running the live model on the held-out text…"):
        pool, origin, n_tok = live_pool(layer)
    st.caption(f"Scores: the sigmoid router probabilities of MoE layer {layer} of the live model for the {n_tok} "
               f"tokens of {origin} (computed). Each batch draws {m:,} of these tokens with replacement, so a "
               f"batch is new but comes from the same distribution. With n < 896 the first n experts are kept. With only "
               f"{n_tok} distinct tokens, each appears about {m / n_tok:.0f} times per batch, so loads move in lumps of "
               "that size and the floor drawn below (computed for independent tokens) is optimistic.")

# ---- run ---------------------------------------------------------------------------------------------
with st.spinner(f"Simulating the five methods over {steps} batches of {m:,} tokens (once per setting; the runs "
                "are kept for every visitor)…"):
    runs = cached_runs(setup, float(gamma), float(aux), source, layer)
table = pd.concat([metrics(runs[mth], setup) for mth in METHODS], ignore_index=True)
floor = cached_noise_floor(m, k, n)

st.subheader("How even is the load, step by step?")
ui.vega_chart(steps_spec(table, floor),
         f"Every method sees the same {steps} fresh batches of {m:,} tokens; each batch is routed with the bias "
         "from the batches before it. Left: the busiest expert's load over the mean (1 is perfect). The dotted "
         f"line is the goal, the noise floor ({floor:.2f}, derived): what a perfectly balanced router shows on a fresh "
         "batch of this size, because sampling noise alone (binomial loads) makes some expert busier than average.",
         alt="Three line charts over steps: max/mean load, coefficient of variation and dead experts, one line per method.",
         key="bal_steps_fig")
last = table[table["step"] == steps].set_index("method")
summary = pd.DataFrame({
    "method": [LABELS[mth] for mth in METHODS],
    "parameter": ["", f"γ = {gamma:g}", f"α = {aux:,g}", f"{bins:,} bins", ""],
    "max/mean at last step": [last.loc[LABELS[mth], "max/mean"] for mth in METHODS],
    "CV at last step": [last.loc[LABELS[mth], "cv"] for mth in METHODS],
    "dead experts at last step": [int(last.loc[LABELS[mth], "dead"]) for mth in METHODS],
    "first step with max/mean ≤ 1.5 × floor": [
        str(hit) if (hit := steps_to(table[table["method"] == LABELS[mth]], 1.5 * floor)) is not None
        else f"not within {steps}" for mth in METHODS],
})
ui.table(summary, {"max/mean at last step": ".3f", "CV at last step": ".3f"})
st.caption(table_note(table, floor, setup))
st.markdown(goal_note(setup, floor))

# ---- per-expert load at one step ---------------------------------------------------------------------
@st.fragment
def step_sections() -> None:
    st.subheader("Load per expert at one step")
    c1, c2, c3 = st.columns([3, 3, 1])
    step = view.draw(c1.slider, "step", "Step", 1, steps, options=range(1, steps + 1), default=steps) if steps > 1 else 1
    method = view.draw(c2.selectbox, "view", "Method", format_func=LABELS.get)
    sort = view.draw(c3.toggle, "sort", "Sorted", help="Sort the experts by load.")
    load = runs[method].loads[step - 1]
    row = table[(table["method"] == LABELS[method]) & (table["step"] == step)].iloc[0]
    ui.vega_chart(load_spec(load, setup.target, f"{LABELS[method]}, step {step}: max/mean {row['max/mean']:.2f}, "
                                             f"{int(row['dead'])} expert{'' if int(row['dead']) == 1 else 's'} empty", sort),
             f"One bar per expert: tokens routed to it in batch {step}. Blue: at or under the target q = {setup.target:,.1f}; "
             "orange: over; red: no token at all (a dead expert learns nothing from this batch).",
             alt="Bar chart of the load of each expert at the chosen step for the chosen method.", key="bal_load")

    # ---- the explanation ---------------------------------------------------------------------------------
    st.subheader("Why the sign rule struggles near 1,000 experts, and why QB needs no step size")
    story = cached_sign_story(setup, float(gamma), source, layer)
    qb_df, sign_df = (table[table["method"] == LABELS[x]] for x in ("qb", "sign"))
    st.markdown(sign_rule_intuition(story, k, steps))
    with st.expander("Why a larger step does not help, and the optimisation view"):
        st.markdown(sign_rule_details(story, k, list(qb_df["max/mean"]), list(sign_df["max/mean"])))
    st.caption("Numbers computed from this run.")
    st.caption("Auxiliary loss, the assumption made here: a loss in the style of the Switch Transformer "
               "(arXiv 2101.03961), α·n·Σⱼ fⱼ·Pⱼ (fⱼ: share of routed "
               "slots, Pⱼ: mean normalised score), minimised by plain gradient steps (learning rate 1) on a per-expert "
               "logit offset of the router, the part of a router-weight update that shifts an expert for every token "
               "alike. Nothing else pulls on the offsets here: in real training the language-model loss resists them, "
               "and they change the scores themselves, hence the output weights (see below). With plain gradient steps "
               f"the push on each expert shrinks like α/n, so one α is {EXPERTS[-1] // 32}× weaker at {EXPERTS[-1]} experts "
               "than at 32, and too "
               "large an α overshoots (try 32 experts with α = 1,000): the coefficient needs tuning per model, "
               "QB's update has none.")

    # ---- histogram estimator -----------------------------------------------------------------------------
    st.subheader("Exact quantile vs the histogram estimate")
    hc = cached_hist_check(setup, step - 1, source, layer)
    ui.vega_chart(hist_error_spec(hc.exact, hc.hist, hc.bin_width),
             f"At step {step}, on the histogram method's own batch and bias: the bias each expert needs, from exact "
             f"quantiles (a top-q over all tokens) and from {bins:,} bins whose counts could be summed across devices "
             f"without gathering the scores (K3 sends a few hundred bins per expert, K3 report sec 2.3.3). Largest "
             f"error: {hc.max_error_bins:.2f} bin widths (bin width {hc.bin_width:.2e}); the estimator promises at "
             "most 1 (App. D).",
             alt="Scatter of histogram-estimated against exact per-expert bias, and a histogram of the errors in bin widths.",
             key="bal_hist")

    # ---- output weights ----------------------------------------------------------------------------------
    st.subheader("The bias never changes the output weights")
    wc = cached_weight_check(setup, float(aux), step - 1, source, layer)
    ui.vega_chart(weights_spec(wc.pairs),
             f"Batch {step}, routed with and without the QB bias (drawn: {len(wc.pairs):,} expert pairs, a random "
             f"{WEIGHT_SAMPLE} at most per method; the table's largest differences are over all of them). For the experts a "
             "token picks both ways, their "
             "weights (renormalised over those experts) are identical: every blue point sits on the zero line. The "
             "auxiliary loss instead moves the router's logits, so the same experts get different weights (purple).",
             alt="Scatter of the change in output weight caused by the bias, for Quantile Balancing and the auxiliary loss.",
             key="bal_weights")
    checks = pd.DataFrame([
        {"check": "weights = raw score / sum of raw scores of the chosen experts", "max difference": wc.max_formula_error},
        {"check": "QB bias on vs off, experts chosen both ways (renormalised)", "max difference": wc.max_diff_qb},
        {"check": "had the weights used score + bias instead", "max difference": wc.max_diff_if_biased},
        {"check": "auxiliary-loss offsets on vs off, same comparison", "max difference": wc.max_diff_aux},
    ])
    ui.table(checks, {"max difference": ".2e"})
    st.caption(f"Computed on {wc.tokens:,} tokens: the bias changed the chosen set of {wc.changed_sets:,} of them, "
               f"{wc.compared:,} share at least two experts between the two routings. Differences of order 1e-16 are "
               "floating-point rounding (the sums run in another order). So the bias decides *which* experts a token "
               "visits and never *how much* each counts (K3 report Eq. 13, sec 2.3.3; docs/REFERENCES.md claim 11).")

step_sections()
