"""Prompt validation and the shared live model (no Streamlit runtime needed for these)."""
import pytest
import torch

from app import live
from app.live import MAX_CHARS, MAX_TOKENS, PRESETS, prepare_prompt
from model.k3 import RoutingOverride, RunOptions
from model.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.load()


@pytest.mark.parametrize("bad", ["", "   \n\t ", None])
def test_empty_prompts_get_a_message(tok, bad):
    out = prepare_prompt(bad, tok)
    assert isinstance(out, str) and "empty" in out


def test_huge_and_odd_prompts_are_capped_with_notices(tok):
    out = prepare_prompt("word " * 50_000, tok)
    assert len(out.ids) == MAX_TOKENS and len(out.notices) == 2
    assert str(MAX_CHARS) in out.notices[0].replace(",", "")
    odd = prepare_prompt("مرحبا 🙂 <script>alert(1)</script> \u202e", tok)
    assert len(odd.ids) == len(odd.pieces) and "<script>" in odd.text
    for text in PRESETS.values():
        p = prepare_prompt(text, tok)
        assert not p.notices and len(p.ids) <= 64


def test_forward_and_resume_are_cached_per_prompt_and_options():
    lv = live.live()
    ids = lv.tokenizer.encode(PRESETS["Code"])
    ov = RoutingOverride(top_k=3, knocked_out=(1, 2))
    base = live.forward(ids)
    assert live.forward(tuple(ids)) is base                                # one entry, whatever the form
    once = live.forward(ids, routing={40: ov}, quant=True)
    assert live.forward(ids, options=RunOptions({40: ov}, quant=True)) is once
    assert once is not base and once.options == RunOptions({40: ov}, quant=True)
    new = live.resume(ids, 40, RunOptions({40: ov}))
    assert live.resume(list(ids), 40, RunOptions(((40, ov),))) is new
    with torch.inference_mode():
        full = lv.model(torch.tensor([ids]), routing={40: ov})
    assert torch.equal(new.logits, full.logits)                            # resume = the full forward
    assert torch.equal(new.trace.experts(39), base.trace.experts(39))
    assert not set(new.trace.experts(40)[0].reshape(-1).tolist()) & {1, 2}


def test_no_full_collection_of_the_long_lived_heap_after_a_run():
    """Streamlit's default collects all generations after every script run; with torch and the model loaded
    that scan is ~0.2 s during which no session is answered. The app turns it off and, once the model is
    loaded, freezes the long-lived objects so the collector's own full passes skip them."""
    import gc
    import tomllib
    from pathlib import Path
    conf = tomllib.loads((Path(__file__).resolve().parents[1] / ".streamlit" / "config.toml").read_text())
    assert conf["runner"]["postScriptGC"] is False
    lv = live.live()
    assert gc.get_freeze_count() > 100_000                     # torch alone brings ~300,000 objects
    assert live.forward(lv.tokenizer.encode(PRESETS["Code"])).logits.shape[-1] == lv.model.cfg.vocab_size
    gc.collect()
    tracked = {id(o) for o in gc.get_objects()}                # what a full pass still scans: not the model
    assert id(lv.model) not in tracked and id(lv.model.layers[40].ffn.router) not in tracked
    assert id(torch.nn.functional) not in tracked              # nor the libraries


def _wait(cond, seconds=60.0):
    import time
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return False


def test_idle_prefetch_computes_the_nudge_ahead_and_resume_hands_it_over():
    lv = live.live()
    ids = tuple(lv.tokenizer.encode(PRESETS["Numbers"]))
    pf = live._prefetcher
    pf.enabled = True
    try:
        _prefetch_checks(lv, ids, pf)
    finally:
        pf.stop()                               # no wish of this test's left running into the next ones
        pf.enabled = live.os.environ.get("K3_PREFETCH", "1") != "0"


