"""Model card: how the live tiny K3 was trained, what it learned, and what it is not."""
import streamlit as st

from app import ui
from app.charts.model_card import bias_figure, training_figure
from app.live import banner, live
from app.model_card import balanced_floor, config_table, load_json, train_log

ui.ignore_unknown_params()
ui.page_header(
    "Model card: the live tiny K3",
    "Every page drives a **tiny live instance of K3's full architecture**: 93 layers (69 KDA + 24 gated "
    "MLA), 896 experts with 16 routed per token plus 2 shared, Block AttnRes in blocks of 12, with only "
    "the widths shrunk. It was trained here, on the CPU, on the documentation and code that ship with "
    "Python. **It is not Kimi K3's weights** and knows nothing K3 knows.",
    "compare the validation loss with the unigram baseline, then compare how even the expert loads are on "
    "held-out text and on training text.",
)
lv = live()
banner(lv)
card, ev, log = load_json("k3_tiny.json"), load_json("k3_tiny_eval.json"), train_log()

st.subheader("What it was trained on")
if card:
    data = card.get("data", {})
    cols = st.columns(4)
    cols[0].metric("Training tokens in the corpus", f"{data.get('train_tokens', 0):,}")
    cols[1].metric("Tokens seen in training", f"{card.get('tokens_seen', 0):,}")
    cols[2].metric("Optimiser steps", f"{card.get('steps', 0):,}")
    cols[3].metric("Checkpoint", f"{card.get('bytes', 0) / 1e6:.1f} MB")
    st.markdown(
        f"- **Data**: docstrings and reference-manual topics of the CPython 3.11 "
        f"standard library, plus part of its source code ({data.get('documents', 0):,} documents, "
        f"{data.get('train_chars', 0):,} characters for training; every 50th document held out for "
        f"validation, {data.get('val_tokens', 0):,} tokens). Licence: {card.get('corpus_licence', 'PSF')}.\n"
        f"- **Tokenizer**: {card.get('tokenizer', '')}, trained by `python -m model.tokenizer` on the same "
        "training split; any Unicode text encodes (unknown characters fall back to bytes).\n"
        f"- **Training**: `python -m model.train`: {card.get('steps', 0):,} steps of {card.get('batch')} x "
        f"{card.get('seq_len')} tokens on {card.get('hardware', '?')}, AdamW (peak learning rate "
        f"{card.get('lr')}), Quantile Balancing after every step, and routed experts quantised to MXFP4 "
        f"with MXFP8 activations from step {card.get('quant_from_step', 0):,} on (quantisation-aware, as "
        f"K3), seed {card.get('seed')}.\n"
        f"- **Checkpoint**: `assets/{card.get('file')}`, routed experts packed as real MXFP4 (4-bit codes two "
        f"per byte plus one power-of-two scale byte per 32 values), everything else bf16; SHA-256 "
        f"`{card.get('sha256', '')[:16]}…` checked on every load (loaded in "
        f"{getattr(lv.model, 'load_seconds', 0):.1f} s here).")
    cal = card.get("balance_calibration")
    if cal:
        st.markdown(
            f"- **Balance calibration** (after training, `python -m model.train --calibrate-only`): a training "
            f"step holds only {card.get('batch', 8) * card.get('seq_len', 128):,} tokens, about "
            f"{card.get('batch', 8) * card.get('seq_len', 128) * 16 / 896:.0f} per expert, too few for a "
            f"stable quantile, so with every weight frozen Quantile Balancing re-set the biases from "
            f"{cal['tokens_per_update']:,} training tokens per update ({cal['passes']} passes; median layer's "
            f"max/mean load entering each pass: "
            f"{', '.join(f'{v:.2f}' for v in cal['median_max_mean_load_by_pass'])}). K3 updates its biases "
            "from batches of millions of tokens; this is the small-machine stand-in.")
else:
    st.info("No training card found (assets/k3_tiny.json): run `python -m model.train`.")

