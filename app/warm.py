"""Warming a fresh server: what the pages' default views compute once per process, computed in the
background after the first page a person opens, so the next pages they open find it ready.

Without it, a page's first visit after a server start pays for it itself (this 2-core machine): the Routing
explorer ~3.5 s to route the held-out sample, Inside one layer ~1.8 s to load the live model, the balancing lab
~1 s to simulate its default setting and ~1.7 s for the live router's scores, the Quantization lab ~1-1.5 s
per experiment, Attention Residuals ~1 s for its Full-AttnRes variant. Every task
here calls the page's own cached function with the page's own default input, so what it computes is
what the page would have computed; it fills the caches that every session shares (st.cache_resource /
st.cache_data) and nothing else. Runs once per process, in one daemon thread; a failing task is skipped
(the page then computes it itself, and shows its own message). K3_WARM=0 turns it off (the tests do).

It gives way to people: each task starts only once no page run (streamlit_app.py wraps each in
page_run) and no computation on the live model (app.live.computing) has been under way for IDLE_S, so a
visitor who comes meanwhile waits for at most the one task already running. The held-out routing, which
the Routing explorer's first view waits for, starts sooner: once a page has loaded the model (model_loaded).
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_LOG = logging.getLogger(__name__)
_START_LOCK = threading.Lock()
_started = False
DONE = threading.Event()          # set when every task has run (or failed)
IDLE_S = 3.0
_RUNS = {"active": 0, "until": 0.0}   # page runs now, and when the last one ended
_RUNS_LOCK = threading.Lock()
_OWN = {"until": float("-inf")}      # when the warm-up's own last task ended (its computations are not a visitor's)


@contextmanager
def page_run() -> Iterator[None]:
    """Around one run of a page (streamlit_app.py): warming waits while any is under way."""
    with _RUNS_LOCK:
        _RUNS["active"] += 1
    try:
        yield
    finally:
        with _RUNS_LOCK:
            _RUNS["active"] -= 1
            _RUNS["until"] = time.monotonic()


def live_module():
    """app.live once it is fully imported, else None. It is imported by the first page that needs it, on that
    session's thread, so the warming thread may find it in sys.modules half initialised (no LOADED, no busy
    yet): such a module is not ready, and nothing has computed on the model."""
    live = sys.modules.get("app.live")
    if live is None or getattr(getattr(live, "__spec__", None), "_initializing", False):   # the import system's mark
        return None
    return live if hasattr(live, "LOADED") and hasattr(live, "busy") else None


def idle_for() -> float:
    """Seconds since the server last ran a page or computed on the live model for someone else than the
    warm-up; 0 while it does."""
    busy = [(_RUNS["active"], _RUNS["until"])]
    live = live_module()
    if live is not None:
        active, until = live.busy()
        if active or until > _OWN["until"]:               # else the last computation was a task's
            busy.append((active, until))
    if any(active for active, _ in busy):
        return 0.0
    return time.monotonic() - max(until for _, until in busy)


def _wait_idle() -> None:
    while (quiet := idle_for()) < IDLE_S:
        time.sleep(max(IDLE_S - quiet, 0.05))


def _live() -> None:
    from app.live import live
    live()


def _default_forward() -> None:
    from app.live import DEFAULT_PRESET, PRESETS, forward, live, prepare_prompt
    forward(prepare_prompt(PRESETS[DEFAULT_PRESET], live().tokenizer).ids)


def _heldout() -> None:
    from app.routing import heldout
    heldout()


def _full_attnres() -> None:
    from app.attnres import full_forward
    from app.live import DEFAULT_PRESET, PRESETS, live, prepare_prompt
    full_forward(prepare_prompt(PRESETS[DEFAULT_PRESET], live().tokenizer).ids)


def _balance() -> None:
    from app.balance import default_runs
    default_runs()


def _balance_live() -> None:
    from app.balance import DEFAULT_LAYER, live_pool
    live_pool(DEFAULT_LAYER)


def _quant_experiment(variant: str) -> Callable[[], None]:
    def task() -> None:
        from app.live import DEFAULT_PRESET, PRESETS, live, prepare_prompt
        from app.quant_lab import cached_heldout_comparison, cached_prompt_comparison
        cached_heldout_comparison(variant)
        cached_prompt_comparison(prepare_prompt(PRESETS[DEFAULT_PRESET], live().tokenizer).ids, variant)
    return task


# app.quant_lab's VARIANTS, named here because importing that module imports torch, which the first page
# must not wait for (tests/test_warm.py checks the two agree)
QUANT_EXPERIMENTS = ("act", "coarse", "router", "all")

# in the guided tour's order of the pages that need them (app/navigation.py PAGES); one task per experiment of
# the Quantization lab, so a visitor who comes meanwhile waits for one (~1 s), not four
TASKS: tuple[tuple[str, Callable[[], None]], ...] = (
    ("the live model", _live),
    ("the default prompt's forward", _default_forward),
    ("the held-out sample's routing", _heldout),
    ("the Full-AttnRes variant on the default prompt", _full_attnres),
    ("the balancing lab's default simulation", _balance),
    ("the balancing lab's live router scores", _balance_live),
    *((f"the Quantization lab's experiment {v!r}", _quant_experiment(v)) for v in QUANT_EXPERIMENTS),
)


def run(tasks=TASKS, give_way: bool = True) -> dict[str, float | str]:
    """Run the tasks in order (each after the server has been idle IDLE_S, with give_way): {name: seconds
    the task took, or why it failed}."""
    done: dict[str, float | str] = {}
    for name, task in tasks:
        if give_way:
            _wait_idle()
        t0 = time.perf_counter()
        try:
            task()
            done[name] = time.perf_counter() - t0
        except Exception as e:                  # noqa: BLE001 - the page computes it itself and says why
            done[name] = f"{type(e).__name__}: {e}"
            _LOG.warning("warming %s failed: %s", name, e)
        _OWN["until"] = time.monotonic()
    DONE.set()
    return done


def model_loaded() -> bool:
    """After each page run (streamlit_app.py): once a page has loaded the live model, start routing the
    held-out sample in the background (app.routing.heldout_soon; once per process). The Routing explorer waits
    for it at the end of its first view, and it is the slowest of these tasks (~2.7 s), so it does not wait
    for an idle server as the tasks above do; each of its two forwards still lets a visitor's computation go
    first. Visiting Inside one layer and then the explorer at once, the explorer's first view ended ~4 s after
    the held-out routing started when the explorer itself started it. False when not started now."""
    if os.environ.get("K3_WARM", "1") == "0":
        return False
    live = live_module()
    if live is None or not live.LOADED.is_set():
        return False
    from app.routing import heldout_soon
    return heldout_soon()


def start() -> bool:
    """Start the warming thread, once per process (later calls do nothing); False when it was not started
    now (already started, or K3_WARM=0)."""
    global _started
    with _START_LOCK:
        if os.environ.get("K3_WARM", "1") == "0" or _started:
            return False
        _started = True
    threading.Thread(target=run, name="k3-warm", daemon=True).start()
    return True
