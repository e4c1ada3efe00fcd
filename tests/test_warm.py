"""The server's warm-up (app/warm.py): it computes exactly what the pages' default views ask for (their
next visit hits the shared cache), it gives way to page runs and computations, and it starts once."""
import os
import subprocess
import sys
import threading
import time

import pytest

from app import jobs, warm
from tests.conftest import ROOT, open_app_page


def test_every_task_runs():
    done = warm.run(give_way=False)
    assert set(done) == {name for name, _ in warm.TASKS}
    failed = {name: why for name, why in done.items() if isinstance(why, str)}
    assert not failed, failed
    assert warm.DONE.is_set()


def test_the_balancing_lab_default_view_is_what_warming_computed(monkeypatch):
    """After warming, the page's first visit must not simulate again: the page's default call and the
    warm-up's are the same cache entry. (A page default changed without app.balance's would fail.)"""
    from app import balance
    warm.run([t for t in warm.TASKS if t[1] is warm._balance], give_way=False)

    def refuse(*a, **k):
        raise AssertionError("the page simulated again: its default is not what app/warm.py computed")
    monkeypatch.setattr(balance, "continue_runs", refuse)
    open_app_page("views/balance.py")


def test_the_routing_explorer_held_out_table_is_what_warming_computed(monkeypatch):
    from app import routing_cache
    warm.run([t for t in warm.TASKS if t[1] in (warm._live, warm._heldout)], give_way=False)

    def refuse(*a, **k):
        raise AssertionError("the page routed the held-out sample again")
    monkeypatch.setattr(routing_cache, "heldout_summary", refuse)
    at = open_app_page("views/routing.py")
    assert any("Held-out text that scores it highest" in m.value for m in at.markdown)


def _run_in_thread(fn):
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_a_task_waits_while_a_page_runs():
    release, entered, ran = threading.Event(), threading.Event(), threading.Event()

    def page():
        with warm.page_run():
            entered.set()
            release.wait(30)
    p = _run_in_thread(page)
    assert entered.wait(10)
    assert warm.idle_for() == 0.0
    w = _run_in_thread(lambda: warm.run([("probe", ran.set)]))
    time.sleep(warm.IDLE_S + 0.5)
    assert not ran.is_set(), "the task ran while a page was running"
    release.set()
    p.join(10)
    w.join(30)
    assert ran.is_set()
    assert warm.idle_for() >= warm.IDLE_S


def test_the_warm_ups_own_computation_does_not_make_it_wait(monkeypatch):
    """Only visitors' page runs and computations count: after a task that computed on the model the next
    task need not wait IDLE_S again (it did: the tasks were 3 s apart even on an empty server)."""
    from app import jobs, live
    monkeypatch.setitem(jobs._CLOCK, "until", time.monotonic() - 100)

    def computes():
        with live.computing():
            pass
    t0 = time.monotonic()
    warm.run([("computes", computes), ("again", computes)])        # as background jobs, each after a quiet spell
    assert time.monotonic() - t0 < warm.IDLE_S
    assert warm.idle_for() > 50
    with live.computing():                                          # a visitor's computation now
        assert warm.idle_for() == 0.0
    assert warm.idle_for() < 5                                      # and it counts once it has ended


def test_a_polite_computation_lets_a_waiting_one_go_first():
    """computing_politely (the held-out routing's guard) does not start while another computation on
    the model is under way or waiting for it."""
    from app import live
    order, release, inside = [], threading.Event(), threading.Event()

    def session():
        with live.computing():
            inside.set()
            release.wait(30)
            order.append("session")

    def polite():
        with live.computing_politely():
            order.append("polite")
    s = _run_in_thread(session)
    assert inside.wait(10)
    p = _run_in_thread(polite)
    time.sleep(0.3)
    assert order == []
    release.set()
    s.join(10)
    p.join(10)
    assert order == ["session", "polite"]


