"""The live tiny K3 shared by every page: one service that owns the model, its lock and its caches.

* `live()`: the model and tokenizer, loaded once per process and never mutated by a session;
* `forward()`: a cached forward pass, one per prompt and per RunOptions;
* `resume()`: a cached re-run of a cached forward from one layer on (model.resume), the Routing
  explorer's what-if;
* `computing()`: the one lock every computation on the live model (or on a variant sharing its
  tensors) holds, so concurrent sessions take turns on the server's few cores;
* `prefetch()`: re-runs one nudge away, computed in the background while the server is idle;
* `prepare_prompt()`: a typed prompt validated and tokenised (app/ui.py draws the box).

Per-session choices travel with the call as one frozen RunOptions (routing overrides, quant,
activation), which is also the cache key; they are never module state.
"""
from __future__ import annotations

import functools
import gc
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import streamlit as st
import torch

from app import jobs
from app.assets import LiveUnavailable
from app.prompts import DEFAULT_PRESET, PRESETS  # noqa: F401 - named here too (app.live.PRESETS)
from app.text import clean_text
from model import fast
from model.checkpoint import CheckpointError, load_pretrained, shown
from model.config import K3Config
from model.k3 import K3Model, K3Output, RunOptions
from model.tokenizer import TOKENIZER_PATH, Tokenizer

MAX_CHARS = 2000          # characters kept from a typed prompt
MAX_TOKENS = 128          # tokens the live model reads per prompt (about 0.4 s for a full forward)
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


LOADED = threading.Event()      # set once live() has loaded the model in this process


@st.cache_resource(show_spinner="Loading the live tiny K3 (93 layers, 896 experts)…")
def live() -> Live:
    try:
        tok = Tokenizer.load()
    except Exception as e:          # noqa: BLE001 - the tokenizers library raises plain Exception for a bad file
        raise LiveUnavailable(f"{shown(TOKENIZER_PATH)} could not be read ({type(e).__name__}): run "
                              "`python -m model.tokenizer` or restore the file from git") from e
    # the compiled kernels (model/fast.py) join once the warm-up has loaded them (app/warm.py): numba's start, ~0.6 s
    # holding the interpreter, is not added to the first visitor's wait for the model
    fast.later()
    try:
        model, tok = load_pretrained()
        lv = Live(model, tok, True, "")
    except CheckpointError as e:
        torch.manual_seed(0)
        model = K3Model(K3Config.tiny().with_(vocab_size=tok.vocab_size)).eval().requires_grad_(False)
        lv = Live(model, tok, False, str(e))
    _freeze_long_lived()
    LOADED.set()
    return lv


def _freeze_long_lived() -> None:
    """Move what lives as long as the process (the imported libraries, the model) out of the cyclic
    collector's reach: with torch loaded a full collection scans ~310,000 objects, ~0.2 s holding the
    interpreter on this machine, which every session's next answer would wait for. Reference counting
    still frees everything; only the periodic cycle search skips these (they are never garbage)."""
    gc.collect()
    gc.freeze()


@dataclass(frozen=True)
class Prompt:
    text: str
    ids: tuple[int, ...]
    pieces: tuple[str, ...]
    notices: tuple[str, ...]          # what was changed about the input, to show on the page


def prepare_prompt(text: str, tok: Tokenizer) -> Prompt | str:
    """A validated prompt, or an error message for the page (never an exception)."""
    text, notices = clean_text(text, MAX_CHARS)
    if not text.strip():
        return "The prompt is empty: type a sentence or pick a preset."
    ids = tok.encode(text)
    if len(ids) > MAX_TOKENS:
        notices.append(f"The live model reads the first {MAX_TOKENS} tokens (of {len(ids)}).")
        ids = ids[:MAX_TOKENS]
    if not ids:
        return "The prompt produced no tokens: type a sentence or pick a preset."
    return Prompt(tok.decode(ids), tuple(ids), tuple(tok.display_pieces(ids)), tuple(notices))


@contextmanager
def awaited() -> Iterator[None]:
    """Around a long job of several computations that a page waits for or soon will (the Routing explorer's
    held-out routing, when a page's thread computes it): the prefetch does not slip its guesses in between."""
    with jobs.activity("awaited"):
        yield


@contextmanager
def computing(threads: int | None = None) -> Iterator[None]:
    """Hold the live model's lock, in inference mode, for one computation on the model; with `threads`, that
    many intra-op threads meanwhile (for a one-off computation that no session's request runs beside, since
    every computation on the model waits for this lock). A visitor's computation keeps the background jobs
    waiting (app/jobs.py); one on the jobs' own thread does not."""
    with jobs.activity("model"), _LOCK, torch.inference_mode():
        before = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)


POLITE_WAIT_S = 2.0     # the longest a polite computation gives way before it takes its turn anyway


