"""The glossary: short, precise definitions of the terms the pages use, each tied to the page that shows
it on the live model. Facts follow docs/ARCHITECTURE.md (sections named in comments) and
docs/REFERENCES.md; every number in a definition is computed from the config, the accounting or the
format tables when this module loads, never typed in.

Text is markdown the page renders as is: no `$` (Streamlit would read LaTeX), no HTML.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from model import memory
from model.accounting import count_params
from model.config import BETA_GATE, BETA_UP, K3Config
from model.depth_counts import vectors_alive
from model.formats import E2M1_GRID, FORMATS, bits_per_value

MAX_QUERY = 200   # a search box longer than this is cut; no definition is that long a phrase


@dataclass(frozen=True)
class Term:
    term: str
    slug: str              # URL-safe id: ?term=<slug> and #<slug> on the glossary page
    short: str             # one or two sentences
    more: str              # up to three sentences more, or ""
    page: str | None       # url_path of the page that shows it live
    source: str = ""       # where its equation is published: "K3 report Eq. N, sec x", or the paper / spec


# ---- the numbers the definitions quote, from one source each ------------------------------------------
_K3, _K2, _TINY = K3Config.full(), K3Config.kimi_k2(), K3Config.tiny()
_P = count_params(_K3)
_ROUTED_SHARE = _P.breakdown["routed experts"] / _P.total
_N_BLOCKS = len(_K3.attnres_blocks)
_BLOCK_SIZES = sorted(set(_K3.attnres_blocks), reverse=True)
_SWISH_MIN_AT = min((x / 1000 for x in range(-3000, 0)), key=lambda g: g / (1 + math.exp(-g)))
_SWISH_MIN = _SWISH_MIN_AT / (1 + math.exp(-_SWISH_MIN_AT))
_MXFP4_BITS, _MXFP8_BITS = bits_per_value("e2m1"), bits_per_value("e4m3")
_E4M3_MAX, _CAP = FORMATS["e4m3"].max, BETA_GATE * BETA_UP
_MLA_TOK, _MHA_TOK = memory.mla_values_per_token(_K3), memory.mha_values_per_token(_K3)


def _n(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:g}"


TERMS: tuple[Term, ...] = (
    # ---- text and the sparse model as a whole -------------------------------------------------------
    Term("Token", "token",
         "A piece of text (a word, part of a word, a punctuation mark or a byte) that the model reads and "
         "predicts one at a time. Every routing choice in K3 is made per token, in every MoE layer.",
         f"K3's vocabulary has {_K3.vocab_size:,} tokens; the live tiny model uses the project's own "
         f"{_TINY.vocab_size:,}-piece vocabulary.",
         "routing"),
    Term("Tokenizer", "tokenizer",
         "The fixed procedure that splits text into tokens and maps each one to an integer id; the model only "
         "ever sees the ids.",
         f"The live model uses a byte-level BPE tokenizer with {_TINY.vocab_size:,} pieces, trained on the live model's training "
         "text, so any Unicode text encodes (characters it has no piece for fall back to their UTF-8 bytes). It "
         "is not K3's tokenizer.",
         "model-card"),
    Term("Mixture of experts (MoE)", "moe",
         "A layer that holds many feed-forward networks (experts) and runs only a few of them for each token, "
         "chosen by a router, so the parameter count can grow much faster than the compute per token.",
         f"In K3, layers {_K3.moe_layers[0]} to {_K3.moe_layers[-1]} are MoE layers; layer 0 has one dense "
         "feed-forward network.",
         "routing"),
    Term("Expert", "expert",
         "One small feed-forward network (a SiTU-GLU MLP) inside an MoE layer. A layer has many experts, and "
         "each token passes through only the few the router picks plus the shared ones.",
         f"A K3 routed expert works in the latent space: {_K3.expert_width:,} → {_K3.expert_hidden:,} → "
         f"{_K3.expert_width:,} values at full scale.",
         "routing"),
    Term("Routed expert", "routed-expert",
         f"One of the {_K3.n_routed_experts} experts of a K3 MoE layer that a token visits only if the router ranks "
         f"it among its top {_K3.top_k}.",
         f"Routed experts hold about {_ROUTED_SHARE:.0%} of K3's {_P.total / 1e12:.2f}T parameters and are the part "
         "stored in MXFP4.",
         "routing"),
    Term("Shared expert", "shared-expert",
         f"An expert that every token passes through, whatever the router decides. K3 has {_K3.n_shared_experts} "
         f"per MoE layer, each with hidden width {_K3.shared_hidden:,}, and they read the full-width token rather "
         "than its latent.",
         "Why: what nearly every token needs (frequent words, common syntax) would otherwise be learned again by "
         "many routed experts; one always-on path holds it once and leaves the routed experts free to specialise "
         "(the motivation DeepSeekMoE, arXiv 2401.06066, gave; DeepSeek-V3, Kimi K2 and K3 follow it). "
         f"Together K3's act as one MLP of hidden width {_K3.n_shared_experts * _K3.shared_hidden:,}.",
         "layer"),
    Term("Router", "router",
         f"The linear layer and sigmoid that score every routed expert for a token: {_K3.n_routed_experts} scores "
         f"in K3, computed in higher precision (fp32 here) from the full-width token. The {_K3.top_k} highest "
         "scores after adding the balancing bias decide where the token goes.",
         "The chosen experts' outputs are weighted by their raw scores divided by the sum of the chosen raw "
         "scores, so the bias changes which experts are picked, never how much each one counts. The router is "
         "trained by the language-model loss through those weights: a chosen expert that helped gets a higher "
         "score next time. The pick itself has no gradient, and the bias is set by Quantile Balancing, not learned.",
         "routing", source="K3 report Eq. 13, sec 2.3.3"),
    Term("Top-k", "top-k",
         f"The number of routed experts each token is sent to in each MoE layer: k = {_K3.top_k} in K3, "
         f"{_K2.top_k} in Kimi K2.",
         "Raising k raises the compute per token roughly in proportion to the routed part; the routing page "
         "lets you change it and re-run the live model.",
         "routing"),
    Term("Sparsity", "sparsity",
         f"Routed experts available per layer divided by routed experts used per token: {_K3.n_routed_experts} / "
         f"{_K3.top_k} = {_K3.sparsity:g} in K3 ({_K2.n_routed_experts} / {_K2.top_k} = {_K2.sparsity:g} in K2).",
         "It counts experts, not parameters: with the shared experts, attention and the output head always "
         f"running, about {_P.active_share:.1%} of K3's parameters are active per token.",
         "overview", source="K3 report sec 2.3 (896 / 16 = 56, in its text; no numbered equation)"),
    Term("Active parameters", "active-parameters",
         "The parameters used to compute one token: everything except the routed experts it did not pick and "
         f"the embedding table (of which only the token's own row is read). For K3, about {_P.active / 1e9:.1f}B "
         f"of {_P.total / 1e12:.2f}T.",
         "Compute per token follows the active count; the memory needed to hold the model follows the total.",
         "overview"),
    Term("Stable LatentMoE", "stable-latentmoe",
         f"K3's MoE layer: a sigmoid router on the full-width token, {_K3.n_routed_experts} routed SiTU-GLU experts working in a "
         "latent of half the width, an RMSNorm before projecting their mix back up, and 2 full-width shared "
         "experts.",
         "\"Stable\" names three components for two failure modes (K3 report sec 2.3): at K3's scale the routed "
         "path, a chain of nearly four matrix products, produces exploding internal activations, which the RMSNorm "
         "before the up-projection and SiTU-GLU suppress; and balancing nearly a thousand experts is hard, which "
         "Quantile Balancing answers. The latent design is NVIDIA's LatentMoE (arXiv 2601.18089); the stability "
         "changes are K3's own.",
         "routing", source="K3 report Eq. 11, sec 2.3"),
    Term("Latent (LatentMoE latent width)", "latent",
         f"In K3's MoE layers one shared projection maps the token from width d = {_K3.d_model:,} down to a latent "
         f"of width l = d/2 = {_K3.expert_width:,} (published in K3's config); the routed experts read and write only "
         "that latent, and their weighted sum is normalised and projected back up to d.",
         f"Tokens cross devices at the latent width, so a token's {_K3.top_k} experts move {_K3.top_k} × "
         f"{_K3.expert_width:,} = {_K3.top_k * _K3.expert_width:,} values, the same as K2's {_K2.top_k} × "
         f"{_K2.expert_width:,}. The router and the shared experts still read the full-width token.",
         "parallel", source="K3 report Eq. 11, sec 2.3"),
    Term("Layer (of K3)", "layer",
         f"One of K3's {_K3.num_layers} layers: a read over depth (AttnRes), RMSNorm, attention (Kimi Delta "
         f"Attention in {_K3.n_kda} layers, gated MLA in {_K3.n_mla}), a second read, RMSNorm, and a feed-forward "
         "network: dense in layer 0, Stable LatentMoE in every later layer.",
         "There is no h + f(h): both module outputs are added to the running sum of the layer's AttnRes block, "
         "which later reads weigh as one source. The Inside-one-layer page follows one token through every step.",
         "layer"),
    Term("RMSNorm", "rmsnorm",
         "Root-mean-square normalisation: divide a vector by the root of the mean of its squared entries (plus "
         f"a small epsilon, 1e{round(math.log10(_K3.norm_eps))} in K3) and multiply by a learned gain per channel.",
         "K3 applies it before every attention and feed-forward module, before the output head, and in "
         "LatentMoE before the up-projection. AttnRes uses a version without gain to compare its sources.",
         None,
         source=("Zhang and Sennrich, arXiv 1910.07467; in K3 inside K3 report Eq. 9 (its keys, sec 2.2), Eq. 6 (sec "
                 "2.1.1) and Eq. 11 (sec 2.3)")),
    # ---- inside an expert -------------------------------------------------------------------------------
    Term("SiTU-GLU", "situ-glu",
         f"K3's gated activation: [{_n(BETA_GATE)}·tanh(g/{_n(BETA_GATE)})·sigmoid(g)] × "
         f"[{_n(BETA_UP)}·tanh(u/{_n(BETA_UP)})], where g and u are two linear projections of the input. Both factors "
         f"are bounded, so every output value stays within ±{_n(_CAP)}.",
         "Near zero it matches SwiGLU to first order and approaches it as the caps grow. K3 uses it in every "
         "feed-forward network: the dense layer 0, the shared and the routed experts.",
         "situ-glu", source="K3 report Eq. 12, sec 2.3.2"),
    Term("SwiGLU", "swiglu",
         "The gated activation of most current language models, Kimi K2 included: g·sigmoid(g) × u, the Swish "
         "of one projection times another. It has no upper bound, so large inputs give large outputs.",
         (f"Its gate factor dips to about {_SWISH_MIN:.2f} (at g ≈ {_SWISH_MIN_AT:.2f})").replace("-", "−")
         + " and grows without limit for positive g.",
         "situ-glu",
         source=("Shazeer, arXiv 2002.05202; K3 report sec 2.3.2 and Fig. 4 set it beside SiTU-GLU (no numbered "
                 "equation of its own)")),
    # ---- attention ----------------------------------------------------------------------------------------
    Term("KDA (Kimi Delta Attention)", "kda",
         f"A linear-attention layer from Kimi Linear that keeps a fixed-size state per head ({_K3.kda_head_dim} × "
         f"{_K3.kda_head_dim} values in K3) instead of a cache of past tokens, updated with a gated delta rule. "
         f"{_K3.n_kda} of K3's {_K3.num_layers} layers use it.",
         f"Before each write, every key channel of the state decays by its own learned factor between "
         f"e^{_n(_K3.kda_gate_bound).replace('-', '−')} and 1, chosen per token. Its memory does not grow with the "
         f"context: per layer, the state plus the last {_K3.kda_conv - 1} inputs of a short convolution.",
         "attention", source="K3 report Eq. 1–6, sec 2.1.1 (Kimi Linear, arXiv 2510.26692)"),
    Term("Delta rule", "delta-rule",
         "A state update that first predicts the current token's value from the state (Sᵀk), then writes only "
         "the error: S ← S + k ⊗ β(v − Sᵀk), with β in (0, 1) a learned write strength per head and token.",
         "Writing the error instead of the value lets a new value replace an old one stored under a similar key. "
         "In KDA the state is decayed first, and the query reads the state after the write.",
         "attention", source="K3 report Eq. 1, sec 2.1.1"),
    Term("Chunked (UT) form", "chunked-form",
         "A way to compute the delta rule for a chunk of tokens at once with matrix products instead of a "
         "token-by-token loop: one triangular solve per chunk (the UT transform) folds the chunk's sequential "
         "writes into a single batched update.",
         "It gives the same outputs and final state as the recurrent loop (to about 1e-12 in float64). The live "
         "model reads a prompt with the chunked form and generates token by token with the recurrent one.",
         "attention", source="K3 report Eq. 3–4, sec 2.1.1"),
    Term("MLA (gated latent attention)", "mla",
         "Multi-head Latent Attention, from DeepSeek-V2: each token's keys and values are rebuilt from one small "
         "latent vector, so only that latent is cached. K3 adds a sigmoid output gate per channel and uses it in "
         f"{_K3.n_mla} of its {_K3.num_layers} layers (every fourth layer and the last).",
         f"At K3 scale a token costs {_K3.kv_lora_rank} latent + {_K3.qk_rope_dim} shared key values = {_MLA_TOK} "
         f"cached values per MLA layer, against {_MHA_TOK:,} for standard multi-head attention with the same "
         f"{_K3.mla_heads} heads of {_K3.v_head_dim}.",
         "attention", source="K3 report Eq. 7, sec 2.1.2, for the gate (MLA itself: DeepSeek-V2, arXiv 2405.04434)"),
    Term("Output gate (gated MLA)", "output-gate",
         "In K3's MLA layers, a sigmoid of a linear map of the layer's input, one value in (0, 1) per channel, "
         "multiplies the attention output before the output projection.",
         "It lets each token turn attention channels down, for instance when nothing earlier in the text is worth "
         "reading, instead of always adding the softmax-weighted mix. Kimi K2's MLA has no such gate. Because the "
         "gate sits between the value and output projections, they cannot be folded into one matrix.",
         "layer", source="K3 report Eq. 7, sec 2.1.2 (KDA's own output gate: K3 report Eq. 6, sec 2.1.1)"),
    Term("KV cache / latent cache", "kv-cache",
         "The keys and values of past tokens that a softmax-attention layer keeps so it need not recompute them "
         f"while generating; it grows by one entry per token. MLA's latent cache stores only the {_MLA_TOK}-value "
         "latent per token and layer.",
         f"In K3 only the {_K3.n_mla} MLA layers keep a per-token cache; the {_K3.n_kda} KDA layers keep a "
         "fixed-size state.",
         "attention"),
    Term("NoPE (no positional encoding)", "nope",
         "K3 adds no position signal anywhere: no rotary or learned positions, in any layer. Word order reaches "
         "the model through the causal mask and the order-dependent KDA layers.",
         f"MLA still keeps its {_K3.qk_rope_dim} \"rope\" key dimensions (never rotated) in the score and the cache.",
         "attention"),
    # ---- depth --------------------------------------------------------------------------------------------
    Term("AttnRes (Full and Block)", "attnres",
         "Attention Residuals: instead of adding each module's output to a running sum (h + f(h)), the input of "
         "every module is a softmax-weighted mix of earlier outputs, attended over depth with one learned query "
         "per read. Full AttnRes keeps each module's output as its own source; Block AttnRes sums the outputs "
         "within blocks of layers and attends over the block sums.",
         f"With K3's blocks of {_K3.attnres_block_size} layers a read sees at most "
         f"{vectors_alive(_K3.num_layers, _K3.attnres_block_size)} sources (embedding, {_N_BLOCKS - 1} sealed blocks, "
         f"the current partial block), where Full would keep {vectors_alive(_K3.num_layers, None)} vectors per token. "
         "With all queries at zero the weights are uniform, which computes the same as a standard Pre-Norm residual.",
         "attnres", source="K3 report Eq. 8–10, sec 2.2 (Attention Residuals preprint, arXiv 2603.15031)"),
    Term("Block (AttnRes)", "block",
         "A run of consecutive layers whose module outputs Block AttnRes adds into one source. K3 uses blocks of "
         f"{_K3.attnres_block_size} layers: its {_K3.num_layers} layers form {_N_BLOCKS} blocks "
         f"({_K3.attnres_blocks.count(_BLOCK_SIZES[0])} of {_BLOCK_SIZES[0]} and one of {_BLOCK_SIZES[-1]}).",
         "Not to be confused with the block of 32 values that shares a scale in MXFP4.",
         "attnres", source="K3 report Eq. 10, sec 2.2"),
    # ---- load balancing -----------------------------------------------------------------------------------
    Term("Load (max/mean)", "load",
         "An expert's load is the number of tokens routed to it in a batch. Max/mean divides the busiest "
         "expert's load by the average, m·k/n for m tokens, top-k and n experts: 1 is perfect balance.",
         "Under expert parallelism the device holding the busiest experts sets the pace, and an expert that gets "
         "no tokens (a dead expert) wastes its parameters.",
         "balance", source="K3 report sec 2.3.3 (the target load q = mk/n, in its text)"),
    Term("Balancing bias", "balancing-bias",
         "A number per expert added to the router's scores only to choose the top-k: raising it sends the "
         "expert more tokens, lowering it fewer. The output weights use the raw scores, so the bias never "
         "changes how much a chosen expert counts.",
         "It is set by a balancing rule (Quantile Balancing in K3, the sign rule in DeepSeek-V3 and K2), not by "
         "gradients, so it is not counted as a parameter, and it is frozen at inference.",
         "balance", source="K3 report Eq. 13, sec 2.3.3"),
    Term("Quantile Balancing (QB)", "qb",
         "K3's rule for the balancing bias: after each batch, every expert's bias becomes the value that would "
         "have given it exactly its fair share of m·k/n tokens (a quantile of its margins: score minus each "
         "token's cutoff), then all biases are shifted to mean 0.",
         "It jumps straight to the bias that would have balanced the batches it was set from, so it needs no step "
         f"size and settles within a few steps even with K3's {_K3.n_routed_experts} experts. The new bias applies "
         "from the next batch; counting margins in a histogram (a few hundred bins per expert in K3, about a thousand "
         "here) lets the quantile be added up across micro-batches and devices.",
         "balance", source="K3 report Eq. 14, sec 2.3.3"),
    Term("Sign rule", "sign-rule",
         "DeepSeek-V3's bias update: after each batch, b_j ← b_j + γ·sign(mean load − load_j), with γ = 0.001: "
         "a fixed small step toward balance for every expert.",
         "It is a SignSGD step on the same objective that Quantile Balancing minimises exactly (K3 report App. C), so "
         "with many "
         "experts it needs many steps, and a large γ overshoots.",
         "balance", source="DeepSeek-V3, arXiv 2412.19437; K3 report sec 2.3.3 writes it in its text (no number)"),
    # ---- precision ----------------------------------------------------------------------------------------
    Term("MXFP4", "mxfp4",
         "The OCP Microscaling format with 4-bit E2M1 elements: each block of 32 values shares one 8-bit "
         f"power-of-two scale (E8M0), so a value costs 4 + 8/32 = {_MXFP4_BITS:g} bits. K3 stores its routed-expert "
         "weights in MXFP4.",
         "Attention, the latent projections, the shared experts and the router stay in higher precision. K3 "
         "trains with the rounding in place only after pre-training, in SFT and RL (K3 report, section 4.1), and "
         "does not say which gradient estimator it uses. The live model's straight-through estimator in the last "
         "phase of pre-training is this project's choice.",
         "quantization", source="OCP Microscaling Formats spec v1.0; K3's use: K3 report sec 4.1.4"),
    Term("MXFP8", "mxfp8",
         "The same microscaling scheme with 8-bit elements and one E8M0 scale per block of 32: "
         f"{_MXFP8_BITS:g} bits per value with E4M3 elements. K3 uses MXFP8 for the activations inside its experts.",
         "The OCP spec defines E4M3 and E5M2 elements. The K3 report says only MXFP8; E4M3 is the element type "
         "K3's serving kernels take, and the one this app uses.",
         "quantization", source="OCP Microscaling Formats spec v1.0; K3's use: K3 report sec 4.1.4"),
    Term("E2M1", "e2m1",
         "A 4-bit floating-point element with 1 sign, 2 exponent and 1 mantissa bit. It can hold only "
         "±{" + ", ".join(_n(v) for v in E2M1_GRID) + "}; values are rounded to the nearest, ties to the even code.",
         f"So 0.75 rounds to 1, 1.25 to 1, 2.5 to 2 and 5 to 4; anything beyond {_n(FORMATS['e2m1'].max)} is clamped "
         f"to {_n(FORMATS['e2m1'].max)}.",
         "quantization", source="OCP Microscaling Formats spec v1.0"),
    Term("E4M3", "e4m3",
         "An 8-bit floating-point element with 1 sign, 4 exponent and 3 mantissa bits; its largest finite "
         f"value is {_n(_E4M3_MAX)}.",
         f"That limit binds only without a scale: in MXFP8 each block of 32 gets its own power-of-two scale, so "
         f"large values are scaled into range. SiTU-GLU's cap of {_n(_CAP)} bounds the value itself; SwiGLU's "
         "output has no cap.",
         "quantization", source="OCP Microscaling Formats spec v1.0"),
    Term("E8M0 scale", "e8m0",
         "The shared scale of an MX block: 8 exponent bits and no sign or mantissa, so it is always a power of "
         "two, 2^(E−127) for E from 0 to 254. It is set from the block's largest magnitude.",
         f"X = 2^(floor(log2 amax) − emax), with emax = {FORMATS['e2m1'].emax} for E2M1 and {FORMATS['e4m3'].emax} "
         "for E4M3, puts the block's largest value "
         "near the top of the element grid; each element is stored as X times a grid value.",
         "quantization", source="OCP Microscaling Formats spec v1.0"),
    Term("Block of 32", "block-of-32",
         "In the MX formats, 32 consecutive values (along the input dimension of a weight matrix) that share "
         "one E8M0 scale, so one large value coarsens only its own block.",
         "The live model stores each expert's matrix [out, in] and cuts blocks along its rows, so a block "
         "runs along the input dimension; its rows (16 or 8 inputs) are shorter than 32, so one block holds "
         "two or four consecutive rows. Not to be confused with an AttnRes block of layers.",
         "quantization", source="OCP Microscaling Formats spec v1.0"),
    # ---- devices ------------------------------------------------------------------------------------------
    Term("Expert parallelism", "expert-parallelism",
         f"Spreading a layer's experts over devices (for example {_K3.n_routed_experts} over 8 devices would be "
         f"{_K3.n_routed_experts // 8} each) and sending each token to the devices that hold its chosen experts, "
         "instead of copying every expert onto every device.",
         f"A token's {_K3.top_k} experts can sit on any of the devices, so how many devices one token needs "
         "depends on the routing. The K3 report does not say how many devices K3's experts are spread over.",
         "parallel"),
    Term("All-to-all", "all-to-all",
         "A collective exchange in which every device sends a different piece of data to every other device. "
         "An expert-parallel MoE layer runs two: one to dispatch tokens to their experts' devices and one to "
         "bring the results back.",
         "The bytes it moves per token grow with top-k times the width sent, which is why K3 dispatches at the "
         "latent width.",
         "parallel"),
    # ---- beyond one forward pass --------------------------------------------------------------------------
    Term("MTP (multi-token prediction)", "mtp",
         "An extra module, as in DeepSeek-V3, trained to predict the token after next from the main model's "
         "hidden state; it helps training and can draft tokens to speed up generation.",
         "Kimi K2's published 1.04T total matches our count of its main model plus one MTP layer, which is our "
         "inference, not a published statement. The K3 report's Table 1 lists an MTP layer for K3 too, yet its "
         "2.78T matches our count without one; the Overview gives the numbers.",
         "overview"),
    Term("Mixture of Agents (MoA)", "mixture-of-agents",
         "Asking several whole language models (agents) the same question and merging their answers, often "
         "with one more model. Unlike a mixture of experts, every agent runs in full for every token and keeps "
         "its own cache.",
         "The choice of agents is not learned by gradient inside one network, and the merge waits for the "
         "slowest agent.",
         "moe-vs-moa"),
)

_BY_SLUG = {t.slug: t for t in TERMS}
_SEPARATORS = re.compile(r"[\s\-_/]+")


def _norm(text: str) -> str:
    """Casefolded, with hyphens, underscores and slashes read as spaces ("top k" finds "Top-k")."""
    return _SEPARATORS.sub(" ", text.casefold()).strip()


_HAYSTACK = {t.slug: _norm(" ".join((t.term, t.slug, t.short, t.more))) for t in TERMS}


def search(query: str) -> list[Term]:
    """Terms whose name or text contains every word of the query, names that match first.
    An empty query gives every term; any string is safe (it is only ever compared, never parsed)."""
    q = _norm(str(query)[:MAX_QUERY]) if query is not None else ""
    if not q:
        return list(TERMS)
    words = q.split(" ")
    hits = [t for t in TERMS if all(w in _HAYSTACK[t.slug] for w in words)]

    def rank(t: Term) -> int:
        name = _norm(t.term)
        if q in (name, _norm(t.slug)):
            return 0
        return 1 if q in name else 2
    return sorted(hits, key=rank)      # stable: the glossary's own order within each rank


def by_slug(slug: str) -> Term | None:
    if not isinstance(slug, str):
        return None
    return _BY_SLUG.get(slug.strip().casefold())
