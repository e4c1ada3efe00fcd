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

import atexit
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

from app.assets import LiveUnavailable
from app.prompts import DEFAULT_PRESET, PRESETS  # noqa: F401 - named here too (app.live.PRESETS)
from app.text import clean_text
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


_BUSY = {"active": 0, "until": 0.0}      # computations for sessions now, and when the last one ended
_BUSY_LOCK = threading.Lock()


def busy() -> tuple[int, float]:
    """(computations on the live model under way now, time.monotonic() when the last one ended)."""
    with _BUSY_LOCK:
        return _BUSY["active"], _BUSY["until"]


def _busy(delta: int) -> None:
    with _BUSY_LOCK:
        _BUSY["active"] += delta
        _BUSY["until"] = time.monotonic()


_AWAITED = {"n": 0}                     # long jobs in several computations that a page waits for, under way


@contextmanager
def awaited() -> Iterator[None]:
    """Around a long job of several computations that a page waits for or soon will (the Routing explorer's
    held-out routing): the idle-time prefetch does not slip its guesses in between them."""
    with _BUSY_LOCK:
        _AWAITED["n"] += 1
    try:
        yield
    finally:
        with _BUSY_LOCK:
            _AWAITED["n"] -= 1
            _BUSY["until"] = time.monotonic()


def _idle() -> bool:
    """No computation on the model under way and no awaited job (the prefetch's condition, with IDLE_S)."""
    return _BUSY["active"] == 0 and _AWAITED["n"] == 0


@contextmanager
def computing(threads: int | None = None) -> Iterator[None]:
    """Hold the live model's lock, in inference mode, for one computation on the model; with `threads`, that
    many intra-op threads meanwhile (for a one-off computation that no session's request runs beside, since
    every computation on the model waits for this lock)."""
    _busy(+1)
    try:
        with _LOCK, torch.inference_mode():
            before = torch.get_num_threads()
            if threads:
                torch.set_num_threads(threads)
            try:
                yield
            finally:
                torch.set_num_threads(before)
    finally:
        _busy(-1)


POLITE_WAIT_S = 2.0     # the longest a polite computation gives way before it takes its turn anyway


@contextmanager
def computing_politely(threads: int | None = None) -> Iterator[None]:
    """computing(), for one step of a long job no one may be waiting for yet (the server's warm-up): first
    lets the computations on the model that are under way or waiting for it go first, for up to
    POLITE_WAIT_S (so that a server that is never idle, a class at work, does not starve it)."""
    deadline = time.monotonic() + POLITE_WAIT_S
    while _BUSY["active"] > 0 and time.monotonic() < deadline:
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
        ready = _prefetcher.take((ids, from_layer, options))   # computed while the server was idle
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
# ~0.3 s of the model on this machine. While no session is computing, a background thread runs the re-runs
# one nudge away from what a page shows (the Routing explorer names them while it shows the model's own
# routing: app/routing.py `neighbours`), so that first nudge finds its answer ready. It never runs beside
# a session's computation: it starts only after the server has been idle for IDLE_S, takes the model's
# one lock like everything else (a request that comes meanwhile waits for at most the one re-run under
# way), and keeps only the newest page's wishes. With many sessions busy it seldom finds the server idle
# and does nothing, so it adds no load when load is high. K3_PREFETCH=0 turns it off.
IDLE_S = 0.5
KEEP = 4            # prefetched runs held (~20-40 MB each); the oldest that the newest wishes do not name goes first
HANDED = 16         # keys handed over to _resume's cache lately: not wished for again


class Prefetcher:
    def __init__(self) -> None:
        self._wanted: list[tuple[tuple, K3Output, K3Model]] = []
        self._ready: dict[tuple, K3Output] = {}
        self._handed: dict[tuple, None] = {}              # an ordered set: oldest first
        self._named: set[tuple] = set()                     # the re-runs the newest wishes name
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.enabled = os.environ.get("K3_PREFETCH", "1") != "0"

    def stop(self, timeout: float = 10.0) -> None:
        """Drop the wishes and wait for the job under way (at exit: a thread left inside torch while the
        interpreter finalises aborts the process)."""
        with self._cond:
            self._wanted = []
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._cond:
            self._stopping = False

    def want(self, jobs: list[tuple]) -> None:
        """Replace the wish list: (key, base forward, model[, then]) per re-run, key = (ids, from_layer, options);
        `then(run)`, if given, is called with the computed run afterwards, outside the model's lock (the page
        builds what it will show from that run: app.live.derived keeps it beside the run). A job whose key is
        None computes nothing on the model: it is then(base), when the server is idle."""
        if not self.enabled:
            return
        with self._cond:
            wanted = []
            for job in jobs:
                if job[0] is not None and (job[0] in self._ready or job[0] in self._handed):
                    if len(job) > 3:            # computed before; what the page builds of it may not be (a new token)
                        wanted.append((None, job[1], None, functools.partial(self._then_again, job[0], job[3])))
                    continue
                wanted.append(job)
            self._wanted = wanted
            self._named = {job[0] for job in jobs if job[0] is not None}
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="k3-prefetch", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _then_again(self, key: tuple, then, _base) -> None:
        """then(run) for a re-run computed before: the one held here, else the page's cached one (resume; computed
        again, under the model's lock, only if its cache has let it go)."""
        with self._cond:
            run = self._ready.get(key)
        then(run if run is not None else resume(*key))

    def take(self, key: tuple) -> K3Output | None:
        """The prefetched run for `key` (None when there is none), and a note that its asker now has it
        (the caller's cache keeps it, so it is not computed again)."""
        with self._cond:
            self._handed[key] = None
            while len(self._handed) > HANDED:
                self._handed.pop(next(iter(self._handed)))
            return self._ready.pop(key, None)

    def ready(self, key: tuple) -> bool:
        with self._cond:
            return key in self._ready

    def _next_job(self):
        """Wait until there is a wish and the server has been idle IDLE_S; return it (or None to stop)."""
        with self._cond:
            while True:
                while not self._wanted:
                    if self._stopping or not self._cond.wait(timeout=60):
                        return None                                  # stopped, or nothing asked for a minute
                if self._stopping:
                    return None
                quiet = time.monotonic() - _BUSY["until"]
                if _idle() and quiet >= IDLE_S:
                    return self._wanted.pop(0)
                self._cond.wait(timeout=max(IDLE_S - quiet, 0.05))

    def _work(self) -> None:
        while (job := self._next_job()) is not None:
            key, base, model = job[:3]
            then = job[3] if len(job) > 3 else None
            if key is None:                                          # nothing to compute on the model: then(base)
                try:
                    then(base)
                except Exception:                                    # a wish is only a wish
                    pass
                continue
            if not _LOCK.acquire(blocking=False):                   # a session got there first
                with self._cond:
                    self._wanted.insert(0, job)
                continue
            out = None
            try:
                if _idle():
                    with torch.inference_mode():
                        out = model.resume(base, key[1], options=key[2])
                    with self._cond:
                        self._ready[key] = out
                        while len(self._ready) > KEEP:       # the oldest the newest wishes do not name goes first
                            old = [k for k in self._ready if k not in self._named] or list(self._ready)
                            self._ready.pop(old[0])
                else:
                    with self._cond:
                        self._wanted.insert(0, job)
            except Exception:                                        # a wish is only a wish
                pass
            finally:
                _LOCK.release()
            if out is not None and then is not None and _idle():
                try:
                    then(out)
                except Exception:                                    # nor is what follows it
                    pass


_prefetcher = Prefetcher()
atexit.register(_prefetcher.stop)


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