def _prefetch_checks(lv, ids, pf):
    import time

    from app import routing as rt
    from app.routing_cache import prefetch_neighbours, rerouted
    settings = rt.Rerouting()
    layer = 60
    built = []                                  # what the page builds of each prefetched run (views/routing.py)
    prefetch_neighbours(ids, layer, settings, expert=5, then=lambda nudged, run: built.append((nudged, run)))
    keys = [(ids, start, RunOptions(routing)) for start, routing in
            (n.plan(layer, lv.model.cfg) for n in rt.neighbours(settings, 5))]
    assert len(keys) == 4 and keys[0][2].routing == RoutingOverride(top_k=17, use_bias=True)
    assert _wait(lambda: all(pf.ready(k) for k in keys))
    ready = {k: pf._ready[k] for k in keys}
    assert _wait(lambda: len(built) == 4)       # then(nudged settings, its run), after each
    assert [n for n, _ in built] == rt.neighbours(settings, 5)
    assert all(run is ready[k] for (_, run), k in zip(built, keys))
    # what the page asks for next is the prefetched run itself, and it equals a full forward with the routing
    up = rerouted(ids, layer, rt.normalise(rt.Rerouting(top_k=17), lv.model.cfg)[0])
    assert up is ready[keys[0]] and not pf.ready(keys[0])
    ov = keys[0][2].routing                                    # from the viewed layer on
    with torch.inference_mode():
        full = lv.model(torch.tensor([ids]), routing={m: ov for m in lv.model.cfg.moe_layers if m >= layer})
    assert torch.equal(up.logits, full.logits)
    knocked = rerouted(ids, layer, rt.normalise(rt.Rerouting(knocked_out=(5,)), lv.model.cfg)[0])
    assert knocked is ready[keys[3]]
    # never beside a session's computation: while one runs (and for IDLE_S after), the wish waits
    other = (ids, 70, RunOptions(RoutingOverride(top_k=9)))
    with live.computing():
        pf.want([(other, live.forward(ids), lv.model)])
        time.sleep(0.5)
        assert not pf.ready(other)
    assert _wait(lambda: pf.ready(other))
    # nor between the computations of a job that a page waits for (the held-out routing), though the model is free
    from app import jobs
    awaited_wish = (ids, 75, RunOptions(RoutingOverride(top_k=10)))
    with live.awaited():
        pf.want([(awaited_wish, live.forward(ids), lv.model)])
        time.sleep(jobs.QUIET_S[jobs.Kind.PREFETCH] + 0.5)
        assert jobs.active("model") == 0 and not pf.ready(awaited_wish)
    assert _wait(lambda: pf.ready(awaited_wish))
    # the newest wish list replaces the older one
    late = [(ids, 80, RunOptions(RoutingOverride(top_k=k))) for k in (2, 3)]
    with live.computing():
        pf.want([(late[0], live.forward(ids), lv.model)])
        pf.want([(late[1], live.forward(ids), lv.model)])
    assert _wait(lambda: pf.ready(late[1]))
    time.sleep(0.5)
    assert not pf.ready(late[0])


def test_neighbours_are_one_nudge_away():
    from app import routing as rt
    s = rt.Rerouting(top_k=1, knocked_out=(3,))
    assert rt.neighbours(s, expert=3) == [rt.Rerouting(top_k=2, knocked_out=(3,)),
                                          rt.Rerouting(top_k=1, use_bias=False, knocked_out=(3,))]
    assert rt.neighbours(rt.Rerouting(dense=True)) == []
    assert rt.neighbours(rt.Rerouting(), expert=9)[-1] == rt.Rerouting(knocked_out=(9,))


