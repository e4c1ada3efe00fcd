"""The server's background work: one queue of typed jobs, one worker thread, one idle clock.

Three kinds of job, in the order they run:
- AWAITED: a page will wait for it soon (the Routing explorer's held-out routing, started once any page has
  loaded the model). It starts as soon as the worker is free; its own computations let a visitor's go first.
- PREFETCH: what a session will most likely ask next (a re-run one nudge away from the Routing explorer's
  view, app/live.py). It starts once no visitor's computation has run for QUIET_S[PREFETCH] (a page still
  drawing its charts does not hold it back), and the newest page's wishes replace the older ones (`replace`).
- WARM: a page's default view, before anyone asks (app/warm.py). It starts after QUIET_S[WARM] of quiet.

The idle clock counts what visitors make the server do: page runs (streamlit_app.py wraps each in
`activity("page")`), computations on the live model (app.live.computing) and long jobs a page waits for
(`activity("awaited")`). What the worker itself computes is not a visitor's and does not count, so one
warm-up task does not make the next wait. A job that starts waits for nothing more: a visitor who comes
meanwhile waits for at most the one job under way (each is short: a re-run ~0.3 s, a warm-up task ~1-2 s).

Python threads share one interpreter lock; the compiled kernels release it, about half of a forward, so two
forwards in two threads run 1.2-1.5x faster than one after the other (docs/PERFORMANCE.md). The model still
computes one thing at a time per process (app.live.computing) and one worker serves the jobs; the server's second
core is used by a second replica (`python -m deploy`, docs/DEPLOY.md).
"""
from __future__ import annotations

import atexit
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import IntEnum

_LOG = logging.getLogger(__name__)


class Kind(IntEnum):
    AWAITED = 0
    PREFETCH = 1
    WARM = 2


QUIET_S = {Kind.AWAITED: 0.0, Kind.PREFETCH: 0.5, Kind.WARM: 3.0}
# what a kind waits to be quiet: the prefetch only for computations (a page still drawing its charts is the
# moment to compute its next nudge), the warm-up for page runs too
QUIET_OF = {Kind.AWAITED: (), Kind.PREFETCH: ("model", "awaited"), Kind.WARM: ("page", "model", "awaited")}
WORKER = "k3-jobs"


@dataclass(order=True)
class Job:
    kind: Kind
    seq: int
    name: str = field(compare=False)
    fn: Callable[[], object] = field(compare=False, repr=False)
    group: str | None = field(default=None, compare=False)
    done: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)
    error: str | None = field(default=None, compare=False)
    seconds: float | None = field(default=None, compare=False)


_cond = threading.Condition()
_queue: list[Job] = []                      # a heap: kind first, then submission order
_seq = itertools.count()
_running: list[Job] = []                    # the job under way (at most one)
_state = {"thread": None, "stopping": False}

# the idle clock: visitors' page runs, computations and awaited jobs under way, and when the last of each ended
_CLOCK = {"page": 0, "model": 0, "awaited": 0, "until": 0.0}
_UNTIL = {"page": 0.0, "model": 0.0, "awaited": 0.0}
_CLOCK_LOCK = threading.Lock()


# ---- the idle clock ------------------------------------------------------------------------------------

def on_worker() -> bool:
    return threading.current_thread().name == WORKER


@contextmanager
def activity(what: str = "model") -> Iterator[None]:
    """Around something a visitor makes the server do: "page" (a page run), "model" (a computation on the
    live model), "awaited" (a long job a page waits for). On the worker thread it counts nothing."""
    if what not in ("page", "model", "awaited"):
        raise ValueError(f"activity is page, model or awaited, not {what!r}")
    counted = not on_worker()
    if counted:
        with _CLOCK_LOCK:
            _CLOCK[what] += 1
    try:
        yield
    finally:
        if counted:
            with _CLOCK_LOCK:
                _CLOCK[what] -= 1
                _CLOCK["until"] = _UNTIL[what] = time.monotonic()
            with _cond:
                _cond.notify_all()


def active(what: str | None = None) -> int:
    """Visitors' activities under way now (of one kind, or all)."""
    with _CLOCK_LOCK:
        return _CLOCK[what] if what else _CLOCK["page"] + _CLOCK["model"] + _CLOCK["awaited"]


