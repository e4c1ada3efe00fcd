"""Model card: how the live tiny K3 was trained, what it learned, and what it is not."""
import streamlit as st

from app import state, ui
from app.balance import LIVE_TARGET
from app.charts.model_card import bias_spec, training_spec
from app.live import live
from app.model_card import (
    PROBLEMS,
    balanced_floor,
    config_table,
    corpus_parts,
    held_out_summary,
    kept_and_shrunk,
    load_json,
    next_token_reading,
    next_token_table,
    report_eq,
    train_log,
    training_phases,
    unwrapped_from_step,
)
from model.config import K3Config

TINY = K3Config.tiny()
SCALE = kept_and_shrunk()           # what the live instance keeps of K3 and what it shrinks, from the configs
# how the shipped instance balanced during training, for a card written before runs recorded it
QB_WINDOW = ("Quantile Balancing after every step from the routing of the last 3 batches (this run's choice; "
             "`python -m model.train` now uses one step's whole batch, K3 report Eq. 14, sec 2.3.3)")

view = state.page()
ui.page_header(
    "Model card: the live tiny K3",
    "Every page drives a **tiny live instance of K3's full architecture**: 93 layers (69 KDA + 24 gated "
    "MLA), 896 experts with 16 routed per token plus 2 shared, Block AttnRes in blocks of 12, with "
    f"{SCALE['short']}. It was trained here, on the CPU, on the documentation and code that ship with "
    "Python. **It is not Kimi K3's weights** and knows nothing K3 knows.",
    "compare the validation loss with the unigram baseline, then compare how even the expert loads are on "
    "held-out text and on training text.",
)
lv = live()
card, ev, log = load_json("k3_tiny.json"), load_json("k3_tiny_eval.json"), train_log()
# tokens per training step, and the minutes of the whole run (a resumed run's card sums its parts)
STEP_TOKENS = (card or {}).get("batch", 8) * (card or {}).get("seq_len", 128)
MINUTES = (card or {}).get("train_minutes", (card or {}).get("train_minutes_this_run", "?"))
# a continued instance (model.train --init-from) trained in phases, told one by one
PHASES = training_phases(card) if card else None
UNWRAPPED_FROM = unwrapped_from_step(card) if card else None

