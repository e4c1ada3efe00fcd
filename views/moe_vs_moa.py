"""MoE vs Mixture of Agents: one sparse model against N dense models of the same total size, costed."""
import streamlit as st

from app import state, ui
from app.charts.moe_vs_moa import costs_spec, step_spec, sweep_spec
from app.moe_vs_moa import (
    BANDWIDTHS,
    CONTEXTS,
    DEFAULTS,
    N_AGENTS,
    OUTPUTS,
    PRECISION_NAMES,
    PRECISIONS,
    assumptions,
    context_sweep,
    cost_table,
    fmt_ratio,
    matched_size,
    qualitative,
    scenario,
    show,
    size_bounds,
    step_breakdown,
    step_note,
    sweep_note,
)
from app.text import fmt_tokens, md_table
from model.accounting import count_params
from model.config import K3Config

ui.page_header(
    "MoE vs Mixture of Agents",
    "A mixture of experts picks a few small experts for every token inside one network; a **Mixture of Agents** "
    "asks N whole models and then merges their answers: with the same total parameters, this page costs both "
    "from the configs (FLOPs, cache memory and decode time).",
    "slide the prompt length to 1M: the cache ratio stays at N and the time ratio barely moves, because both "
    "sides spend most of a step reading weights; then double N to 16 and watch the time ratio fall (smaller "
    "agents, run side by side) while the FLOPs ratio rises.",
)

lo, hi = size_bounds()
view = state.page(
    state.Int("n", DEFAULTS["n"], "number of agents", lo=N_AGENTS[0], hi=N_AGENTS[-1]),
    state.Flag("match", True, "matching"),
    state.Int("size", matched_size(DEFAULTS["n"]), "agent size", lo=lo, hi=hi),
    state.Choice("context", DEFAULTS["context"], "context", options=tuple(CONTEXTS)),
    state.Choice("out", DEFAULTS["output"], "output length", options=tuple(OUTPUTS)),
    state.Choice("bw", DEFAULTS["bw"], "bandwidth", options=tuple(BANDWIDTHS)),
    state.Choice("prec", DEFAULTS["prec"], "agent precision", options=tuple(PRECISIONS)),
    prefix="moa",
)

c1, c2, c3 = st.columns([2, 1, 2])
n = view.draw(c1.slider, "n", "N dense agents", 1, N_AGENTS[-1])
match = view.draw(c2.toggle, "match", "Match K3's size",
                  help="On: each agent has K3's total / N parameters, so the N agents hold as much as K3.")
if match:
    view.set("size", matched_size(n))
size = view.draw(c3.slider, "size", "Agent size (billions of parameters)", disabled=match,
                 help=f"At least {lo}B: every agent carries K3's attention stack, embedding and head.")
c1, c2, c3, c4 = st.columns(4)
context = view.draw(c1.select_slider, "context", "Prompt length (context)", format_func=fmt_tokens)
output = view.draw(c2.select_slider, "out", "Answer length (tokens)")
bw = view.draw(c3.select_slider, "bw", "Memory bandwidth (TB/s)",
               help="Default 4.8 TB/s: one NVIDIA H200 (published by NVIDIA).")
prec = view.draw(c4.segmented_control, "prec", "Agents' weights", format_func=PRECISION_NAMES.get,
                 help="Bits per weight of the dense agents: bf16 16, FP8 8, MXFP4 4.25.")

s = scenario(n, size, context, output, bw, prec)
table, k3, moa = cost_table(s)
total_agents = n * size
share = total_agents * 1e9 / count_params(K3Config.full()).total
st.caption(f"K3: {count_params(K3Config.full()).total / 1e9:,.1f}B parameters (computed). "
           f"{moa.name}: {total_agents:,}B in all"
           + (f" (matched: K3's total / {n}, rounded to the whole billion)." if match else
              f" ({fmt_ratio(share)}{' of' if share < 0.1 else ''} K3's).")
           + " Every number below is derived from the configs by model/cost.py under the assumptions listed further down.")

st.subheader("The costs, side by side")
ui.vega_chart(costs_spec(table, moa.name, st.context.theme.type, present=bool(st.session_state.get(ui.K_PRESENT))),
              f"For a {fmt_tokens(context)}-token prompt and a {output:,}-token answer. FLOPs: every agent computes with all "
              f"its weights on every token, K3 with {count_params(K3Config.full()).active / 1e9:,.1f}B of its "
              f"{count_params(K3Config.full()).total / 1e9:,.1f}B. "
              + (f"Cache: one per agent, and the aggregator holds the prompt plus all {n} answers. " if n > 1 else
                 "Cache: one each. ")
              + "Time: at batch 1 a decode step must read its weights from memory; " + step_note(s)
              + (", and the aggregator cannot start before the proposers finish. " if n > 1 else ". ")
              + ("Weights: about the same parameter count, stored at different precisions." if match else
                 f"Weights: {total_agents:,}B parameters against K3's "
                 f"{count_params(K3Config.full()).total / 1e9:,.1f}B, stored at different precisions."),
              alt="Four bar charts comparing K3 and the Mixture of Agents on FLOPs per token, cache, time and weights.",
              key="moa_costs")
shown = table.assign(**{"K3": [show(v, u) for v, u in zip(table["K3"], table["unit"])],
                        "MoA": [show(v, u) for v, u in zip(table["MoA"], table["unit"])],
                        "MoA / K3": [fmt_ratio(r) for r in table["ratio"]]})
ui.table(shown[["cost", "K3", "MoA", "MoA / K3", "origin"]])

st.subheader("How the ratios move with the prompt length")
ui.vega_chart(sweep_spec(context_sweep(s), context),
              "Each line is MoA's cost divided by K3's, at every prompt length from 1K to 1M tokens (all else as set). "
              "Above the dashed line the Mixture of Agents costs more. " + sweep_note(s, context_sweep(s)),
              alt="Log-log line chart of MoA-to-K3 cost ratios against prompt length.", key="moa_sweep")

st.subheader("What one decode step reads")
ui.vega_chart(step_spec(step_breakdown(s), st.context.theme.type),
              f"At the bandwidth limit a step takes bytes / bandwidth ({bw:g} TB/s). K3 reads only its active weights, "
              "routed experts at 4.25 bits; a dense agent reads all of its weights but the embedding table every step. "
              "The cache term grows with the context.",
              alt="Stacked bars of bytes read per decode step by K3 and by one agent.", key="moa_step")

st.subheader("Assumptions of the cost model")
st.markdown("\n".join(f"- {a}" for a in assumptions(s)))

st.subheader("The comparison in words, tied to the numbers")
st.markdown(md_table(qualitative(s, table, k3, moa)))