def test_a_polite_computation_does_not_starve_on_a_server_that_is_never_idle(monkeypatch):
    """With another computation always under way (a class at work), it takes its turn after POLITE_WAIT_S."""
    from app import live
    monkeypatch.setattr(live, "POLITE_WAIT_S", 0.2)
    from app import jobs
    monkeypatch.setitem(jobs._CLOCK, "model", jobs._CLOCK["model"] + 1)     # someone always computing
    done = threading.Event()

    def polite():
        with live.computing_politely():
            done.set()
    p = _run_in_thread(polite)
    assert done.wait(10), "it waited for an idle moment that never came"
    p.join(10)


def test_it_starts_once_and_not_when_turned_off(monkeypatch):
    monkeypatch.setenv("K3_WARM", "0")
    monkeypatch.setattr(warm, "_started", False)
    assert warm.start() is False
    monkeypatch.setenv("K3_WARM", "1")
    started = []
    monkeypatch.setattr(warm, "submit", lambda: started.append("tasks"))
    monkeypatch.setattr(warm, "_model_now", lambda: started.append("model"))
    assert warm.start() is True
    assert warm.start() is False
    deadline = time.monotonic() + 30
    while "model" not in started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert started == ["tasks", "model"]     # the model's job queued beside the tasks, and run at once


def test_the_model_loads_right_after_the_first_page_then_the_held_out_routing_starts(monkeypatch):
    """The model's own job (kind AWAITED: no waiting for a quiet server) loads the live model and then asks for
    the held-out routing, which the Routing explorer's first view waits for."""
    from app import live, routing_cache
    asked = []
    monkeypatch.setattr(routing_cache, "heldout_soon", lambda: asked.append(1) or True)
    monkeypatch.setenv("K3_WARM", "1")
    with jobs.activity("page"):                     # a page still running: a WARM task would wait, this does not
        job = jobs.submit(jobs.Kind.AWAITED, "test: the model now", warm._model_now)
        assert job.done.wait(120)
    assert live.LOADED.is_set() and asked == [1]
    assert isinstance(warm.RESULTS["the live model, at once"], float)


def test_the_held_out_routing_starts_once_a_page_has_loaded_the_model(monkeypatch):
    """After a page run, once the live model is loaded (and only then, and not with K3_WARM=0), the held-out
    routing starts in the background, without waiting for an idle server as the warm-up's tasks do."""
    from app import live, routing_cache
    asked = []
    monkeypatch.setattr(routing_cache, "heldout_soon", lambda: asked.append(1) or True)
    monkeypatch.setenv("K3_WARM", "1")
    live.live()
    assert live.LOADED.is_set()                                      # set by the load
    live.LOADED.clear()
    try:
        assert warm.model_loaded() is False and asked == []          # no page has loaded the model yet
        live.LOADED.set()
        monkeypatch.setenv("K3_WARM", "0")
        assert warm.model_loaded() is False and asked == []
        monkeypatch.setenv("K3_WARM", "1")
        assert warm.model_loaded() is True and asked == [1]
    finally:
        live.LOADED.set()


@pytest.mark.parametrize("bad", [RuntimeError("no checkpoint"), ValueError("odd")])
def test_a_failing_task_is_reported_and_the_next_one_runs(bad):
    ran = []

    def fails():
        raise bad
    done = warm.run([("fails", fails), ("next", lambda: ran.append(1))], give_way=False)
    assert isinstance(done["fails"], str) and str(bad) in done["fails"]
    assert ran == [1] and isinstance(done["next"], float)


