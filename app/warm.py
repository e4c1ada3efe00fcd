"""Warming a fresh server: what the pages' default views compute once per process, computed in the
background after the first page a person opens, so the next pages they open find it ready. A server started as
serve.py does the part a first visit waits for before it answers anyone (before_first_visit).

Without it, a page's first visit after a server start pays for it itself (this 2-core machine): the Routing
explorer ~3.5 s to route the held-out sample, Inside one layer ~1.8 s to load the live model, the balancing lab
~1 s to simulate its default setting and ~1.7 s for the live router's scores, the Quantization lab ~1-1.5 s
per experiment, Attention Residuals ~1 s for its Full-AttnRes variant. Every task
here calls the page's own cached function with the page's own default input, so what it computes is
what the page would have computed; it fills the caches that every session shares (st.cache_resource /
st.cache_data) and nothing else. Runs once per process; a failing task is skipped
(the page then computes it itself, and shows its own message). K3_WARM=0 turns it off (the tests do).

The tasks are background jobs of kind WARM (app/jobs.py): each starts only once the server has been quiet
(no visitor's page run or computation on the live model) for IDLE_S, so a visitor who comes meanwhile waits
for at most the one task already running. Two start sooner, as jobs of kind AWAITED: loading the live model,
FIRST_PAGE_S after the first page run (_model_now), and the held-out routing, which the Routing explorer's first
view waits for, once the model is loaded (model_loaded; read from disk after the first start, app/routing_cache.py).
"""
from __future__ import annotations

import ast
import importlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from app import jobs

_LOG = logging.getLogger(__name__)
_START_LOCK = threading.Lock()
_started = False
DONE = threading.Event()          # set when every task has run (or failed)
IDLE_S = jobs.QUIET_S[jobs.Kind.WARM]
# Right after a fresh server's first page run, that visitor's browser fetches the code of the page's elements
# (~50 files, charts among them) from this server; importing torch holds the interpreter for ~1 s, and those
# files then came ~0.5 s late. Waiting this long before loading the model let them through: the Overview's first
# visit 2.96-3.51 -> 2.55-2.67 s and the Routing explorer's right after it 2.02-3.52 -> 2.43-2.51 s (three runs
# each, bench/bench_interactions.py --parts first --pages overview,routing). A page that needs the model sooner
# loads it itself.
FIRST_PAGE_S = 0.6
RESULTS: dict[str, float | str] = {}    # what start()'s tasks took, or why they failed


def page_run():
    """Around one run of a page (streamlit_app.py): the background jobs wait while any is under way."""
    return jobs.activity("page")


def live_module():
    """app.live once it is fully imported, else None. It is imported by the first page that needs it, on that
    session's thread, so another thread may find it in sys.modules half initialised (no LOADED, no computing
    yet): such a module is not ready, and nothing has computed on the model."""
    live = sys.modules.get("app.live")
    if live is None or getattr(getattr(live, "__spec__", None), "_initializing", False):   # the import system's mark
        return None
    return live if hasattr(live, "LOADED") and hasattr(live, "computing") else None


def idle_for() -> float:
    """Seconds since the server last ran a page or computed on the live model for a visitor; 0 while it does."""
    return jobs.idle_for()


def _live() -> None:
    from app.live import live
    live()


def _kernels() -> None:
    # numba's start and the compiled kernels loaded from its cache; forwards use them from then on (model/fast.py)
    from model import fast
    if not fast.warm():
        raise RuntimeError("the compiled kernels are off (K3_FAST=0) or numba is missing: the torch references answer")


def _default_forward() -> None:
    from app.live import DEFAULT_PRESET, PRESETS, forward, live, prepare_prompt
    forward(prepare_prompt(PRESETS[DEFAULT_PRESET], live().tokenizer).ids)


def _heldout() -> None:
    from app.routing_cache import heldout
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


def _process_server() -> None:
    # not a cache: the helper process that forks the Expert parallelism page's ranks with torch already
    # imported (model/fork_server.py), so that page's first run does not wait ~2 s for it to start
    from model import fork_server
    if fork_server.server() is None:
        raise RuntimeError(fork_server.failed())


def _quant_experiment(variant: str) -> Callable[[], None]:
    def task() -> None:
        from app.live import DEFAULT_PRESET, PRESETS, live, prepare_prompt
        from app.quantization_cache import cached_heldout_comparison, cached_prompt_comparison
        cached_heldout_comparison(variant)
        cached_prompt_comparison(prepare_prompt(PRESETS[DEFAULT_PRESET], live().tokenizer).ids, variant)
    return task


# app.quantization_behaviour's VARIANTS, named here because importing that module imports torch, which the first page
# must not wait for (tests/test_warm.py checks the two agree)
QUANT_EXPERIMENTS = ("act", "coarse", "router", "all")

# in the guided tour's order of the pages that need them (app/navigation.py PAGES); one task per experiment of
# the Quantization lab, so a visitor who comes meanwhile waits for one (~1 s), not four
TASKS: tuple[tuple[str, Callable[[], None]], ...] = (
    ("the live model", _live),
    ("the model's compiled kernels", _kernels),
    ("the default prompt's forward", _default_forward),
    ("the held-out sample's routing", _heldout),
    ("the Full-AttnRes variant on the default prompt", _full_attnres),
    ("the balancing lab's default simulation", _balance),
    ("the balancing lab's live router scores", _balance_live),
    ("the Expert parallelism page's process server", _process_server),
    *((f"the Quantization lab's experiment {v!r}", _quant_experiment(v)) for v in QUANT_EXPERIMENTS),
)