@contextmanager
def computing_politely(threads: int | None = None) -> Iterator[None]:
    """computing(), for one step of a long job no one may be waiting for yet (the server's warm-up): first
    lets the computations on the model that are under way or waiting for it go first, for up to
    POLITE_WAIT_S (so that a server that is never idle, a class at work, does not starve it)."""
    deadline = time.monotonic() + POLITE_WAIT_S
    while jobs.active("model") > 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    with computing(threads):
        yield


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


# What a cached run keeps: a 128-token forward holds ~60 MB (the trace the pages read: every MoE layer's router
# scores over 896 experts, the AttnRes weights, the cache), a re-run about as much. The forward cache held 48 such
# runs (~2.9 GB), which a class typing its own sentences filled and never gave back; its entries now also expire
# CACHE_TTL_S after they were computed (a session still on its prompt recomputes it once, ~0.3 s).
FORWARD_ENTRIES, RESUME_ENTRIES = 16, 8
CACHE_TTL_S = 1800


@st.cache_resource(max_entries=FORWARD_ENTRIES, ttl=CACHE_TTL_S, show_spinner=False)
def _forward(ids: tuple[int, ...], options: RunOptions) -> K3Output:
    model = live().model
    with computing():
        return model(torch.tensor([ids]), options=options, max_tokens=MAX_TOKENS)


# the spinner shows only while a re-run is computed, not for one already cached
@st.cache_resource(max_entries=RESUME_ENTRIES, ttl=CACHE_TTL_S,
                   show_spinner="Re-running the later layers with the new routing…")
def _resume(ids: tuple[int, ...], from_layer: int, options: RunOptions) -> K3Output:
    base, model = forward(ids), live().model              # cached: fetched before taking the lock
    with computing():
        key = (ids, from_layer, options)                      # computed while the server was idle?
        ready = _prefetcher.take(key)
        if ready is None:
            ready = _ahead.take(key)
        return ready if ready is not None else model.resume(base, from_layer, options=options)


# ---- what pages compute from a run ---------------------------------------------------------------------
# forward and resume hand out the same K3Output object again while it is cached, so what a page derives from
# one (a chart's spec, a table) can live beside it and go when it goes: going back to a routing seen before
# (top-k back to 16, the bias on again) builds none of its charts again. Shared by every session: read-only.
_DERIVED: dict[int, dict] = {}       # id(run) -> {key: value}; a K3Output (a dataclass) is not hashable
_DERIVED_LOCK = threading.Lock()
DERIVED_PER_RUN = 16            # values kept per run (a chart's spec is ~0.1-0.3 MB); the oldest goes first


def derived(run: K3Output, key: tuple, make):
    """`make()`, computed once per `run` (a result of forward or resume) and `key` (what the value is and its
    other inputs: the token, the layer, ...), then handed out again while the run lives."""
    rid = id(run)
    with _DERIVED_LOCK:
        memo = _DERIVED.get(rid)
        if memo is not None and key in memo:
            return memo[key]
    value = make()                                  # outside the lock: two sessions may both compute it once
    with _DERIVED_LOCK:
        memo = _DERIVED.get(rid)
        if memo is None:
            memo = _DERIVED[rid] = {}
            # dropped when the run is (before its id can be another object's); no lock: the collector may run
            # this on a thread that holds it
            weakref.finalize(run, _DERIVED.pop, rid, None)
        if key not in memo and len(memo) >= DERIVED_PER_RUN:
            memo.pop(next(iter(memo)))
        return memo.setdefault(key, value)


# ---- idle-time prefetch -----------------------------------------------------------------------------
# A person nudging a control (top-k one step, the bias off, a knock-out) asks for a re-run of ~50 layers,
# ~0.3 s of the model on this machine. While no one else is using the server, the background jobs
# (app/jobs.py, kind PREFETCH) run the re-runs one nudge away from what a page shows (the Routing explorer
# names them while it shows the model's own routing: app/routing.py `neighbours`), so that first nudge finds
# its answer ready. A wish starts only once the server has been quiet for a moment, takes the model's lock
# like everything else (a request that comes meanwhile waits for at most the one re-run under way), and the
# newest page's wishes replace the older ones. With many sessions busy the server is seldom quiet and the
# wishes wait, so they add no load when load is high. K3_PREFETCH=0 turns it off.
KEEP = 4            # prefetched runs held (~20-40 MB each); the oldest that the newest wishes do not name goes first
HANDED = 16         # keys handed over to _resume's cache lately: not wished for again
GROUP = "prefetch"


