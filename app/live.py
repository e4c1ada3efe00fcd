"""The live tiny K3 shared by every page: one service that owns the model, its lock and its caches.

* `live()`: the model and tokenizer, loaded once per process and never mutated by a session;
* `forward()`: a cached forward pass, one per prompt and per RunOptions;
* `resume()`: a cached re-run of a cached forward from one layer on (model.resume), the Routing
  explorer's what-if;
* `computing()`: the one lock every computation on the live model (or on a variant sharing its
  tensors) holds, so concurrent sessions take turns on the server's few cores;
* `prepare_prompt()`: a typed prompt validated and tokenised (app/ui.py draws the box).

Per-session choices travel with the call as one frozen RunOptions (routing overrides, quant,
activation), which is also the cache key; they are never module state.
"""
from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import streamlit as st
import torch

from app.text import md_escape
from model.checkpoint import CheckpointError, load_pretrained
from model.config import K3Config
from model.k3 import K3Model, K3Output, RunOptions
from model.tokenizer import Tokenizer

MAX_CHARS = 2000          # characters kept from a typed prompt
MAX_TOKENS = 128          # tokens the live model reads per prompt (about 0.4 s for a full forward)
PRESETS = {
    "Prose": "The router sends every token to 16 of its 896 experts, and the rest stay idle.",
    "Code": "def mean(values):\n    return sum(values) / len(values)\n",
    "Numbers": "In 2026 the model had 2,779 billion weights; 104 billion of them ran per token.",
    "Punctuation": "Wait -- really? Yes: (a), [b], {c}; \"quoted\" and 'single'!",
}
DEFAULT_PRESET = "Prose"
# Reentrant, so a helper that locks can call another that does. Never call a cached function (live,
# forward, resume, a page's cached_*) while holding it: that call may wait for another thread which is
# computing the same cache entry and waiting for this lock. Fetch cached inputs first, then lock.
_LOCK = threading.RLock()
# One intra-op thread per computation: sessions run concurrently on the server's few cores, and the
# tiny model's ops are too small to gain from more (64-token forward: ~241 ms on 1 thread, ~226 ms on 2,
# bench/bench_model.py), so more threads per session would only oversubscribe the cores.
torch.set_num_threads(int(os.environ.get("K3_TORCH_THREADS", "1")))


@dataclass(frozen=True)
class Live:
    model: K3Model
    tokenizer: Tokenizer
    pretrained: bool
    note: str                        # why it is random, when it is


@st.cache_resource(show_spinner="Loading the live tiny K3 (93 layers, 896 experts)…")
def live() -> Live:
    tok = Tokenizer.load()
    try:
        model, tok = load_pretrained()
        lv = Live(model, tok, True, "")
    except CheckpointError as e:
        torch.manual_seed(0)
        model = K3Model(K3Config.tiny().with_(vocab_size=tok.vocab_size)).eval().requires_grad_(False)
        lv = Live(model, tok, False, str(e))
    _freeze_long_lived()
    return lv


def _freeze_long_lived() -> None:
    """Move what lives as long as the process (the imported libraries, the model) out of the cyclic
    collector's reach: with torch loaded a full collection scans ~310,000 objects, ~0.2 s holding the
    interpreter on this machine, which every session's next answer would wait for. Reference counting
    still frees everything; only the periodic cycle search skips these (they are never garbage)."""
    gc.collect()
    gc.freeze()


def banner(lv: Live | None = None) -> None:
    lv = lv or live()
    if not lv.pretrained:
        st.warning("**This page is running on a seeded random instance, not the trained one**: the "
                   "shipped checkpoint could not be loaded, so routing shows no learned structure. "
                   f"Reason: {md_escape(lv.note, 300)}", icon=":material/warning:")


@dataclass(frozen=True)
class Prompt:
    text: str
    ids: tuple[int, ...]
    pieces: tuple[str, ...]
    notices: tuple[str, ...]          # what was changed about the input, to show on the page


def prepare_prompt(text: str, tok: Tokenizer) -> Prompt | str:
    """A validated prompt, or an error message for the page (never an exception)."""
    notices = []
    text = "" if text is None else str(text)
    if len(text) > MAX_CHARS:
        notices.append(f"The text was cut to its first {MAX_CHARS:,} characters (of {len(text):,}).")
        text = text[:MAX_CHARS]
    if not text.strip():
        return "The prompt is empty: type a sentence or pick a preset."
    ids = tok.encode(text)
    if len(ids) > MAX_TOKENS:
        notices.append(f"The live model reads the first {MAX_TOKENS} tokens (of {len(ids)}).")
        ids = ids[:MAX_TOKENS]
    if not ids:
        return "The prompt produced no tokens: type a sentence or pick a preset."
    return Prompt(tok.decode(ids), tuple(ids), tuple(tok.pieces(ids)), tuple(notices))


@contextmanager
def computing(threads: int | None = None) -> Iterator[None]:
    """Hold the live model's lock, in inference mode, for one computation on the model; with `threads`, that
    many intra-op threads meanwhile (for a one-off computation that no session's request runs beside, since
    every computation on the model waits for this lock)."""
    with _LOCK, torch.inference_mode():
        before = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)


def forward(ids, routing=None, quant: bool = False, activation: str | None = None, *,
            options: RunOptions | None = None) -> K3Output:
    """A cached forward of the live model on one prompt, with the options given whole or as routing /
    quant / activation. Treat the result as read-only: it is shared by every session that asks the
    same question."""
    if options is None:
        options = RunOptions(routing, quant, activation)
    elif routing is not None or quant or activation is not None:
        raise ValueError("pass the options either whole or as routing/quant/activation, not both")
    return _forward(tuple(int(i) for i in ids), options)


def resume(ids, from_layer: int, options: RunOptions) -> K3Output:
    """forward(ids) re-run from layer `from_layer` on with `options`; model.resume reuses every earlier
    layer of the cached base forward. Read-only, shared, like forward's."""
    return _resume(tuple(int(i) for i in ids), int(from_layer), options)


@st.cache_resource(max_entries=48, show_spinner=False)
def _forward(ids: tuple[int, ...], options: RunOptions) -> K3Output:
    model = live().model
    with computing():
        return model(torch.tensor([ids]), options=options, max_tokens=MAX_TOKENS)


@st.cache_resource(max_entries=8, show_spinner=False)   # ~40 MB each at 128 tokens
def _resume(ids: tuple[int, ...], from_layer: int, options: RunOptions) -> K3Output:
    base, model = forward(ids), live().model              # cached: fetched before taking the lock
    with computing():
        return model.resume(base, from_layer, options=options)