st.subheader("What it was trained on")
if card:
    data = card.get("data", {})
    cols = st.columns(4)
    cols[0].metric("Training tokens in the corpus", f"{data.get('train_tokens', 0):,}")
    cols[1].metric("Tokens seen in training", f"{card.get('tokens_seen', 0):,}")
    cols[2].metric("Optimiser steps", f"{card.get('steps', 0):,}")
    cols[3].metric("Checkpoint", f"{card.get('bytes', 0) / 1e6:.1f} MB")
    parts = corpus_parts(data)
    st.markdown(
        (f"- **Data**: {parts}, " if parts else
         "- **Data**: docstrings and reference-manual topics of the CPython 3.11 "
         "standard library, plus part of its source code, ") +
        f"cut at blank lines into "
        f"{data.get('documents', 0):,} pieces of about 3,000 characters; every 12th piece is held out for "
        f"validation ({data.get('val_documents', 0):,} pieces, {data.get('val_tokens', 0):,} tokens), so "
        f"held-out text has the training mix; "
        f"{data.get('train_chars', 0):,} characters for training. "
        f"Licence: {card.get('corpus_licence', 'PSF')}.\n"
        f"- **Tokenizer**: {card.get('tokenizer', '')}, trained by `python -m model.tokenizer` on the same "
        "training split; any Unicode text encodes (unknown characters fall back to bytes).\n"
        f"- **Training**: `python -m model.train`: {card.get('steps', 0):,} steps of {card.get('batch')} x "
        f"{card.get('seq_len')} tokens in {MINUTES} minutes on "
        f"{card.get('hardware', '?')}, AdamW"
        + (f" (peak learning rate {card.get('lr')})" if not PHASES else "")
        + f", {report_eq(card.get('balancing', QB_WINDOW))}, and routed experts quantised to MXFP4 "
        f"with MXFP8 activations from step {card.get('quant_from_step', 0):,} on, trained through the rounding with "
        "a straight-through estimator: this quantisation-aware pre-training is this project's choice (K3 trains "
        "with quantisation only in post-training, SFT and RL, K3 report section 4.1, and names no estimator)"
        + (f"; in {PHASES}.\n" if PHASES else f", seed {card.get('seed')}.\n")
        + f"- **Checkpoint**: `assets/{card.get('file')}`, routed experts packed as real MXFP4 (4-bit codes two "
        f"per byte plus one power-of-two scale byte per 32 values), everything else bf16; SHA-256 "
        f"`{card.get('sha256', '')[:16]}…` checked on every load (loaded in "
        f"{getattr(lv.model, 'load_seconds', 0):.1f} s here).")
    up = card.get("format_upgrade")
    layout = ("- **Layout**: each routed expert is stored [out, in], as `nn.Linear` does, so an MXFP4 block of 32 "
              "runs along the input dimension as in the OCP MX spec and K3's checkpoint (a tiny row of 16 or 8 "
              "inputs is half or a quarter of a block)")
    if up:
        ce = up.get("held_out_cross_entropy", {})
        st.markdown(
            layout + ". This instance was trained with blocks along the output dimension; "
            "its trained weights were decoded, transposed and re-quantised in the new blocks, with no training "
            "(`python -m model.checkpoint --upgrade`)"
            + (f": held-out loss {ce['before']:.4f} before, {ce['after']:.4f} after (computed)." if ce else "."))
    else:
        st.markdown(layout + "; this instance was trained in that layout.")
    cal = card.get("balance_calibration")
    if cal:
        st.markdown(
            f"- **Balance calibration** (the last phase of `python -m model.train`; alone: `--calibrate-only`): "
            f"a training "
            f"step holds only {STEP_TOKENS:,} tokens, about "
            f"{STEP_TOKENS * 16 / 896:.0f} per expert, too few for a "
            f"stable quantile, so with every weight frozen Quantile Balancing re-set the biases from "
            f"{cal['tokens_per_update']:,} training tokens per update ({cal['passes']} passes; median layer's "
            f"max/mean load entering each pass: "
            f"{', '.join(f'{v:.2f}' for v in cal['median_max_mean_load_by_pass'])}). K3 updates its biases "
            "from batches of millions of tokens; this is the small-machine stand-in.")
else:
    st.info(PROBLEMS.get("k3_tiny.json", "No training card found (assets/k3_tiny.json)")
            + ": run `python -m model.train` or restore the file from git.")

