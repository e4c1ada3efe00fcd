"""The glossary: short, precise definitions of the terms the pages use, each tied to the page that shows
it on the live model. Facts follow ARCHITECTURE.md (sections named in comments) and REFERENCES.md.

Text is markdown the page renders as is: no `$` (Streamlit would read LaTeX), no HTML.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

MAX_QUERY = 200   # a search box longer than this is cut; no definition is that long a phrase


@dataclass(frozen=True)
class Term:
    term: str
    slug: str              # URL-safe id: ?term=<slug> and #<slug> on the glossary page
    short: str             # one or two sentences
    more: str              # up to three sentences more, or ""
    page: str | None       # url_path of the page that shows it live


TERMS: tuple[Term, ...] = (
    # ---- text and the sparse model as a whole -------------------------------------------------------
    Term("Token", "token",
         "A piece of text (a word, part of a word, a punctuation mark or a byte) that the model reads and "
         "predicts one at a time. Every routing choice in K3 is made per token, in every MoE layer.",
         "K3's vocabulary has 163,840 tokens; the live tiny model uses the project's own 4,096-piece vocabulary.",
         "routing"),
    Term("Tokenizer", "tokenizer",
         "The fixed procedure that splits text into tokens and maps each one to an integer id; the model only "
         "ever sees the ids.",
         "The live model uses a byte-level BPE tokenizer with 4,096 pieces, trained on the live model's training "
         "text, so any Unicode text encodes (characters it has no piece for fall back to their UTF-8 bytes). It "
         "is not K3's tokenizer.",
         "model-card"),
    Term("Mixture of experts (MoE)", "moe",
         "A layer that holds many feed-forward networks (experts) and runs only a few of them for each token, "
         "chosen by a router, so the parameter count can grow much faster than the compute per token.",
         "In K3, layers 1 to 92 are MoE layers; layer 0 has one dense feed-forward network.",
         "routing"),
    Term("Expert", "expert",
         "One small feed-forward network (a SiTU-GLU MLP) inside an MoE layer. A layer has many experts, and "
         "each token passes through only the few the router picks plus the shared ones.",
         "A K3 routed expert works in the latent space: 3,584 → 3,072 → 3,584 values at full scale.",
         "routing"),
    Term("Routed expert", "routed-expert",
         "One of the 896 experts of a K3 MoE layer that a token visits only if the router ranks it among its "
         "top 16.",
         "Routed experts hold about 98% of K3's 2.78T parameters and are the part stored in MXFP4.",
         "routing"),
    Term("Shared expert", "shared-expert",
         "An expert that every token passes through, whatever the router decides. K3 has 2 per MoE layer, each "
         "with hidden width 3,072, and they read the full-width token rather than its latent.",
         "Together they act as one always-on MLP of hidden width 6,144 beside the routed ones.",
         "routing"),
    Term("Router", "router",
         "The linear layer and sigmoid that score every routed expert for a token: 896 scores in K3, computed in "
         "fp32 from the full-width token. The 16 highest scores after adding the balancing bias decide where the "
         "token goes.",
         "The chosen experts' outputs are weighted by their raw scores divided by the sum of the chosen raw "
         "scores, so the bias changes which experts are picked, never how much each one counts.",
         "routing"),
    Term("Top-k", "top-k",
         "The number of routed experts each token is sent to in each MoE layer: k = 16 in K3, 8 in Kimi K2.",
         "Raising k raises the compute per token roughly in proportion to the routed part; the routing page "
         "lets you change it and re-run the live model.",
         "routing"),
    Term("Sparsity", "sparsity",
         "Routed experts available per layer divided by routed experts used per token: 896 / 16 = 56 in K3 "
         "(384 / 8 = 48 in K2).",
         "It counts experts, not parameters: with the shared experts, attention and the output head always "
         "running, about 3.7% of K3's parameters are active per token.",
         "overview"),
    Term("Active parameters", "active-parameters",
         "The parameters used to compute one token: everything except the routed experts it did not pick and "
         "the embedding table (of which only the token's own row is read). For K3, about 104.2B of 2.78T.",
         "Compute per token follows the active count; the memory needed to hold the model follows the total.",
         "overview"),
    Term("Stable LatentMoE", "stable-latentmoe",
         "K3's MoE layer: a sigmoid router on the full-width token, 896 routed SiTU-GLU experts working in a "
         "latent of half the width, an RMSNorm before projecting their mix back up, and 2 full-width shared "
         "experts.",
         "\"Stable\" refers to the bounded activation and the RMSNorm on the routed path: the K3 report says that "
         "chain of about four matrix products blew up at scale without them. The latent design comes from "
         "NVIDIA's LatentMoE (arXiv 2601.18089); the stability changes are K3's own.",
         "routing"),
    Term("Latent (LatentMoE latent width)", "latent",
         "In K3's MoE layers one shared projection maps the token from width d = 7,168 down to a latent of width "
         "l = d/2 = 3,584; the routed experts read and write only that latent, and their weighted sum is "
         "normalised and projected back up to d.",
         "Tokens cross devices at the latent width, so a token's 16 experts move 16 × 3,584 = 57,344 values, the "
         "same as K2's 8 × 7,168. The router and the shared experts still read the full-width token.",
         "parallel"),
    Term("RMSNorm", "rmsnorm",
         "Root-mean-square normalisation: divide a vector by the root of the mean of its squared entries (plus "
         "a small epsilon, 1e-5 in K3) and multiply by a learned gain per channel.",
         "K3 applies it before every attention and feed-forward module, before the output head, and in "
         "LatentMoE before the up-projection. AttnRes uses a version without gain to compare its sources.",
         None),
    # ---- inside an expert -------------------------------------------------------------------------------
    Term("SiTU-GLU", "situ-glu",
         "K3's gated activation: [4·tanh(g/4)·sigmoid(g)] × [25·tanh(u/25)], where g and u are two linear "
         "projections of the input. Both factors are bounded, so every output value stays within ±100.",
         "Near zero it matches SwiGLU to first order and approaches it as the caps grow. K3 uses it in every "
         "feed-forward network: the dense layer 0, the shared and the routed experts.",
         "situ-glu"),
    Term("SwiGLU", "swiglu",
         "The gated activation of most current language models, Kimi K2 included: g·sigmoid(g) × u, the Swish "
         "of one projection times another. It has no upper bound, so large inputs give large outputs.",
         "Its gate factor dips to about −0.28 (at g ≈ −1.28) and grows without limit for positive g.",
         "situ-glu"),
    # ---- attention ----------------------------------------------------------------------------------------
    Term("KDA (Kimi Delta Attention)", "kda",
         "A linear-attention layer from Kimi Linear that keeps a fixed-size state per head (128 × 128 values in "
         "K3) instead of a cache of past tokens, updated with a gated delta rule. 69 of K3's 93 layers use it.",
         "Before each write, every key channel of the state decays by its own learned factor between e^−5 and 1, "
         "chosen per token. Its memory does not grow with the context: per layer, the state plus the last 3 "
         "inputs of a short convolution.",
         "attention"),
    Term("Delta rule", "delta-rule",
         "A state update that first predicts the current token's value from the state (Sᵀk), then writes only "
         "the error: S ← S + k ⊗ β(v − Sᵀk), with β in (0, 1) a learned write strength per head and token.",
         "Writing the error instead of the value lets a new value replace an old one stored under a similar key. "
         "In KDA the state is decayed first, and the query reads the state after the write.",
         "attention"),
    Term("Chunked (UT) form", "chunked-form",
         "A way to compute the delta rule for a chunk of tokens at once with matrix products instead of a "
         "token-by-token loop: one triangular solve per chunk (the UT transform) folds the chunk's sequential "
         "writes into a single batched update.",
         "It gives the same outputs and final state as the recurrent loop (to about 1e-12 in float64). The live "
         "model reads a prompt with the chunked form and generates token by token with the recurrent one.",
         "attention"),
    Term("MLA (gated latent attention)", "mla",
         "Multi-head Latent Attention, from DeepSeek-V2: each token's keys and values are rebuilt from one small "
         "latent vector, so only that latent is cached. K3 adds a sigmoid output gate per channel and uses it in "
         "24 of its 93 layers (every fourth layer and the last).",
         "At K3 scale a token costs 512 latent + 64 shared key values = 576 cached values per MLA layer, against "
         "24,576 for standard multi-head attention with the same 96 heads of 128.",
         "attention"),
    Term("KV cache / latent cache", "kv-cache",
         "The keys and values of past tokens that a softmax-attention layer keeps so it need not recompute them "
         "while generating; it grows by one entry per token. MLA's latent cache stores only the 576-value latent "
         "per token and layer.",
         "In K3 only the 24 MLA layers keep a per-token cache; the 69 KDA layers keep a fixed-size state.",
         "attention"),
    Term("NoPE (no positional encoding)", "nope",
         "K3 adds no position signal anywhere: no rotary or learned positions, in any layer. Word order reaches "
         "the model through the causal mask and the order-dependent KDA layers.",
         "MLA still keeps its 64 \"rope\" key dimensions (never rotated) in the score and the cache.",
         "attention"),
    # ---- depth --------------------------------------------------------------------------------------------
    Term("AttnRes (Full and Block)", "attnres",
         "Attention Residuals: instead of adding each module's output to a running sum (h + f(h)), the input of "
         "every module is a softmax-weighted mix of earlier outputs, attended over depth with one learned query "
         "per read. Full AttnRes keeps each module's output as its own source; Block AttnRes sums the outputs "
         "within blocks of layers and attends over the block sums.",
         "With K3's blocks of 12 layers a read sees at most 9 sources (embedding, 7 sealed blocks, the current "
         "partial block), where Full would keep 187 vectors per token. With all queries at zero the weights are "
         "uniform, which computes the same as a standard Pre-Norm residual.",
         "attnres"),
    Term("Block (AttnRes)", "block",
         "A run of consecutive layers whose module outputs Block AttnRes adds into one source. K3 uses blocks of "
         "12 layers: its 93 layers form 8 blocks (7 of 12 and one of 9).",
         "Not to be confused with the block of 32 values that shares a scale in MXFP4.",
         "attnres"),
    # ---- load balancing -----------------------------------------------------------------------------------
    Term("Load (max/mean)", "load",
         "An expert's load is the number of tokens routed to it in a batch. Max/mean divides the busiest "
         "expert's load by the average, m·k/n for m tokens, top-k and n experts: 1 is perfect balance.",
         "Under expert parallelism the device holding the busiest experts sets the pace, and an expert that gets "
         "no tokens (a dead expert) wastes its parameters.",
         "balance"),
    Term("Balancing bias", "balancing-bias",
         "A number per expert added to the router's scores only to choose the top-k: raising it sends the "
         "expert more tokens, lowering it fewer. The output weights use the raw scores, so the bias never "
         "changes how much a chosen expert counts.",
         "It is set by a balancing rule (Quantile Balancing in K3, the sign rule in DeepSeek-V3 and K2), not by "
         "gradients, so it is not counted as a parameter, and it is frozen at inference.",
         "balance"),
    Term("Quantile Balancing (QB)", "qb",
         "K3's rule for the balancing bias: after each batch, every expert's bias becomes the value that would "
         "have given it exactly its fair share of m·k/n tokens (a quantile of its margins: score minus each "
         "token's cutoff), then all biases are shifted to mean 0.",
         "It jumps straight to the balancing bias of the last batch, so it needs no step size and settles within "
         "a few steps even with about 1,000 experts. The new bias applies from the next batch; counting margins "
         "in a histogram (about 1,000 bins) lets the quantile be added up across micro-batches and devices.",
         "balance"),
    Term("Sign rule", "sign-rule",
         "DeepSeek-V3's bias update: after each batch, b_j ← b_j + γ·sign(mean load − load_j), with γ = 0.001: "
         "a fixed small step toward balance for every expert.",
         "It is a SignSGD step on the same objective that Quantile Balancing minimises exactly, so with many "
         "experts it needs many steps, and a large γ overshoots.",
         "balance"),
    # ---- precision ----------------------------------------------------------------------------------------
    Term("MXFP4", "mxfp4",
         "The OCP Microscaling format with 4-bit E2M1 elements: each block of 32 values shares one 8-bit "
         "power-of-two scale (E8M0), so a value costs 4 + 8/32 = 4.25 bits. K3 stores its routed-expert "
         "weights in MXFP4.",
         "Attention, the latent projections, the shared experts and the router stay in higher precision. K3 "
         "trains with the rounding in place (a straight-through estimator), and the live model does the same.",
         "quantization"),
    Term("MXFP8", "mxfp8",
         "The same microscaling scheme with 8-bit E4M3 elements and one E8M0 scale per block of 32: 8.25 bits "
         "per value. K3 uses it for the activations inside its experts.",
         "The OCP spec also defines an E5M2 variant; this app, like the K3 description it follows, uses E4M3.",
         "quantization"),
    Term("E2M1", "e2m1",
         "A 4-bit floating-point element with 1 sign, 2 exponent and 1 mantissa bit. It can hold only "
         "±{0, 0.5, 1, 1.5, 2, 3, 4, 6}; values are rounded to the nearest, ties to the even code.",
         "So 0.75 rounds to 1, 1.25 to 1, 2.5 to 2 and 5 to 4; anything beyond 6 is clamped to 6.",
         "quantization"),
    Term("E4M3", "e4m3",
         "An 8-bit floating-point element with 1 sign, 4 exponent and 3 mantissa bits; its largest finite "
         "value is 448.",
         "SiTU-GLU's cap of 100 lies well inside that range; SwiGLU's output has no cap.",
         "quantization"),
    Term("E8M0 scale", "e8m0",
         "The shared scale of an MX block: 8 exponent bits and no sign or mantissa, so it is always a power of "
         "two, 2^(E−127) for E from 0 to 254. It is set from the block's largest magnitude.",
         "X = 2^(floor(log2 amax) − emax), with emax = 2 for E2M1 and 8 for E4M3, puts the block's largest value "
         "near the top of the element grid; each element is stored as X times a grid value.",
         "quantization"),
    Term("Block of 32", "block-of-32",
         "In the MX formats, 32 consecutive values (along the input dimension of a weight matrix) that share "
         "one E8M0 scale, so one large value coarsens only its own block.",
         "The live model's expert rows are shorter than 32, so its blocks run along the row-major flattening of "
         "each expert's weights. Not to be confused with an AttnRes block of layers.",
         "quantization"),
    # ---- devices ------------------------------------------------------------------------------------------
    Term("Expert parallelism", "expert-parallelism",
         "Spreading a layer's experts over devices (896 over 8 devices is 112 each) and sending each token to "
         "the devices that hold its chosen experts, instead of copying every expert onto every device.",
         "A token's 16 experts can sit on any of the devices, so how many devices one token needs depends on "
         "the routing.",
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
         "Kimi K2's published 1.04T total includes one MTP layer. This app's K3 accounting counts none and "
         "matches the published 2.78T.",
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