st.subheader("Did it learn?")
if ev:
    tr, un = ev["trained"], ev["untrained"]
    cols = st.columns(4)
    cols[0].metric("Validation loss, trained", f"{tr['cross_entropy']:.2f}",
                   delta=f"{tr['cross_entropy'] - ev['unigram_cross_entropy']:+.2f} vs unigram",
                   delta_color="inverse")
    cols[1].metric("Unigram baseline", f"{ev['unigram_cross_entropy']:.2f}",
                   help="Cross-entropy of the held-out text under the training split's token frequencies.")
    cols[2].metric("Untrained (same seed)", f"{un['cross_entropy']:.2f}",
                   help=f"Uniform guessing over {lv.tokenizer.vocab_size:,} pieces: {ev['uniform_cross_entropy']:.2f}")
    cols[3].metric("Class-expert information", f"{tr['class_expert_mi_bits']:.3f} bits",
                   delta=f"{tr['class_expert_mi_bits'] - un['class_expert_mi_bits']:+.3f} vs untrained",
                   help="Mutual information between a token's kind (word, digit, punctuation, whitespace, "
                        "Python keyword) and the experts it is routed to, mean over the 92 MoE layers.")
    floor = balanced_floor(ev["held_out_tokens"])
    st.caption(
        f"Computed by `python -m model.evaluate` on {ev['held_out_tokens']:,} held-out tokens (nats per token). "
        f"Expert load on that held-out text: max/mean {tr['max_mean_load']['median_over_layers']:.2f} in the "
        f"median layer, {tr['max_mean_load']['max_over_layers']:.2f} in the worst; experts that received no "
        f"token: {tr['dead_experts']['total']} over all 92 layers. For scale: a perfectly balanced router "
        f"(every token picking 16 experts at random) would show {floor['median_layer']:.2f} and "
        f"{floor['worst_layer']:.2f} on that many tokens, from sampling noise alone (computed, Monte Carlo).")
    hw, tw = ev.get("load_heldout_windows"), ev.get("load_training_windows")
    if hw and tw:
        st.caption(
            f"Balance depends on the traffic. On {hw['tokens']:,} tokens in windows spread over the held-out "
            f"documents: max/mean {hw['median_over_layers']:.2f} (median layer), {hw['max_over_layers']:.2f} "
            f"(worst). On as many tokens of training-split windows, the mix of text the biases were balanced "
            f"for: {tw['median_over_layers']:.2f} and {tw['max_over_layers']:.2f}. The held-out split is only "
            f"{card.get('data', {}).get('val_documents', '?') if card else '?'} documents, so its mix of code, "
            "prose and punctuation differs from training, and experts that specialise in what it has more of "
            "get more of it: Quantile Balancing evens the load of the traffic it is fed, not of every text.")
    st.markdown("**A greedy continuation** (the model picks its most likely next token 40 times):")
    st.code(ev["sample_prompt"] + ev["greedy_sample"], language=None)
    st.caption("A tiny model trained for about an hour on a CPU: expect plausible Python-documentation "
               "texture, not sense.")
else:
    st.info("No evaluation found (assets/k3_tiny_eval.json): run `python -m model.evaluate`.")

if log is not None:
    st.subheader("Training curves")
    ui.chart(training_figure(log, ev["unigram_cross_entropy"] if ev else None),
             "Top: the loss falls below the unigram baseline (what counting tokens alone achieves). Bottom: "
             "the busiest expert's load over the mean, in the worst of the 92 layers, for each 1,024-token "
             f"training batch: with ~18 tokens per expert, sampling noise alone would put a perfectly balanced "
             f"router at {balanced_floor(1024)['worst_layer']:.1f} here, so read the trend, not the level; "
             "almost no expert is left without tokens. Shaded: the quantisation-aware phase.",
             alt="Training loss, validation loss and expert load balance per training step.")
    ui.chart(bias_figure(log),
             "How far apart the balancing biases of the experts sit: QB sets them from the previous "
             "batch's routing, with no learning rate.",
             alt="Spread of the balancing bias over training steps.")

st.subheader("Its configuration beside Kimi K3's")
st.dataframe(config_table(), hide_index=True, width="stretch")
st.caption("Counts and ratios are K3's; widths are shrunk so that the whole model runs on a 2-core CPU. "
           "'published' values come from the K3 report and config; 'derived' follow from them.")

st.subheader("What it is not")
st.markdown(
    "- Not Kimi K3's weights, nor trained on K3's data: its knowledge is a few megabytes of Python docs.\n"
    "- Not a measure of K3's quality: losses here say the tiny model learned, nothing about K3.\n"
    "- Its routing patterns are its own: they show *how* a 896-expert router behaves, not which experts "
    "K3 uses for what.")
