"""A class on one server: do 40 students answering a lesson slow the app, and how soon does the teacher see them?

    python bench/class_capacity.py --students 40 --duration 600 --proxy 2    # the goal run (about 35 minutes)
    python bench/class_capacity.py --students 5 --duration 60                 # a quick look, one server
    python bench/class_capacity.py --students 40 --duration 180 --proxy 2 --postgres --json /tmp/class.json

The goal (docs/PERFORMANCE.md): a class of 40 students answering over 10 minutes, the teacher's dashboard
showing each answer within 2 s, and the students' interaction p95 unchanged from the app without a class.

Three phases on the same server(s), one after the other, so the comparison is one machine under one load
(`--phases` picks and orders them):

1. **mix**, no lesson: bench/capacity.py's students, unchanged (`capacity.run_level`): each opens the Routing
   explorer with its own prompt and, thinking 10-30 s between inputs, changes a control (65 %) or opens
   another page.
2. **alone**, the lesson without a class: the class's students, inputs and pages, each on their own. A class
   puts every student on the page of the teacher's step (a quarter of this lesson's time on the balancing lab,
   whose controls cost more than the Routing explorer's), so the mix is not the same app's baseline; this
   phase is. Each student opens the lesson's link, makes the same inputs as in the class (below), and when a
   follow timer would have seen the teacher's next step (every FOLLOW_S s, looked up without a server run)
   opens that step's link itself. What differs from the class is the class alone: the store, the follow
   fragment's reruns, the dashboard.
3. **class**: the same number of students (other prompts in each phase, so no phase finds another's model runs
   cached) in a class of the lesson sparse-experts, made directly in the store the servers use
   (`app.classes.Store.start` and `join`). Each opens the lesson's link with its seat and its own prompt,
   `routing?lesson=sparse-experts&lesson_step=1&class=CODE&seat=KEY&preset=own&text=...`, and after each
   think either answers the step's question if it has not (`--answer`, 40 %: types into the sidebar's
   answer box or picks an option, then presses Check: two fragment runs, as a browser's blur and click),
   presses Next once it has (`--next`, 10 %), or makes capacity's input (`capacity.page_input`). Meanwhile
   it reruns the panel's follow fragment every `classes_ui.FOLLOW_S` s, as the browser's timer does: the
   fragment's id comes from the run's `ForwardMsg.auto_rerun`, and the rerun is a `rerun_script` with that
   `fragment_id` and `is_auto_rerun`. One client speaks for one tab, one run at a time, so a timer that
   falls during an input fires when it ends (the browser would send it at once and the server would queue
   it behind the run).
   The teacher's session opens `classes?class=CODE&teacher=KEY`, reruns the dashboard fragment every
   `views/classes.py` REFRESH_S (1.0 s) the same way, and leads the class as in a lesson: "Students follow
   my step" on, and every `--step-every` s (default: the duration over the lesson's steps) "Next step" and
   a click on that step in the dashboard's step selector. Following the teacher, every student's follow
   fragment opens the new step's page within FOLLOW_S s: a burst of page runs, part of a class's load.

Measured, per phase: the students' interaction latency (capacity's: from the input message to the run's
`script_finished`, page controls only, so the phases compare the same kind of input; also by page), page opens and
navigations, errors (any run not finished, a traceback on the page, another student's prompt, an answer not
"Sent to your class"), the servers' CPU and peak RSS (capacity's capacity.Sampler) and the load average. For the
class: the Check, Next, follow and dashboard runs, and the **dashboard latency** of each answer: from the
end of the student's Check run (the answer is in the database by then: Check's callback writes it) until
the end of the first dashboard run of the teacher whose "N answered" for that step counts it. An answer's
place in the count is its rank by the store's time (`k3_answers.at`) among the step's answers. Only
answers to the step the dashboard shows can be seen there; answers to another step (a student still on
the previous one) are counted apart. The inputs of a lesson's phases are also reported in two groups: those
that started within AFTER_NEXT_S (15 s) after the teacher's Next step (or when it would have come), and the rest.

The database is a fresh SQLite file in a temporary folder (`K3_DATABASE_URL`; with --proxy passed to
`python -m deploy --database-url`), or --database-url, or --postgres: a private PostgreSQL cluster
(bench.harness.private_postgres; its own CPU is not in the server's column).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import re
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: E402
from streamlit.proto.WidgetStates_pb2 import WidgetState  # noqa: E402

from app import classes_ui, lessons  # noqa: E402
from app.classes import Store  # noqa: E402
from bench import capacity  # noqa: E402
from bench.harness import pct, postgres_bin, private_postgres  # noqa: E402
from deploy.protocol import Session, next_state  # noqa: E402

LESSON = "sparse-experts"
# lessons.load caches through Streamlit, which warns once when no script runs (here: always)
logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").setLevel(logging.ERROR)
AFTER_NEXT_S = 15.0        # the report's window after each Next step (every student's page opens the new step)
ANSWER_KEY = re.compile(r"^k3_lesson_answer_(?P<lesson>[a-z0-9-]+)_(?P<n>\d+)$")
SHOWN = re.compile(r"^\*\*Step (\d+):")
COUNT = re.compile(r"^(\d+) answered, (\d+) right\.")


class Tab(Session):
    """A Session that also runs the timers its browser tab would: `ForwardMsg.auto_rerun` (a fragment with
    run_every) sets one, `stop_auto_rerun` ends some, and a full run starts them afresh. The app's only such
    fragments are the panel's follow (classes_ui.FOLLOW_S) and the dashboard (views/classes.py REFRESH_S)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.timers: dict[str, float] = {}       # fragment id -> interval (s)
        self.due: dict[str, float] = {}          # fragment id -> when it fires next (perf_counter)
        self._set: dict[str, float] = {}
        self._stopped: set[str] = set()

    async def _run(self, bm):
        self._set, self._stopped = {}, set()
        run = await super()._run(bm)
        now = time.perf_counter()
        if run.status == "full":
            self.timers, self.due = {}, {}
        for f, interval in self._set.items():
            self.timers[f] = interval
            self.due.setdefault(f, now + interval)
        for f in self._stopped:
            self.timers.pop(f, None)
            self.due.pop(f, None)
        return run

    def next_due(self) -> float:
        return min(self.due.values(), default=float("inf"))

    async def fire_due(self):
        """Rerun every fragment whose timer is due; yields each Run. A timer that fell during a run fires once
        when it ends (the browser would have sent it, and the server queued it behind the run)."""
        for f in [f for f, t in self.due.items() if t <= time.perf_counter()]:
            if f not in self.due:                # a full run in between ended it
                continue
            self.due[f] = max(self.due[f] + self.timers[f], time.perf_counter())
            yield await self.tick(f)

    def _handle(self, msg, run, seen):
        t = msg.WhichOneof("type")
        if t == "auto_rerun":
            self._set[msg.auto_rerun.fragment_id] = msg.auto_rerun.interval
        elif t == "stop_auto_rerun":
            self._stopped.update(msg.stop_auto_rerun.fragment_ids)
        return super()._handle(msg, run, seen)

    async def tick(self, fragment_id: str):
        """What the browser's timer sends: rerun the fragment, no widget changed."""
        bm = BackMsg()
        cs = bm.rerun_script
        cs.query_string, cs.page_script_hash = self.query_string, self.page_script_hash
        cs.fragment_id, cs.is_auto_rerun = fragment_id, True
        cs.context_info.timezone, cs.context_info.locale = "UTC", "en-US"
        cs.context_info.url = self.http_base + "?" + self.query_string
        return await self._run(bm)

    def shown_page(self, fallback: str) -> str:
        return next((p for p, h in self.pages.items() if h == self.page_script_hash), fallback)

    def lesson_step(self) -> tuple[int, object | None]:
        """The step the lesson's panel shows (from its answer box's key) and that box."""
        for w in self.widgets.values():
            m = ANSWER_KEY.match(w.key)
            if m and m["lesson"] == LESSON:
                return int(m["n"]), w
        return 0, None