def test_derived_values_are_computed_once_per_run_and_go_with_it():
    import gc

    from app import live

    class Run:                                    # stands for a K3Output: any object the caches hand out again
        pass

    calls = []

    def make(tag):
        def f():
            calls.append(tag)
            return {"spec": tag}
        return f
    a, b = Run(), Run()
    first = live.derived(a, ("chart", 1), make("a1"))
    assert live.derived(a, ("chart", 1), make("again")) is first and calls == ["a1"]     # the same object again
    assert live.derived(a, ("chart", 2), make("a2")) == {"spec": "a2"}                  # another key: computed
    assert live.derived(b, ("chart", 1), make("b1")) == {"spec": "b1"}                  # another run: its own
    assert calls == ["a1", "a2", "b1"]
    rid = id(a)
    del a, first
    gc.collect()
    assert rid not in live._DERIVED and id(b) in live._DERIVED                        # gone with its run
    for i in range(live.DERIVED_PER_RUN + 5):
        live.derived(b, ("many", i), make(i))
    assert len(live._DERIVED[id(b)]) == live.DERIVED_PER_RUN                           # bounded per run


def test_the_background_jobs_stop_at_exit_between_jobs():
    """At exit (atexit) the queue drops its waiting jobs and waits for the one under way: a thread left inside
    torch while the interpreter finalises aborted the test process (exit status 134)."""
    import threading
    import time

    from app import jobs
    started, release = threading.Event(), threading.Event()
    done = []
    pf = live.Prefetcher(group="test-stop")
    pf.enabled = True

    def slow(base):
        started.set()
        release.wait(5)
        done.append(base)
    pf.want([(None, "base", None, slow), (None, "never", None, done.append)])
    assert started.wait(10)
    threading.Timer(0.3, release.set).start()
    t0 = time.monotonic()
    jobs.stop()
    assert done == ["base"] and time.monotonic() - t0 >= 0.25     # waited for the job under way, ran no other
    assert jobs.waiting() == [] and jobs._state["thread"] is None


def test_a_class_students_next_step_is_prepared_beside_the_others():
    """Each student's next lesson step (app/classes_ui.py prepare_next): its re-run and the page's charts computed
    while idle, one wish per student kept beside the others', and the page's own call handed the same run."""
    from app import routing as rt
    from app.routing_cache import rerouted
    from app.routing_view import run_view, step_ahead
    lv = live.live()
    cfg = lv.model.cfg
    pf = live._ahead
    pf.enabled = True
    try:
        prompts = [live.prepare_prompt(t, lv.tokenizer) for t in (PRESETS["Numbers"], "Ein Satz, der anders ist.")]
        # the sparse-experts lesson's step 4: top-k 8 at layer 46 only
        runs = [step_ahead(p, None, {"layer": "46", "k": "8", "scope": "only"}, "light") for p in prompts]
        assert [len(r) for r in runs] == [1, 1]
        start, options = runs[0][0][:2]
        assert start == 46 and dict(options.routing) == {46: RoutingOverride(top_k=8, use_bias=True)}
        assert step_ahead(prompts[0], None, {"layer": "46"}, "light") == []     # the model's own routing: nothing
        with live.computing():                  # both asked while a computation runs: neither replaces the other
            for who, p, r in zip(("A:1", "A:2"), prompts, runs):
                live.prefetch_for(who, p.ids, r)
        keys = [(tuple(p.ids), 46, options) for p in prompts]
        assert _wait(lambda: all(pf.ready(k) for k in keys))
        settings = rt.normalise(rt.Rerouting(top_k=8, scope="only"), cfg)[0]
        for p, k in zip(prompts, keys):
            ready = pf._ready[k]
            assert rerouted(p.ids, 46, settings) is ready and not pf.ready(k)      # handed to the page's cache
            # the page's results find their charts built (app.live.derived keeps them beside the run)
            assert _wait(lambda: ("changed", len(p.ids) - 1, 46, None) in live._DERIVED.get(id(ready), {}))
            rv = run_view(live.forward(p.ids), ready, len(p.ids) - 1, 46, None, "light", True)
            assert rv.changed is live._DERIVED[id(ready)][("changed", len(p.ids) - 1, 46, None)][1]
            with torch.inference_mode():
                full = lv.model(torch.tensor([p.ids]), routing={46: RoutingOverride(top_k=8)})
            assert torch.equal(ready.logits, full.logits)
    finally:
        pf.stop()
        pf.enabled = live.os.environ.get("K3_PREFETCH", "1") != "0"