def test_the_first_page_runs_without_torch():
    """The Overview (the first page, with the sidebar's glossary and the tour) imports no torch: a first
    visit does not wait for it (~1.7 s here); the warm-up imports it afterwards, in the background."""
    code = ("import sys\n"
            "from streamlit.testing.v1 import AppTest\n"
            f"at = AppTest.from_file({str(ROOT / 'streamlit_app.py')!r}, default_timeout=300).run()\n"
            "assert not at.exception, [e.value for e in at.exception]\n"
            "assert [t.value for t in at.title] == ['Kimi K3 at a glance'], [t.value for t in at.title]\n"
            "print('torch' if 'torch' in sys.modules else 'no torch')\n")
    env = {**os.environ, "K3_WARM": "0"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "no torch"


def test_a_half_imported_live_module_is_not_ready(monkeypatch):
    """The first page imports app.live on its own thread; the warming thread may meanwhile find it in
    sys.modules half initialised (it once raised "partially initialized module 'app.live' has no attribute
    'LOADED'" into a visitor's page). Such a module counts as not loaded and not busy."""
    import importlib.machinery
    import types
    half = types.ModuleType("app.live")
    half.__spec__ = importlib.machinery.ModuleSpec("app.live", None)
    half.__spec__._initializing = True                 # what the import system marks while the module runs
    monkeypatch.setitem(sys.modules, "app.live", half)
    monkeypatch.setenv("K3_WARM", "1")
    assert warm.model_loaded() is False
    assert warm.idle_for() >= 0.0
    bare = types.ModuleType("app.live")                 # no spec mark, no attributes yet
    monkeypatch.setitem(sys.modules, "app.live", bare)
    assert warm.model_loaded() is False
    assert warm.idle_for() >= 0.0


def test_the_warm_up_computes_every_experiment_of_the_quantization_lab():
    from app.quantization_behaviour import VARIANTS
    assert set(warm.QUANT_EXPERIMENTS) == set(VARIANTS)
    names = [name for name, _ in warm.TASKS]
    assert all(any(repr(v) in n for n in names) for v in VARIANTS)


def test_before_the_first_visit_the_pages_libraries_the_model_and_its_default_views_are_loaded(monkeypatch):
    from app import routing_cache
    from app.page_controls import link_controls
    monkeypatch.setenv("K3_WARM", "0")
    assert warm.before_first_visit() == {}                           # the tests' servers start at once
    monkeypatch.setenv("K3_WARM", "1")
    done = warm.before_first_visit()
    assert list(done) == [name for name, _ in warm.BEFORE_FIRST_VISIT]
    failed = {name: why for name, why in done.items() if isinstance(why, str)}
    assert not failed, failed
    live = sys.modules["app.live"]
    assert live.LOADED.is_set() and routing_cache.heldout_ready()
    assert "the Quantization lab's experiment 'act'" in done       # the page's default experiment
    assert link_controls("views/quantization.py")["variant"].default == "act"


def test_the_pages_modules_are_what_the_pages_import():
    names = warm.page_modules()
    # what views/routing.py, views/layer.py and streamlit_app.py import, read here by hand
    assert {"app.routing_view", "app.routing_cache", "app.live", "app.layer_data", "app.classes_ui",
            "app.lesson_author_ui", "app.navigation"} <= set(names)
    assert all(n.split(".")[0] in ("app", "model") for n in names)
    assert all(n in sys.modules for n in names)


def test_serve_answers_once_the_first_visit_is_prepared():
    """`streamlit run serve.py` (the README's start): its health check answers only after the loading, which its
    log reports with every step done, and the page is served as `streamlit run streamlit_app.py` serves it."""
    import urllib.request

    from tests.conftest import free_port
    port = free_port()
    env = {**os.environ, "K3_WARM": "1", "K3_PREFETCH": "0"}
    log = ROOT / "var" / f"test-serve-{port}.log"
    log.parent.mkdir(exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "serve.py", "--server.headless", "true", "--server.address",
             "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        base, text = f"http://127.0.0.1:{port}/", ""
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if urllib.request.urlopen(base + "_stcore/health", timeout=1).read() == b"ok":
                    text = log.read_text()                  # read at the first answer
                    break
            except OSError:
                time.sleep(0.2)
        assert text, "serve.py did not answer its health check:\n" + log.read_text()[-3000:]
        assert "K3 Explorer: ready for the first visit in" in text and "failed" not in text, text[-3000:]
        import asyncio
        from concurrent.futures import ThreadPoolExecutor

        from deploy.protocol import warm as open_once
        with ThreadPoolExecutor(1) as pool:        # a loop of its own: an earlier test may have one running here
            run = pool.submit(asyncio.run, open_once(base, "routing")).result(timeout=300)
        assert run.ok, (run.status, run.exceptions)
        assert any("Routing" in t for t in run.texts), run.texts[:10]
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.unlink(missing_ok=True)
