"""The guided tour: a recommended order through the pages and, per page, why its mechanism matters.

The tour follows the sidebar's order (app/navigation.py), which is a teaching order: after the overview it
follows one token through K3's mixture of experts (routing, then the whole layer around it step by step, then
balancing the experts' load, then placing the experts on devices, then what runs inside an expert and how its
weights are stored), then the attention half of each layer and how the layers connect, and ends with the
comparisons, the claims, the live model's card, the glossary, the lessons and classes. Facts follow
docs/ARCHITECTURE.md and docs/REFERENCES.md (K3 report, arXiv 2607.24653); every number is computed from the
config, the accounting or the format tables.
"""
from __future__ import annotations

from dataclasses import dataclass

from app.navigation import PAGES
from model import memory
from model.accounting import count_params
from model.config import BETA_GATE, BETA_UP, K3Config
from model.depth_counts import vectors_alive
from model.formats import bits_per_value


@dataclass(frozen=True)
class Stop:
    url_path: str
    title: str
    why: str    # one or two plain sentences: why this mechanism matters for a frontier sparse model


_K3, _K2, _TINY = K3Config.full(), K3Config.kimi_k2(), K3Config.tiny()
_P = count_params(_K3)
_ROUTED = _P.breakdown["routed experts"] / _P.total
_MXFP4 = bits_per_value(_K3.expert_weight_format)

# (url_path, why) per page; the order and the titles come from app.navigation, so the tour and the sidebar never
# drift apart.
_WHY = dict((
    ("overview",
     "A sparse model's cost per token follows its active parameters while what it can store follows its "
     f"total: K3 keeps {_P.total / 1e12:.2f}T parameters but computes each token with about "
     f"{_P.active / 1e9:.0f}B of them (about {_P.active_share:.1%})."),
    ("routing",
     f"The router is where a sparse model decides how each token is computed: picking {_K3.top_k} of "
     f"{_K3.n_routed_experts} experts in each of {len(_K3.moe_layers)} MoE layers is what leaves most of the "
     f"{_P.total / 1e12:.2f}T parameters idle for that token, and a different pick changes every later layer."),
    ("layer",
     "K3's mechanisms depend on each other: every module reads a depth-weighted mix of what earlier modules "
     f"wrote, and the router learns only through the weights it gives the {_K3.top_k} experts it picked. Following "
     "one token through a whole layer shows what each step hands the next."),
    ("balance",
     "Experts live on different devices, so if the router favours a few of them those devices set the pace "
     "while the rest wait. Quantile Balancing evens the experts' loads with a bias that changes only which experts "
     "are picked, never the weights of their outputs; K3 evens the devices separately, with MoonEP's dynamic "
     "redundant experts (K3 report sec 5.2.1 and appendix E)."),
    ("parallel",
     f"At {_P.total / 1e12:.2f}T parameters the experts must be spread over many devices, so every MoE layer is an "
     f"exchange of tokens between them. K3 sends tokens at the latent width ({_K3.expert_width:,} values instead of "
     f"{_K3.d_model:,}), so {_K3.top_k} experts per token move as many values as K2's {_K2.top_k}."),
    ("situ-glu",
     "Inside each MoE layer a routed token passes through a chain of nearly four matrix products, which at K3's "
     "scale produces exploding internal activations (K3 report sec 2.3); K3 answers with a normalised latent and a "
     f"bounded activation. SiTU-GLU caps every hidden value at {BETA_GATE * BETA_UP:g}, whatever the weights, before "
     "it is rounded to MXFP8."),
    ("quantization",
     f"Routed experts hold about {_ROUTED:.0%} of K3's weights, and generating text is limited by reading weights "
     f"from memory. Storing them in MXFP4, {_MXFP4:g} bits per value instead of 16, cuts those bytes about "
     f"{16 / _MXFP4:.1f}-fold."),
    ("attention",
     f"At long context the attention cache, not the weights, fills the memory. K3 gives {_K3.n_kda} of its "
     f"{_K3.num_layers} layers a fixed-size KDA state and caches only {memory.mla_values_per_token(_K3)} values per "
     f"token in each of its {_K3.n_mla} MLA layers: at {_K3.context_length:,} tokens (the released config's "
     "max_position_embeddings; the K3 report's Table 1 says 1M) a sequence's cache is "
     f"{memory.hybrid(_K3).nbytes(_K3.context_length) / 1e9:.1f} GB in bf16 (our choice), against "
     f"{memory.all_mla(_K3).nbytes(_K3.context_length) / 1e9:.1f} GB if every layer were MLA."),
    ("attnres",
     "A plain residual adds every layer's output with the same weight, so a late layer cannot choose what to "
     "read from early ones. Attention over depth computes those weights for each token from a learned query (the "
     "K3 report's equations 8 to 10), and Block AttnRes keeps the "
     f"cost at {vectors_alive(_K3.num_layers, _K3.attnres_block_size)} stored vectors per token instead of "
     f"{vectors_alive(_K3.num_layers, None)}."),
    ("moe-vs-moa",
     "\"Many experts\" can mean routing inside one network or asking several whole models. Costing both from "
     "their configs shows what routing saves: with the same total parameters, N dense agents each run in full "
     "and keep their own cache."),
    ("claims",
     "Figures about frontier models travel as slogans. Recomputing each one from the published config and "
     "the live code shows which hold, which need a caveat and which cannot be checked from outside."),
    ("model-card",
     "Every live chart comes from a tiny model with K3's layer, expert and routing counts but small widths, "
     f"{_TINY.kda_heads} heads instead of {_K3.kda_heads} and a vocabulary of {_TINY.vocab_size:,} instead of "
     f"{_K3.vocab_size:,}, trained here on a CPU. Knowing how it was trained tells you which of its behaviours say "
     "something about K3 and which do not."),
    ("glossary",
     "The same few terms (expert, router, top-k, latent, KDA, MLA, AttnRes, QB, MXFP4) come back on every "
     "page; one precise definition of each keeps the pages' numbers comparable."),
    ("lessons",
     "A lesson is a shorter path than the guided tour, written for one class: each step opens a page with the view "
     "set, says what to look at and asks a question whose answer is on that view."),
    ("classes",
     "With a class, every student types their own sentence into the same model, so one question can have a different "
     "right answer for every student; the teacher's dashboard shows their spread as it comes in."),
))

TOUR: tuple[Stop, ...] = tuple(Stop(spec.url_path, spec.title, _WHY[spec.url_path]) for spec in PAGES
                               if spec.url_path in _WHY)
_INDEX = {stop.url_path: i for i, stop in enumerate(TOUR)}


def stop_for(url_path: str) -> Stop | None:
    i = _INDEX.get(url_path) if isinstance(url_path, str) else None
    return None if i is None else TOUR[i]


def next_stop(url_path: str) -> Stop | None:
    """The stop after this page's, or None on the last stop or an unknown page."""
    i = _INDEX.get(url_path) if isinstance(url_path, str) else None
    return None if i is None or i + 1 >= len(TOUR) else TOUR[i + 1]


def position(url_path: str) -> tuple[int, int] | None:
    """(1-based place in the tour, number of stops), e.g. (3, 12)."""
    i = _INDEX.get(url_path) if isinstance(url_path, str) else None
    return None if i is None else (i + 1, len(TOUR))
