"""The background queue (app/jobs.py): one worker, jobs by kind (awaited, prefetch, warm), each waiting for its
quiet spell on the one idle clock that visitors' page runs and computations move; the worker's own work does
not move it."""
import contextlib
import threading
import time

import pytest

from app import jobs


@pytest.fixture(autouse=True)
def quiet_clock(monkeypatch):
    long_ago = time.monotonic() - 100                                      # no visitor for a while
    monkeypatch.setitem(jobs._CLOCK, "until", long_ago)
    for what in jobs._UNTIL:
        monkeypatch.setitem(jobs._UNTIL, what, long_ago)
    yield
    jobs.stop()


def _blocker():
    started, release = threading.Event(), threading.Event()

    def block():
        started.set()
        release.wait(10)
    return started, release, block


def test_jobs_run_by_kind_then_in_the_order_given():
    started, release, block = _blocker()
    order = []
    first = jobs.submit(jobs.Kind.WARM, "block", block)
    assert started.wait(10)
    last = [jobs.submit(jobs.Kind.WARM, "warm 1", lambda: order.append("warm 1")),
            jobs.submit(jobs.Kind.PREFETCH, "prefetch", lambda: order.append("prefetch")),
            jobs.submit(jobs.Kind.WARM, "warm 2", lambda: order.append("warm 2")),
            jobs.submit(jobs.Kind.AWAITED, "awaited", lambda: order.append("awaited"))]
    assert jobs.waiting() == ["awaited", "prefetch", "warm 1", "warm 2"]
    release.set()
    assert first.done.wait(10) and all(j.done.wait(10) for j in last)
    assert order == ["awaited", "prefetch", "warm 1", "warm 2"]


@contextlib.contextmanager
def visitor(activity: str):
    """A visitor's page run or computation under way on another thread until the block ends; yields the
    time.monotonic() at which it is asked to end (set when the block exits)."""
    entered, leave, ended = threading.Event(), threading.Event(), []

    def run():
        with jobs.activity(activity):
            entered.set()
            leave.wait(10)
    threading.Thread(target=run, daemon=True).start()
    assert entered.wait(10)
    try:
        yield ended
    finally:
        ended.append(time.monotonic())
        leave.set()


@pytest.mark.parametrize("kind, activity", [(jobs.Kind.WARM, "page"), (jobs.Kind.PREFETCH, "model")])
def test_a_job_waits_for_its_quiet_spell_after_a_visitors_activity(kind, activity):
    ran = threading.Event()
    with visitor(activity) as ended:
        job = jobs.submit(kind, "probe", ran.set)
        time.sleep(jobs.QUIET_S[jobs.Kind.PREFETCH] + 0.3)
        assert not ran.is_set(), f"a {kind.name} job ran during a visitor's {activity}"
    assert job.done.wait(10)
    assert time.monotonic() - ended[0] >= jobs.QUIET_S[kind] - 0.05


@pytest.mark.parametrize("kind, activity", [(jobs.Kind.PREFETCH, "page"), (jobs.Kind.AWAITED, "model")])
def test_a_job_that_need_not_wait_runs_beside_a_visitors_activity(kind, activity):
    """The next nudge is computed while a page draws its charts (a page run that computes nothing); a job a page
    waits for runs at once."""
    with visitor(activity):
        assert jobs.submit(kind, "at once", lambda: None).done.wait(5)


def test_the_newest_wishes_replace_the_waiting_ones_of_their_group():
    started, release, block = _blocker()
    order = []
    jobs.submit(jobs.Kind.WARM, "block", block)
    assert started.wait(10)
    jobs.replace("g", jobs.Kind.PREFETCH, [("a", lambda: order.append("a")), ("b", lambda: order.append("b"))])
    other = jobs.submit(jobs.Kind.PREFETCH, "other group", lambda: order.append("other"), group="h")
    newest = jobs.replace("g", jobs.Kind.PREFETCH, [("c", lambda: order.append("c"))])
    assert jobs.waiting("g") == ["c"]
    release.set()
    assert newest[0].done.wait(10) and other.done.wait(10)
    assert sorted(order) == ["c", "other"]


def test_a_failing_job_is_logged_and_the_next_one_runs(caplog):
    bad = jobs.submit(jobs.Kind.AWAITED, "fails", lambda: 1 / 0)
    good = jobs.submit(jobs.Kind.AWAITED, "next", lambda: None)
    assert bad.done.wait(10) and good.done.wait(10)
    assert bad.error.startswith("ZeroDivisionError") and good.error is None
    assert "fails" in caplog.text


def test_the_workers_own_activity_does_not_move_the_clock():
    before = jobs._CLOCK["until"]

    def works():
        with jobs.activity("model"):
            assert jobs.active() == 0
    job = jobs.submit(jobs.Kind.AWAITED, "works", works)
    assert job.done.wait(10) and job.error is None
    assert jobs._CLOCK["until"] == before
    with jobs.activity("page"):
        assert jobs.active("page") == 1 and jobs.idle_for() == 0.0
    assert jobs._CLOCK["until"] > before
    with pytest.raises(ValueError):
        with jobs.activity("nap"):
            pass