class Prefetcher:
    def __init__(self, group: str = GROUP, keep: int = KEEP) -> None:
        self.group, self.keep = group, keep
        self._groups = {group}                              # every group its jobs were queued under
        self._ready: dict[tuple, K3Output] = {}
        self._handed: dict[tuple, None] = {}              # an ordered set: oldest first
        self._named: set[tuple] = set()                     # the re-runs the newest wishes name
        self._lock = threading.Lock()
        self.enabled = os.environ.get("K3_PREFETCH", "1") != "0"

    def stop(self, timeout: float = 10.0) -> None:
        """Drop the wishes and wait for the one under way."""
        for group in list(self._groups):
            jobs.drop(group)
        for group in list(self._groups):
            jobs.settle(group, timeout)

    def want(self, wishes: list[tuple], who: str | None = None) -> None:
        """Replace the wish list: (key, base forward, model[, then]) per re-run, key = (ids, from_layer, options);
        `then(run)`, if given, is called with the computed run afterwards, outside the model's lock (the page
        builds what it will show from that run: app.live.derived keeps it beside the run). A wish whose key is
        None computes nothing on the model: it is then(base). `who`: the wishes replace only that asker's earlier
        ones, and the runs they name are not preferred over others when the oldest ready run goes."""
        if not self.enabled:
            return
        items = []
        with self._lock:
            for wish in wishes:
                key, base, model = wish[:3]
                then = wish[3] if len(wish) > 3 else None
                if key is not None and (key in self._ready or key in self._handed):
                    if then is not None:        # computed before; what the page builds of it may not be (a new token)
                        items.append((f"then {key[1:]}", functools.partial(self._then_again, key, then)))
                    continue
                if key is None:
                    items.append(("then", functools.partial(then, base)))
                else:
                    items.append((f"re-run {key[1:]}", functools.partial(self._compute, key, base, model, then)))
            if who is None:
                self._named = {w[0] for w in wishes if w[0] is not None}
            group = self.group if who is None else f"{self.group}:{who}"
            self._groups.add(group)
        jobs.replace(group, jobs.Kind.PREFETCH, items)

    def _compute(self, key: tuple, base: K3Output, model: K3Model, then) -> None:
        with computing():
            out = model.resume(base, key[1], options=key[2])
        with self._lock:
            self._ready[key] = out
            while len(self._ready) > self.keep:               # the oldest the newest wishes do not name goes first
                old = [k for k in self._ready if k not in self._named] or list(self._ready)
                self._ready.pop(old[0])
        if then is not None and not jobs.active("model") and not jobs.active("awaited"):
            then(out)                                   # what the page builds of it, unless a computation came meanwhile

    def _then_again(self, key: tuple, then) -> None:
        """then(run) for a re-run computed before: the one held here, else the page's cached one (resume; computed
        again, under the model's lock, only if its cache has let it go)."""
        with self._lock:
            run = self._ready.get(key)
        then(run if run is not None else resume(*key))

    def take(self, key: tuple) -> K3Output | None:
        """The prefetched run for `key` (None when there is none), and a note that its asker now has it
        (the caller's cache keeps it, so it is not computed again)."""
        with self._lock:
            self._handed[key] = None
            while len(self._handed) > HANDED:
                self._handed.pop(next(iter(self._handed)))
            return self._ready.pop(key, None)

    def ready(self, key: tuple) -> bool:
        with self._lock:
            return key in self._ready


_prefetcher = Prefetcher()
# A class's students each ask for their next lesson step (app/classes_ui.py), so that a teacher's Next does not
# make every student's page compute at once: one wish per student, beside the others', AHEAD_KEEP runs held.
AHEAD_KEEP = 24         # a class of 40 on two balanced replicas is 20 students each, and a few to spare
_ahead = Prefetcher("ahead", keep=AHEAD_KEEP)


def prefetch(ids, runs: list[tuple], first=(), last=()) -> None:
    """Ask for re-runs (from_layer, options[, then]) of forward(ids) to be computed while the server is idle,
    each followed by `then(run)` when given; `first` and `last`: functions of forward(ids) itself to call then
    too, before and after the re-runs (a page building what it would show next of the same run). The newest call
    replaces the wishes of the one before. Returns at once."""
    ids = tuple(int(i) for i in ids)
    base, model = forward(ids), live().model
    _prefetcher.want([(None, base, None, f) for f in first]
                     + [((ids, int(r[0]), r[1]), base, model, *r[2:]) for r in runs]
                     + [(None, base, None, f) for f in last])


def prefetch_for(who: str, ids, runs: list[tuple]) -> None:
    """prefetch's re-runs (from_layer, options[, then]) for one asker (a student's session), beside every other
    asker's wishes rather than in place of them; the asker's newest call replaces its own earlier wishes."""
    if not runs:
        return
    ids = tuple(int(i) for i in ids)
    base, model = forward(ids), live().model
    _ahead.want([((ids, int(r[0]), r[1]), base, model, *r[2:]) for r in runs], who=who)