def idle_for(what: tuple[str, ...] = ("page", "model", "awaited")) -> float:
    """Seconds since the last visitor activity (of these kinds) ended; 0 while one is under way."""
    with _CLOCK_LOCK:
        if any(_CLOCK[w] for w in what):
            return 0.0
        last = _CLOCK["until"] if len(what) == 3 else max((_UNTIL[w] for w in what), default=0.0)
        return time.monotonic() - last


def _may_start(job: Job) -> float:
    """0 when `job` may start now, else how long to wait before looking again."""
    if job.kind == Kind.AWAITED:
        return 0.0
    quiet = idle_for(QUIET_OF[job.kind])
    if quiet >= QUIET_S[job.kind]:
        return 0.0
    return max(QUIET_S[job.kind] - quiet, 0.05)


# ---- the queue -----------------------------------------------------------------------------------------

def submit(kind: Kind, name: str, fn: Callable[[], object], group: str | None = None) -> Job:
    """Queue fn() to run on the worker; returns the job (wait on job.done)."""
    job = Job(Kind(kind), next(_seq), name, fn, group)
    with _cond:
        heapq.heappush(_queue, job)
        _ensure_worker()
        _cond.notify_all()
    return job


def replace(group: str, kind: Kind, items: list[tuple[str, Callable[[], object]]]) -> list[Job]:
    """Drop the waiting jobs of `group` and queue these (name, fn) in their place, in order."""
    with _cond:
        _drop_locked(group)
        jobs = [Job(Kind(kind), next(_seq), name, fn, group) for name, fn in items]
        for job in jobs:
            heapq.heappush(_queue, job)
        if jobs:
            _ensure_worker()
        _cond.notify_all()
    return jobs


def drop(group: str) -> None:
    """Drop the waiting jobs of `group` (the one under way finishes)."""
    with _cond:
        _drop_locked(group)


def _drop_locked(group: str) -> None:
    kept = [j for j in _queue if j.group != group]
    for j in _queue:
        if j.group == group:
            j.error = "dropped"
            j.done.set()
    _queue[:] = kept
    heapq.heapify(_queue)


def waiting(group: str | None = None) -> list[str]:
    """Names of the jobs waiting (of one group, or all), in the order they will run."""
    with _cond:
        return [j.name for j in sorted(_queue) if group is None or j.group == group]


def settle(group: str | None = None, timeout: float = 10.0) -> bool:
    """Wait until the job under way (of `group`, when given) has finished; True if it did in time."""
    deadline = time.monotonic() + timeout
    with _cond:
        while any(group is None or j.group == group for j in _running):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _cond.wait(left)
    return True


def stop(timeout: float = 10.0) -> None:
    """At exit: drop every waiting job and wait for the one under way (a thread left inside torch while the
    interpreter finalises aborts the process)."""
    with _cond:
        for j in _queue:
            j.error = "dropped"
            j.done.set()
        _queue.clear()
        _state["stopping"] = True
        _cond.notify_all()
        thread = _state["thread"]
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout)
    with _cond:
        _state["stopping"] = False
        _state["thread"] = None


atexit.register(stop)


def _ensure_worker() -> None:
    t = _state["thread"]
    if t is None or not t.is_alive():
        t = threading.Thread(target=_work, name=WORKER, daemon=True)
        _state["thread"] = t
        t.start()


def _next() -> Job | None:
    with _cond:
        while True:
            if _state["stopping"]:
                return None
            if not _queue:
                if not _cond.wait(timeout=60) and not _queue:
                    _state["thread"] = None              # nothing asked for a minute: the thread ends (under the
                    return None                          # lock, so the next submit starts another)
                continue
            wait = _may_start(_queue[0])
            if wait == 0.0:
                job = heapq.heappop(_queue)
                _running.append(job)
                return job
            _cond.wait(wait)


def _work() -> None:
    while (job := _next()) is not None:
        t0 = time.perf_counter()
        try:
            job.fn()
        except Exception as e:                            # noqa: BLE001 - a job's caller computes it itself
            job.error = f"{type(e).__name__}: {e}"
            _LOG.warning("background job %s failed: %s", job.name, e)
        finally:
            job.seconds = time.perf_counter() - t0
            with _cond:
                _running.remove(job)
                job.done.set()
                _cond.notify_all()