def page_modules(root: Path | None = None) -> list[str]:
    """Import every module of this app that the pages and the entry script import (read from their source), and
    return their names: a page's first run then finds them loaded."""
    root = root or Path(__file__).resolve().parent.parent
    names: set[str] = set()
    for path in [root / "streamlit_app.py", *sorted((root / "views").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                top = node.module.split(".")[0]
                if top in ("app", "model"):
                    names.add(node.module)
                    folder = root.joinpath(*node.module.split("."))      # `from app import live`: a module
                    names.update(f"{node.module}.{a.name}" for a in node.names if (folder / f"{a.name}.py").exists())
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names if a.name.split(".")[0] in ("app", "model"))
    for name in sorted(names):
        importlib.import_module(name)
    return sorted(names)


# what a fresh server's first visitor waited for on a page opened directly (a shared link), in order: the libraries
# the pages import (torch, SQLAlchemy, altair... ~3 s), the live model, the compiled kernels, the held-out routing
# (the Routing explorer's first view), the default prompt's forward (the default view of every page that runs it),
# and the two default views that took a second or more: the balancing lab's simulation and the Quantization lab's
# first experiment (its default, views/quantization.py)
BEFORE_FIRST_VISIT: tuple[tuple[str, Callable[[], None]], ...] = (
    ("the pages' modules", page_modules),
    ("the live model", _live),
    ("the model's compiled kernels", _kernels),
    ("the held-out sample's routing", _heldout),
    ("the default prompt's forward", _default_forward),
    ("the balancing lab's default simulation", _balance),
    ("the Quantization lab's experiment 'act'", _quant_experiment("act")),
)




def before_first_visit() -> dict[str, float | str]:
    """At a server's start, before it answers anyone (serve.py): BEFORE_FIRST_VISIT now, so that the first visitor
    of any page, a shared link to the Routing explorer included, finds it done. The rest of the warm-up is queued
    after the first page run, as on any server (start()): queued now, it found the server quiet when the first
    visitor came and took the interpreter from that visit. Returns {step: seconds, or why it failed} (a failed
    step is left to the page, which says why); nothing when K3_WARM=0."""
    if os.environ.get("K3_WARM", "1") == "0":
        return {}
    done: dict[str, float | str] = {}
    for name, task in BEFORE_FIRST_VISIT:
        _task(name, task, done)()
    RESULTS.update(done)
    return done


def _task(name: str, task: Callable[[], None], done: dict) -> Callable[[], None]:
    def job() -> None:
        t0 = time.perf_counter()
        try:
            task()
            done[name] = time.perf_counter() - t0
        except Exception as e:                  # noqa: BLE001 - the page computes it itself and says why
            done[name] = f"{type(e).__name__}: {e}"
            _LOG.warning("warming %s failed: %s", name, e)
    return job


def submit(tasks=TASKS, done: dict | None = None) -> list[jobs.Job]:
    """Queue the tasks as background jobs (each after the server has been quiet IDLE_S), then one that sets
    DONE; `done` collects {name: seconds the task took, or why it failed}."""
    done = RESULTS if done is None else done
    queued = [jobs.submit(jobs.Kind.WARM, f"warm: {name}", _task(name, task, done)) for name, task in tasks]
    return queued + [jobs.submit(jobs.Kind.WARM, "warm: done", DONE.set)]


def run(tasks=TASKS, give_way: bool = True) -> dict[str, float | str]:
    """Run the tasks and return {name: seconds the task took, or why it failed}: as background jobs that wait
    for a quiet server (give_way), or here and now."""
    done: dict[str, float | str] = {}
    if give_way:
        for job in submit(tasks, done):
            job.done.wait()
        return done
    for name, task in tasks:
        _task(name, task, done)()
    DONE.set()
    return done


def model_loaded() -> bool:
    """After each page run (streamlit_app.py): once a page has loaded the live model, start routing the
    held-out sample in the background (app.routing_cache.heldout_soon; once per process). The Routing explorer waits
    for it at the end of its first view, and it is the slowest of these tasks (1.6-1.9 s), so it does not wait
    for an idle server as the tasks above do; each of its two forwards still lets a visitor's computation go
    first. Visiting Inside one layer and then the explorer at once, the explorer's first view ended ~4 s after
    the held-out routing started when the explorer itself started it. False when not started now."""
    if os.environ.get("K3_WARM", "1") == "0":
        return False
    live = live_module()
    if live is None or not live.LOADED.is_set():
        return False
    from app.routing_cache import heldout_soon
    return heldout_soon()


def start() -> bool:
    """Queue the warm-up, once per process (later calls do nothing); False when it was not started
    now (already started, or K3_WARM=0)."""
    global _started
    with _START_LOCK:
        if os.environ.get("K3_WARM", "1") == "0" or _started:
            return False
        _started = True
    jobs.submit(jobs.Kind.AWAITED, "warm: the live model, now", _model_now)
    submit()
    return True


def _model_now() -> None:
    """The live model loaded FIRST_PAGE_S after the first page run (unless that page loaded it), not after a quiet
    moment: nearly every page needs it, and a visitor's second page often comes before the server has been quiet
    for IDLE_S. Then the held-out routing, which the Routing explorer's first view waits for."""
    live = live_module()
    if live is None or not live.LOADED.is_set():
        time.sleep(FIRST_PAGE_S)
    t0 = time.perf_counter()
    try:
        _live()
        RESULTS["the live model, at once"] = time.perf_counter() - t0
    except Exception as e:                      # noqa: BLE001 - the page loads it itself and says why
        RESULTS["the live model, at once"] = f"{type(e).__name__}: {e}"
        return
    model_loaded()