def answer_state(w, q: lessons.Question, rng: random.Random) -> WidgetState:
    """A plausible answer: a choice's option (right or not), a number or a word."""
    s = WidgetState(id=w.id)
    if w.kind == "radio":
        s.string_value = rng.choice(list(w.proto.options))
    elif q.kind == "number":
        s.string_value = str(q.answer if q.answer is not None and rng.random() < 0.6 else rng.randint(1, 120))
    else:
        s.string_value = rng.choice(list(q.answers) + ["no idea"])
    return s


def led_step(lesson: lessons.Lesson, args, t0: float, now: float) -> int:
    """The step the teacher leads to at `now`: one more every --step-every s, as teacher() clicks Next step."""
    return min(len(lesson.steps), 1 + int((now - t0) // args.step_every))


async def class_student(i: int, nickname: str, seat: str | None, code: str | None, lesson: lessons.Lesson,
                        level: capacity.Level, base: str, args, t0: float, stop_at: float, rng: random.Random,
                        checks: dict):
    """One student of the lesson. With a class (`code` and `seat`): led by the teacher through the panel's follow
    fragment. Alone (both None): the same lesson from its link without a class, the same inputs, and the step
    the teacher would lead to opened by the student's own link as soon as a follow timer would have seen it
    (every FOLLOW_S s, no server run for the look), so the two phases differ by the class alone."""
    own = f"zebra{i:03d}"
    page, answered = "routing", set()
    text = capacity.TEMPLATES[i % len(capacity.TEMPLATES)].format(i=i)
    in_class = code is not None

    def record(kind, what, run, ok=None, note=""):
        bad = capacity.foreign_markers(run.texts, own)
        good = run.ok and not bad and (ok is None or ok)
        note = f"saw {sorted(bad)[:3]}" if bad else (run.exceptions[0][:200] if run.exceptions else note)
        level.ops.append(capacity.Op(level.students, i, kind, page, what, run.seconds, run.status, good,
                                     run.bytes, time.perf_counter() - t0, "" if good else note, s.replica))

    await asyncio.sleep(rng.uniform(0, args.ramp))
    s = Tab(base, timeout=args.timeout)
    await s.connect()
    look_at = time.perf_counter() + rng.uniform(0, classes_ui.FOLLOW_S)       # alone: the emulated follow timer
    try:
        link = {"lesson": LESSON, "lesson_step": "1", "preset": "own", "text": text}
        run = await s.open(page, {**link, "class": code, "seat": seat} if in_class else link)
        n, box = s.lesson_step()
        # the link's step shows the student's own prompt; a class already led further opens its step's view
        record("open", page, run, box is not None and (n != 1 or any(own in t for t in run.texts)),
               "own prompt or the lesson's panel missing")
        while time.perf_counter() < stop_at:
            act_at = min(time.perf_counter() + rng.uniform(*args.think), stop_at)
            while (now := time.perf_counter()) < act_at:        # thinking; the panel's timer goes on
                due = s.next_due() if in_class else look_at
                if await s.wait_lost(max(0.0, min(due, act_at) - now)):
                    level.ops.append(capacity.Op(level.students, i, "lost", page, "websocket", 0.0, "disconnected",
                                                 False, 0, time.perf_counter() - t0, "", s.replica))
                    return
                if in_class:
                    async for run in s.fire_due():
                        page = s.shown_page(page)
                        record("follow", "follow", run)
                elif time.perf_counter() >= look_at:
                    look_at = max(look_at + classes_ui.FOLLOW_S, time.perf_counter())
                    led = led_step(lesson, args, t0, time.perf_counter())
                    if s.lesson_step()[0] != led:
                        page = lesson.steps[led - 1].page
                        run = await s.open(page, {**link, "lesson_step": str(led)})
                        record("follow", "follow", run, s.lesson_step()[0] == led, "the led step did not open")
            if time.perf_counter() >= stop_at:
                break
            n, box = s.lesson_step()
            q = lesson.steps[n - 1].question if n else None
            if box is not None and q is not None and n not in answered and rng.random() < args.answer:
                run = await s.set_widget(box, answer_state(box, q, rng))
                record("answer", box.key, run)
                check = s.find(box.key + "_check")
                if check is None:
                    continue
                run = await s.set_widget(check, next_state(check, rng))
                sent = any("Sent to your class" in t for t in run.texts)
                if sent or not in_class:
                    checks[(nickname, n)] = time.time()
                    answered.add(n)
                record("check", check.key, run, sent or not in_class, "answer not sent to the class")
                continue
            nxt = s.find("k3_lesson_next")
            if n in answered and nxt is not None and not nxt.proto.disabled and rng.random() < args.next:
                run = await s.set_widget(nxt, next_state(nxt, rng))
                page = s.shown_page(page)
                record("next", "k3_lesson_next", run)
                continue
            kind, page, what, run = await capacity.page_input(s, page, rng, args.interact)
            record(kind, what, run)
    finally:
        await s.close()


async def teacher(code: str, secret: str, lesson: lessons.Lesson, level: capacity.Level, base: str, args, t0: float,
                  stop_at: float, rng: random.Random, shown: list):
    """The dashboard, rerun by its timer; `shown` gets (time, step shown, its answered count) per run."""
    s = Tab(base, timeout=args.timeout)
    await s.connect()

    def read(kind, what, run):
        texts = [t for t in run.texts if isinstance(t, str)]
        step = next((int(m[1]) for t in texts if (m := SHOWN.match(t))), None)
        count = next((int(m[1]) for t in texts if (m := COUNT.match(t))), None)
        if step is not None and count is not None:
            shown.append((time.time(), step, count))
        ok = run.ok and step is not None
        level.ops.append(capacity.Op(level.students, 0, kind, "classes", what, run.seconds, run.status, ok,
                                     run.bytes, time.perf_counter() - t0, "" if ok else "no step board", s.replica))
        return run

    async def click(key, state=None):
        w = s.find(key)
        if w is not None:
            read("lead", key, await s.set_widget(w, state or next_state(w, rng)))

    try:
        read("dashboard", "open", await s.open("classes", {"class": code, "teacher": secret}))
        await click("k3_class_lead")                              # "Students follow my step" on
        step, next_step = 1, t0 + args.step_every
        while time.perf_counter() < stop_at:
            await asyncio.sleep(max(0.0, min(s.next_due(), next_step, stop_at) - time.perf_counter()))
            if time.perf_counter() >= stop_at:
                break
            if time.perf_counter() >= next_step:
                step += 1
                next_step = next_step + args.step_every if step < len(lesson.steps) else float("inf")
                await click("k3_class_next")
                picker = s.find("k3_class_step")
                if picker is not None and len(picker.proto.options) >= step:
                    pick = WidgetState(id=picker.id)
                    pick.string_array_value.data.append(picker.proto.options[step - 1].content)
                    await click("k3_class_step", pick)
            async for run in s.fire_due():
                read("dashboard", "refresh", run)
    finally:
        await s.close()


def dashboard_latency(answers, checks: dict, shown: list) -> tuple[list[float], int, int]:
    """Per answer sent (`checks`: (nickname, step) -> end of its Check run): seconds until the first dashboard run
    whose count for the step includes it. Returns (latencies, answers never shown, answers to a step not shown
    when they came)."""
    by_step: dict[int, list] = {}
    for a in sorted(answers, key=lambda a: a.at):
        by_step.setdefault(a.step, []).append(a)
    out, unseen, elsewhere = [], 0, 0
    for step, rows in by_step.items():
        views = [(t, c) for t, s, c in shown if s == step]
        for rank, a in enumerate(rows, 1):
            t_check = checks.get((a.nickname, step))
            if t_check is None:
                continue
            t_seen = next((t for t, c in views if c >= rank), None)
            if t_seen is not None:
                out.append(max(0.0, t_seen - t_check))
            elif not any(t >= t_check for t, _ in views):
                elsewhere += 1
            else:
                unseen += 1
    return out, unseen, elsewhere


def the_lesson(app_dir: Path) -> lessons.Lesson:
    return lessons.load(app_dir / "lessons" / f"{LESSON}.toml")


def split_after_next(ops, nexts: list[float]) -> tuple[list[float], list[float]]:
    """The students' inputs that started within AFTER_NEXT_S of a step change (every student's page opens the new
    step then), and the rest: where a class's cost to the others' inputs falls."""
    near, rest = [], []
    for o in ops:
        if o.kind == "interact" and o.ok:
            start = o.t - o.seconds
            (near if any(0 <= start - t <= AFTER_NEXT_S for t in nexts) else rest).append(o.seconds)
    return near, rest


def run_times(level: capacity.Level) -> dict:
    def times(kind):
        xs = [o.seconds for o in level.ops if o.kind == kind and o.ok]
        return {"n": len(xs), "p50": pct(xs, 50), "p95": pct(xs, 95), "max": max(xs, default=float("nan"))}
    return {k: times(k) for k in ("answer", "check", "next", "follow", "dashboard", "lead")}


async def alone_phase(n: int, base: str, sampler: capacity.Sampler, args, rng: random.Random) -> tuple[capacity.Level, dict]:
    """The lesson without a class: the class phase's students and inputs, each student on their own (other prompts,
    so neither phase finds the other's model runs cached), moved to the step the teacher would lead to by their
    own link. The baseline that differs from a class by the class alone."""
    lesson = the_lesson(args.app_dir)
    level, ru0, t0, stop_at = capacity.open_level(n, sampler, args.duration)
    checks: dict = {}
    tasks = [class_student(2 * n + k, f"student{k:02d}", None, None, lesson, level, base, args, t0, stop_at,
                           random.Random(rng.random()), checks) for k in range(1, n + 1)]
    for r in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(r, BaseException):
            level.ops.append(capacity.Op(n, -1, "crash", "", type(r).__name__, 0.0, str(r)[:200], False, 0, 0.0))
    await capacity.close_level(level, t0, sampler, ru0)
    nexts = [k * args.step_every for k in range(1, len(lesson.steps))]
    near, rest = split_after_next(level.ops, nexts)
    return level, {"answers_checked": len(checks), "runs": run_times(level),
                   "after_next": {"n": len(near), "p95": pct(near, 95)}, "other_inputs": {"n": len(rest), "p95": pct(rest, 95)}}


async def class_phase(n: int, base: str, sampler: capacity.Sampler, args, rng: random.Random,
                      url: str) -> tuple[capacity.Level, dict]:
    lesson = the_lesson(args.app_dir)
    store = Store(url)
    info, secret = store.start(LESSON, len(lesson.steps))
    seats = [(f"student{k:02d}", store.join(info.code, f"student{k:02d}")[2]) for k in range(1, n + 1)]
    level, ru0, t0, stop_at = capacity.open_level(n, sampler, args.duration)
    checks: dict = {}
    shown: list = []
    tasks = [class_student(n + k, nick, key, info.code, lesson, level, base, args, t0, stop_at,
                           random.Random(rng.random()), checks)
             for k, (nick, key) in enumerate(seats, 1)]
    tasks.append(teacher(info.code, secret, lesson, level, base, args, t0, stop_at, random.Random(rng.random()), shown))
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            level.ops.append(capacity.Op(n, -1, "crash", "", type(r).__name__, 0.0, str(r)[:200], False, 0, 0.0))
    await capacity.close_level(level, t0, sampler, ru0)
    answers = store.class_answers(info.id)
    lat, unseen, elsewhere = dashboard_latency(answers, checks, shown)
    store.end(info.id)
    store.engine.dispose()

    nexts = [o.t for o in level.ops if o.kind == "lead" and o.what == "k3_class_next"]
    near, rest = split_after_next(level.ops, nexts)
    extra = {"code": info.code, "answers_stored": len(answers), "answers_sent": len(checks),
             "latency": {"n": len(lat), "p50": pct(lat, 50), "p95": pct(lat, 95), "max": max(lat, default=float("nan")),
                         "over_2s": sum(x > 2.0 for x in lat), "unseen": unseen, "other_step": elsewhere},
             "runs": run_times(level),
             "dashboard_views": len(shown), "latencies": lat,
             "after_next": {"n": len(near), "p95": pct(near, 95)}, "other_inputs": {"n": len(rest), "p95": pct(rest, 95)}}
    return level, extra


def per_page(level: capacity.Level) -> dict[str, dict]:
    """The students' inputs by page: count, median, p95 (the phases' mixes of pages differ unless both follow the
    lesson)."""
    by: dict[str, list[float]] = {}
    for o in level.ops:
        if o.kind == "interact" and o.ok:
            by.setdefault(o.page or "(default)", []).append(o.seconds)
    return {k: {"n": len(v), "p50": pct(v, 50), "p95": pct(v, 95)} for k, v in sorted(by.items(), key=lambda kv: -len(kv[1]))}


def print_report(rows: list[tuple[str, dict]], extras: dict[str, dict], args) -> None:
    print(f"\n{'phase':<9} {'students':>8} {'inter':>5} {'p50':>6} {'p95':>6} {'max':>6} | {'nav':>4} {'p95':>6} | "
          f"{'open p95':>8} | {'err':>3} | {'server CPU':>10} {'RSS peak':>9} | load avg")
    for name, r in rows:
        print(f"{name:<9} {r['students']:>8} {r['interactions']:>5} {r['p50']:>6.2f} {r['p95']:>6.2f} {r['max']:>6.2f} | "
              f"{r['nav_n']:>4} {r['nav_p95']:>6.2f} | {r['open_p95']:>8.2f} | {r['errors']:>3} | "
              f"{r['cores']:>6.2f} core {r['rss_peak_mb']:>6.0f} MB | {r['load_before']:.1f} -> {r['load_after']:.1f}")
        for note in r["error_notes"]:
            print(f"{'':>10}error: {note}")
        if r["spread"] and len(r["spread"]) > 1:
            print(f"{'':>10}sessions per replica: {r['spread']}")
        pages = list(r["pages"].items())[:6]
        print(f"{'':>10}by page (n, p95 s): " + ", ".join(f"{k} {v['n']} {v['p95']:.2f}" for k, v in pages))
    for name, extra in extras.items():
        print(f"\n{name} runs (s): " + "; ".join(f"{k} {v['n']} p50 {v['p50']:.2f} p95 {v['p95']:.2f} max {v['max']:.2f}"
                                           for k, v in extra["runs"].items() if v["n"]))
        near, rest = extra["after_next"], extra["other_inputs"]
        print(f"  inputs starting within {AFTER_NEXT_S:.0f} s after a step change: {near['n']}, p95 {near['p95']:.2f} s; "
              f"the other inputs: {rest['n']}, p95 {rest['p95']:.2f} s")
    got = dict(rows)
    if "class" in extras:
        lat = extras["class"]["latency"]
        print(f"\nanswers: {extras['class']['answers_sent']} sent, {extras['class']['answers_stored']} in the database; "
              f"dashboard latency ({lat['n']} answers seen on the dashboard): median {lat['p50']:.2f} s, p95 "
              f"{lat['p95']:.2f} s, max {lat['max']:.2f} s, {lat['over_2s']} over 2 s; {lat['other_step']} answered "
              f"a step the dashboard did not show, {lat['unseen']} never seen")
        ok = lat["n"] > 0 and lat["max"] <= 2.0
        cls = got["class"]
        against = "; ".join(f"{got[b]['p95']:.2f} s {PHASES[b]} ({cls['p95'] - got[b]['p95']:+.2f} s)"
                            for b in ("alone", "mix") if b in got)
        print(f"goal: every answer on the dashboard within 2 s: {'met' if ok else 'MISSED'}; interaction p95 "
              f"{cls['p95']:.2f} s in the class against {against or 'no baseline run'}; errors "
              + ", ".join(f"{k} {r['errors']}" for k, r in rows))


PHASES = {"mix": "without a lesson (capacity's mix)", "alone": "the lesson alone", "class": "a class"}


async def main_async(args, url: str) -> int:
    rng = random.Random(args.seed)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)   # servers stopped
    os.environ["K3_DATABASE_URL"] = url                # the single server inherits it
    if args.proxy:
        target = capacity.Proxied(args.proxy, args.app_dir, ("--database-url", url))
    else:
        target = capacity.Replica(None, args.app_dir)
    try:
        target.wait()
        base, pids = target.url, target.pids
        print(f"servers at {base} (pids {pids}); database {url.split('@')[-1]}", flush=True)
        t = time.perf_counter()
        bases = [r["url"] for r in target.status["replicas"]] if isinstance(target, capacity.Proxied) else [base]
        for b in bases:
            await capacity.warm_up(b, args.timeout, False, rng)
        print(f"warm-up {time.perf_counter() - t:.0f} s; RSS {capacity.Sampler(pids).now_rss() / 2**20:.0f} MB", flush=True)
        cap = SimpleNamespace(duration=args.duration, ramp=args.ramp, think=args.think, interact=args.interact,
                              timeout=args.timeout, proxy=args.proxy, flood=False, kill_one=None)
        rows, extras, levels = [], {}, {}
        for phase in args.phases:
            print(f"\n{PHASES[phase]}: {args.students} students{' and a teacher' if phase == 'class' else ''} for "
                  f"{args.duration:.0f} s (load average {os.getloadavg()[0]:.1f}) ...", flush=True)
            if phase == "mix":
                level = await capacity.run_level(args.students, base, capacity.Sampler(pids), cap, rng, target)
            elif phase == "alone":
                level, extras[phase] = await alone_phase(args.students, base, capacity.Sampler(pids), args, rng)
            else:
                level, extras[phase] = await class_phase(args.students, base, capacity.Sampler(pids), args, rng, url)
            summary = capacity.summary(level, args.goal)
            summary["pages"] = per_page(level)
            rows.append((phase, summary))
            levels[phase] = level
            print(f"  p95 {summary['p95']:.2f} s over {summary['interactions']} interactions, errors {summary['errors']}",
                  flush=True)
        print_report(rows, extras, args)
        print(f"\nmachine: {os.cpu_count()} cores; load average now {os.getloadavg()}")
        if args.json:
            Path(args.json).write_text(json.dumps({
                "args": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items()},
                "database": url.split("://")[0], **dict(rows), **{f"{k}_extra": v for k, v in extras.items()},
                "ops": {k: [asdict(o) for o in lv.ops] for k, lv in levels.items()}}, indent=1, default=str))
            print(f"wrote {args.json}")
        return 0 if all(r["errors"] == 0 for _, r in rows) else 1
    finally:
        target.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--students", type=int, default=40, help="students in the class, and without one (default 40)")
    ap.add_argument("--duration", type=float, default=600.0, help="seconds per phase (default 600)")
    ap.add_argument("--proxy", type=int, default=0, help="through python -m deploy with this many replicas")
    ap.add_argument("--postgres", action="store_true", help="a private PostgreSQL cluster as the classes database")
    ap.add_argument("--database-url", default=None, help="this database instead of a fresh SQLite file")
    ap.add_argument("--step-every", type=float, default=None,
                    help="seconds between the teacher's Next step (default: the duration over the lesson's steps)")
    ap.add_argument("--answer", type=float, default=0.4, help="chance an input answers an unanswered step")
    ap.add_argument("--next", type=float, default=0.1, help="chance an input presses Next once the step is answered")
    capacity.student_args(ap)
    ap.add_argument("--app-dir", type=Path, default=ROOT,
                    help="the app to serve (default this checkout), e.g. a snapshot that edits in progress do not "
                         "reach: git ls-files -co --exclude-standard | tar -cT - | tar -x -C /tmp/k3-snap")
    ap.add_argument("--phases", default="mix,alone,class",
                    help="which phases to run, in this order (default mix,alone,class): " +
                         "; ".join(f"{k}: {v}" for k, v in PHASES.items()))
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--json", default=None, help="write every measurement here")
    args = ap.parse_args()
    args.think = tuple(float(x) for x in args.think.split(","))
    args.phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if not args.phases or set(args.phases) - set(PHASES):
        ap.error(f"--phases: a comma-separated list of {', '.join(PHASES)}")
    if args.step_every is None:
        args.step_every = args.duration / len(the_lesson(args.app_dir).steps)
    with contextlib.ExitStack() as stack:
        if args.postgres:
            bin_dir = postgres_bin()
            if bin_dir is None:
                ap.error("--postgres: no PostgreSQL server programs (initdb) found")
            url = stack.enter_context(private_postgres(bin_dir))
        elif args.database_url:
            url = args.database_url
        else:
            url = f"sqlite:///{stack.enter_context(tempfile.TemporaryDirectory(prefix='k3-class-'))}/classes.sqlite"
        return asyncio.run(main_async(args, url))


if __name__ == "__main__":
    sys.exit(main())