st.subheader("Did it learn?")
if ev:
    tr, un = ev["trained"], ev["untrained"]
    hw = ev.get("held_out_windows")
    # the headline: windows over the whole held-out split (the training mix) where measured, else the
    # first contiguous held-out tokens (what earlier evaluation files hold)
    ce, ce_uni, ce_un = ((hw["trained"]["whole_split"]["cross_entropy"], hw["unigram"]["whole_split"],
                          hw["untrained"]["whole_split"]["cross_entropy"]) if hw else
                         (tr["cross_entropy"], ev["unigram_cross_entropy"], un["cross_entropy"]))
    cols = st.columns(4)
    cols[0].metric("Validation loss, trained", f"{ce:.2f}", delta=f"{ce - ce_uni:+.2f} vs unigram",
                   delta_color="inverse")
    cols[1].metric("Unigram baseline", f"{ce_uni:.2f}",
                   help="Cross-entropy of the held-out text under the training split's token frequencies.")
    cols[2].metric("Untrained (same seed)", f"{ce_un:.2f}",
                   help=f"Uniform guessing over {lv.tokenizer.vocab_size:,} pieces: {ev['uniform_cross_entropy']:.2f}")
    cols[3].metric("Class-expert information", f"{tr['class_expert_mi_bits']:.3f} bits",
                   delta=f"{tr['class_expert_mi_bits'] - un['class_expert_mi_bits']:+.3f} vs untrained",
                   help="Mutual information between a token's kind (word, digit, punctuation, whitespace, "
                        "Python keyword) and the experts it is routed to, mean over the 92 MoE layers.")
    summary = held_out_summary(ev)
    if summary:
        st.caption("Cross-entropy in nats per token on held-out text (lower is better). " + summary
                   + f" On the first {ev['held_out_tokens']:,} held-out tokens in a row (docstrings): "
                   f"{tr['cross_entropy']:.2f}.")
    else:
        st.caption(f"Cross-entropy in nats per token on {ev['held_out_tokens']:,} contiguous held-out tokens, "
                   "computed by `python -m model.evaluate` (lower is better).")
    hb, tb = ev.get("load_heldout_batch"), ev.get("load_training_batch")
    if hb and tb:
        floor = balanced_floor(hb["tokens"])
        cols = st.columns(4)
        cols[0].metric("Expert load, held-out batch", f"{hb['median_over_layers']:.2f}",
                       help="The busiest expert's token count over the mean count (1.00 is perfectly even), "
                            "in the median of the 92 MoE layers.")
        cols[1].metric("Worst layer", f"{hb['max_over_layers']:.2f}")
        cols[2].metric("Experts left without tokens", f"{hb['dead_experts']}", help="Over all 92 MoE layers.")
        cols[3].metric("Balanced router, same batch", f"{floor['median_layer']:.2f}",
                       help="Every token picking 16 experts at random: the load that sampling noise alone "
                            f"gives on {hb['tokens']:,} tokens (worst layer {floor['worst_layer']:.2f}; "
                            "computed, Monte Carlo).")
        st.caption(
            f"Expert load measured by `python -m model.evaluate` on a held-out batch of {hb['tokens']:,} tokens: "
            f"{hb['tokens'] // 128:,} windows of 128 tokens drawn across the held-out split, the way training "
            f"batches are drawn"
            + (", its prose unwrapped as in the second phase of training and in the calibration" if
               hb.get("unwrapped_prose") else "")
            + f", routed with the biases frozen as shipped (the project's own target: at most "
            f"{LIVE_TARGET:g}, no expert without tokens; the best any router can show on so many tokens is the "
            f"sampling floor {floor['median_layer']:.2f}; {sum(r <= LIVE_TARGET for r in hb.get('per_layer', []))} of "
            f"{len(hb.get('per_layer', []))} layers meet it). A batch of as many training-split "
            f"tokens: {tb['median_over_layers']:.2f} (median layer) and {tb['max_over_layers']:.2f} (worst).")
    tr_load, n_c = tr["max_mean_load"], ev["held_out_tokens"]
    floor_c = balanced_floor(n_c)
    st.caption(
        f"Balance depends on the traffic: on one contiguous stretch of {n_c:,} held-out tokens (a few "
        f"documents in a row, as written) the load is {tr_load['median_over_layers']:.2f} in the median layer and "
        f"{tr_load['max_over_layers']:.2f} in the worst, against {floor_c['median_layer']:.2f} and "
        f"{floor_c['worst_layer']:.2f} from sampling noise alone, and {tr['dead_experts']['total']} of the "
        f"{len(TINY.moe_layers) * TINY.n_routed_experts:,} layer-experts get no token. Experts specialise, so a few documents "
        "of one kind crowd the experts of that kind: Quantile Balancing evens the load of the mix of text "
        "it is set from, not of every stretch of text.")
    st.markdown("**Greedy continuations** (the model picks its most likely next token 40 times), from a "
                "prompt inside code and from the start of a docstring sentence:")
    ui.plain_blocks([g["prompt"] + g["text"] for g in ev.get("greedy_samples", [])], "greedy")
    if card:
        st.caption(f"A tiny model, trained for {MINUTES} minutes on {card.get('hardware', 'a CPU')}: expect "
                   "plausible Python-documentation texture, not sense.")
    nxt = ev.get("next_tokens")
    if nxt:
        st.markdown("**Its five most likely next tokens** (computed by `python -m model.evaluate`) after a "
                    "prose prompt and a code prompt:")
        ui.table(next_token_table(nxt))
        if all(entry.get("greedy") is not None for entry in nxt.values()):
            st.markdown("From the same two prompts, what it writes when it keeps taking its most likely token "
                        "(24 tokens, greedy):")
            ui.plain_blocks([entry["prompt"] + entry["greedy"] for entry in nxt.values()], "next")
        if card and card.get("data", {}).get("train_tokens"):
            epochs = card.get("tokens_seen", 0) / card["data"]["train_tokens"]
            st.caption(f"␣ is a space, ↵ a line break. This instance saw {epochs:.1f} passes over its training "
                       f"text; {next_token_reading(nxt)}.")
