"""The guided tour: a recommended order through the pages and, per page, why its mechanism matters.

The order is a teaching order, not the sidebar's: after the overview it follows one token through
K3's mixture of experts (routing, then balancing the experts' load, then placing the experts on
devices, then what runs inside an expert and how its weights are stored), then the attention half of
each layer, then how the layers connect, and ends with the comparisons, the claims and the live
model's card. Facts follow ARCHITECTURE.md and REFERENCES.md (K3 report, arXiv 2607.24653).
"""
from __future__ import annotations

from dataclasses import dataclass

from app.navigation import PAGES


@dataclass(frozen=True)
class Stop:
    url_path: str
    title: str
    why: str    # one or two plain sentences: why this mechanism matters for a frontier sparse model


# (url_path, why) in tour order; titles come from app.navigation so the two never drift apart.
_ORDER = (
    ("overview",
     "A sparse model's cost per token follows its active parameters while what it can store follows its "
     "total: K3 keeps 2.78T parameters but computes each token with about 104B of them (about 3.7%)."),
    ("routing",
     "The router is where a sparse model decides how each token is computed: picking 16 of 896 experts in "
     "each of 92 MoE layers is what leaves most of the 2.78T parameters idle for that token, and a different "
     "pick changes every later layer."),
    ("balance",
     "Experts live on different devices, so if the router favours a few of them those devices set the pace "
     "while the rest wait. Quantile Balancing evens the load with a bias that changes only which experts are "
     "picked, never the weights of their outputs."),
    ("parallel",
     "At 2.78T parameters the experts must be spread over many devices, so every MoE layer is an exchange of "
     "tokens between them. K3 sends tokens at the latent width (3,584 values instead of 7,168), so 16 experts "
     "per token move as many values as K2's 8."),
    ("situ-glu",
     "Inside each MoE layer a routed token passes through a chain of about four matrix products, which the K3 "
     "report says blew up at scale until the activation was bounded and the latent normalised. SiTU-GLU caps "
     "every value at 100, inside FP8's largest value of 448."),
    ("quantization",
     "Routed experts hold about 98% of K3's weights, and generating text is limited by reading weights from "
     "memory. Storing them in MXFP4, 4.25 bits per value instead of 16, cuts those bytes about 3.8-fold."),
    ("attention",
     "At long context the attention cache, not the weights, fills the memory. K3 gives 69 of its 93 layers a "
     "fixed-size KDA state and caches only 576 values per token in each of its 24 MLA layers, which is what "
     "makes a 1,048,576-token context fit."),
    ("attnres",
     "A plain residual adds every layer's output with the same weight, so a late layer cannot choose what to "
     "read from early ones. Attention over depth learns those weights per token, and Block AttnRes keeps the "
     "cost at 9 stored vectors per token instead of 187."),
    ("moe-vs-moa",
     "\"Many experts\" can mean routing inside one network or asking several whole models. Costing both from "
     "their configs shows what routing saves: with the same total parameters, N dense agents each run in full "
     "and keep their own cache."),
    ("claims",
     "Figures about frontier models travel as slogans. Recomputing each one from the published config and "
     "the live code shows which hold, which need a caveat and which cannot be checked from outside."),
    ("model-card",
     "Every live chart comes from a tiny model with K3's layer, expert and routing counts but small widths, "
     "trained here on a CPU. Knowing how it was trained tells you which of its behaviours say something about "
     "K3 and which do not."),
    ("glossary",
     "The same few terms (expert, router, top-k, latent, KDA, MLA, AttnRes, QB, MXFP4) come back on every "
     "page; one precise definition of each keeps the pages' numbers comparable."),
)

_TITLES = {spec.url_path: spec.title for spec in PAGES}
# A page not (yet) registered in the navigation cannot be visited, so it is not a stop.
TOUR: tuple[Stop, ...] = tuple(Stop(url, _TITLES[url], why) for url, why in _ORDER if url in _TITLES)
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