else:
    st.info(PROBLEMS.get("k3_tiny_eval.json", "No evaluation found (assets/k3_tiny_eval.json)")
            + ": run `python -m model.evaluate` or restore the file from git.")

if log is not None:
    st.subheader("Training curves")
    ui.vega_chart(training_spec(log, ev["unigram_cross_entropy"] if ev else None, theme_type=st.context.theme.type),
                  "Top: the loss falls below the unigram baseline (what counting tokens alone achieves). Bottom: "
                  f"the busiest expert's load over the mean, in the worst of the 92 layers, for each {STEP_TOKENS:,}-token "
                  f"training batch: with ~{STEP_TOKENS * 16 / 896:.0f} tokens per expert, sampling noise alone would put a "
                  f"perfectly balanced router at {balanced_floor(STEP_TOKENS)['worst_layer']:.1f} here, so read the trend, "
                  "not the level; "
                  "almost no expert is left without tokens. Shaded: the quantisation-aware phase."
                  + (f" From step {UNWRAPPED_FROM:,} on, the text's prose is unwrapped, so the "
                     "validation loss there is measured on the unwrapped held-out text (a step up where the "
                     "phases meet: the same pieces, tokenised differently)." if UNWRAPPED_FROM else ""),
                  alt="Training loss, validation loss and expert load balance per training step.", key="card_training")
    ui.vega_chart(bias_spec(log),
                  "How far apart the balancing biases of the experts sit: after every step QB sets them "
                  + ("from that step's whole batch (K3 report Eq. 14, sec 2.3.3)" if card and card.get("balancing") else
                     "from the routing of the last 3 batches (a window this run used, since one 1,024-token batch gives "
                     "each expert about 18 tokens; `python -m model.train` now takes one step's whole batch, K3 report "
                     "Eq. 14, sec 2.3.3)")
                  + ", with no learning rate; the balance calibration then re-sets them once more.",
                  alt="Spread of the balancing bias over training steps.", key="card_bias")

st.subheader("Its configuration beside Kimi K3's")
ui.table(config_table())
st.caption(SCALE["kept"] + " " + SCALE["shrunk"] + " The shrinking lets the whole model run on a 2-core CPU. "
           "'published' values come from the K3 report and config (the latent width 3,584 is published as "
           "`routed_expert_hidden_size` and also equals d/2); 'derived' follow from them. The report says MXFP8 for "
           "expert activations; the element type E4M3 is what K3's serving kernels take.")

st.subheader("What it is not")
st.markdown(
    "- Not Kimi K3's weights, nor trained on K3's data: its knowledge is a few megabytes of Python docs.\n"
    "- Not a measure of K3's quality: losses here say the tiny model learned, nothing about K3.\n"
    "- Its routing patterns are its own: they show *how* a 896-expert router behaves, not which experts "
    "K3 uses for what.")
