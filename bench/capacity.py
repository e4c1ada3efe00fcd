"""Capacity of one replica: how many concurrent students it holds with interaction p95 <= 1.5 s.

    python bench/capacity.py                                   # 5, 10, 20, 40 students, 75 s each
    python bench/capacity.py --levels 10,20,30 --duration 60 --json /tmp/capacity.json
    python bench/capacity.py --levels 20 --flood                # beside one session sending inputs back to back
    python bench/capacity.py --server-cpus 1 --client-cpus 0   # server pinned to core 1, this client to 0
    python bench/capacity.py --proxy 2 --levels 20 --kill-one 40   # through nginx, 2 replicas, one killed at 40 s
    python bench/capacity.py --url http://127.0.0.1:8501/ --levels 10   # a server that is already running

No browsers: each student is a protocol-level client (deploy/protocol.py) that speaks Streamlit's
websocket protocol itself: `BackMsg.rerun_script` with the link's query string, the page and the
changed widget's state (and the fragment's id for a control inside an `st.fragment`), then reads
`ForwardMsg`s until `script_finished`. A student costs this process a few ms of CPU per page, so the
server's cores are not shared with 20-40 Chromium renderers (the load test's page times measured the
browsers). What is timed is the server's side of an input: from the BackMsg until the run's last
message has arrived; the browser's drawing (on the student's own machine) is not in it.

A student: opens the Routing explorer by a link with its own prompt (a unique marker word, "zebra07"),
at a random moment of the first `--ramp` seconds; then, until the run's time is up, thinks
(`--think`, uniform, default 10-30 s) and either changes one control of the page it is on (65 %: a
slider one step, a toggle, another option of a segmented control / pills / radio / selectbox, or one
of the Routing explorer's buttons: Back, Next, Knock out, Restore, Reset) or opens another page
(35 %, any page of app/navigation.py, as the sidebar does). Every reply is checked: the run finished,
no traceback (st.exception) and no other student's marker on the page. A run that is still going
when the time is up is waited for (and counted).

Per level (number of students): interaction latency p50/p95/max (the goal: p95 <= --goal, 1.5 s),
page opens and navigations separately, errors, the server's CPU (cores in use, from /proc of the
server's process tree: 1.00 = one core busy all the time), its resident memory (RSS of the process and
its children) after the warm-up and at the level's peak, this client's own CPU, and the load average
before and after (other work on the machine slows the server: say so with the figures). The capacity
is the largest level whose interaction p95 meets the goal with no errors.

The server is started once for the whole sweep (`streamlit run serve.py` on a free loopback
port) and warmed up first: the Routing explorer once (loads the live model), then every page once
(their caches), which is also the "first visit" column. Levels run one after the other on the same
server (sessions of a finished level are closed; Streamlit drops their state after
server.disconnectedSessionTTL, 120 s).

--proxy N runs the same students through `python -m deploy --replicas N` (nginx in front of N
replicas; each student keeps the cookie the proxy pins it with, as a browser would), reports how the sessions
spread over the replicas, and with --kill-one T kills (SIGKILL) the replica holding the most
sessions T seconds into the level: its students see the websocket drop at once and reconnect (a burst,
as browsers would), opening the page of their link again; the reconnects are timed and checked
(own prompt back, no traceback), and the survivors' health is checked after the burst.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from app.navigation import PAGES  # noqa: E402
from bench.harness import free_port, pct  # noqa: E402
from deploy.launcher import healthy, stop_process, tree_pids, tree_rss  # noqa: E402
from deploy.protocol import Session, next_state  # noqa: E402

TEMPLATES = (
    "The router sends zebra{i:03d} and every other token to 16 of its 896 experts.",
    "def zebra{i:03d}(values):\n    return sum(values) / len(values)\n",
    "In 2026 zebra{i:03d} counted 2,779 billion weights; 104 billion ran per token.",
    "Students ask zebra{i:03d} why one layer reads a latent cache and the next a state.",
)
MARKER = "zebra"
KINDS = {"slider", "checkbox", "button_group", "radio", "selectbox"}
BUTTONS = {"routing_next", "routing_prev", "routing_knock", "routing_restore", "routing_reset"}
NEVER = {"routing_play", "presenter_mode", "glossary_lookup"}  # animation, sidebar


# ---- measuring the server -------------------------------------------------------------------------

def cpu_seconds(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick      # utime + stime
        except (OSError, IndexError, ValueError):
            pass
    return total


class Sampler:
    """CPU seconds and RSS of some server process trees, sampled every half second. A process that dies
    during the run (a killed replica) keeps the CPU time it had used when last seen."""

    def __init__(self, pids: list[int]):
        self.pids = list(pids)
        self.peak = 0
        self.t0 = 0.0
        self.cpu0: dict[int, float] = {}
        self.cpu_last: dict[int, float] = {}
        self._task = None

    def now_rss(self) -> int:
        return sum(tree_rss(p) for p in self.pids)

    def _sample_cpu(self) -> None:
        for p in self.pids:
            if os.path.exists(f"/proc/{p}"):
                self.cpu_last[p] = cpu_seconds(tree_pids(p))

    async def _loop(self):
        while True:
            self.peak = max(self.peak, self.now_rss())
            self._sample_cpu()
            await asyncio.sleep(0.5)

    def start(self):
        self.cpu_last = {}
        self._sample_cpu()
        self.cpu0 = dict(self.cpu_last)
        self.peak, self.t0 = self.now_rss(), time.perf_counter()
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> tuple[float, int]:
        """(cores in use on average, peak RSS bytes)."""
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        self.peak = max(self.peak, self.now_rss())
        self._sample_cpu()
        wall = time.perf_counter() - self.t0
        used = sum(self.cpu_last.get(p, 0.0) - self.cpu0.get(p, 0.0) for p in self.cpu0)
        return used / wall if wall else 0.0, self.peak


# ---- the servers --------------------------------------------------------------------------------

class Replica:
    """One `streamlit run serve.py` on a free loopback port (optionally pinned to some cores)."""

    def __init__(self, cpus: set[int] | None, app_dir: Path = ROOT):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", prefix="k3-capacity-", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "serve.py", "--server.headless", "true",
             "--server.address", "127.0.0.1", "--server.port", str(self.port), "--browser.gatherUsageStats",
             "false", "--server.fileWatcherType", "none"], cwd=app_dir, stdout=self.log, stderr=subprocess.STDOUT,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        self.pids = [self.proc.pid]

    def wait(self, timeout=240):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("streamlit exited:\n" + Path(self.log.name).read_text()[-3000:])
            if healthy(f"127.0.0.1:{self.port}"):
                return
            time.sleep(0.3)
        raise RuntimeError("streamlit not healthy in time")

    def stop(self):
        stop_process(self.proc)
        self.log.close()
        os.unlink(self.log.name)


class Proxied:
    """`python -m deploy --replicas N` on a free port; its status file names the replicas' pids."""

    def __init__(self, n: int, app_dir: Path = ROOT, extra: tuple[str, ...] = ()):
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="k3-capacity-proxy-"))
        self.status_file = self.dir / "status.json"
        self.log = open(self.dir / "deploy.log", "w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "deploy", "--replicas", str(n), "--port", str(self.port), "--health-interval", "1",
             "--status-file", str(self.status_file), "--app-dir", str(app_dir), *extra],
            cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}/"
        self.status = None

    def wait(self, timeout=400):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("python -m deploy exited:\n" + (self.dir / "deploy.log").read_text()[-3000:])
            if self.status_file.exists():
                self.status = json.loads(self.status_file.read_text())
                self.pids = [r["pid"] for r in self.status["replicas"]]
                return
            time.sleep(0.5)
        raise RuntimeError("python -m deploy not serving in time")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.log.close()
        print("deploy log (tail):\n" + (self.dir / "deploy.log").read_text()[-1500:])
        shutil.rmtree(self.dir, ignore_errors=True)


# ---- the students -------------------------------------------------------------------------------

@dataclass
class Op:
    level: int
    student: int
    kind: str            # open, navigate, interact, reconnect
    page: str
    what: str            # the widget key, or the page
    seconds: float
    status: str
    ok: bool
    bytes: int
    t: float             # seconds since the level started
    note: str = ""
    replica: str = ""


@dataclass
class Level:
    students: int
    ops: list[Op] = field(default_factory=list)
    cores: float = 0.0
    rss_peak: int = 0
    load_before: tuple = ()
    load_after: tuple = ()
    client_cpu: float = 0.0
    wall: float = 0.0
    spread: dict = field(default_factory=dict)
    killed: str = ""
    survivors_healthy: bool | None = None


def foreign_markers(texts: list[str], own: str) -> set[str]:
    import re
    found = set()
    for t in texts:
        found.update(re.findall(MARKER + r"\d{3}", t))
    return found - {own}


def choices_on(s: Session) -> list:
    out = []
    for w in s.widgets.values():
        if w.sidebar or w.key in NEVER or getattr(w.proto, "disabled", False):
            continue
        if w.kind in KINDS or (w.kind == "button" and w.key in BUTTONS):
            out.append(w)
    return out


async def student(i: int, level: Level, base: str, args, t_level: float, rng: random.Random,
                  stop_at: float, events: dict):
    own = f"{MARKER}{i:03d}"
    text = TEMPLATES[i % len(TEMPLATES)].format(i=i)
    link = {"preset": "own", "text": text}
    page = "routing"

    def record(kind, what, run, note=""):
        bad = foreign_markers(run.texts, own)
        ok = run.ok and not bad
        if kind in ("open", "reconnect") and page == "routing" and not any(own in t for t in run.texts):
            ok, note = False, note or "own prompt missing"
        if bad:
            note = f"saw {sorted(bad)[:3]}"
        elif run.exceptions:
            note = run.exceptions[0][:200]
        level.ops.append(Op(level.students, i, kind, page, what, run.seconds, run.status, ok, run.bytes,
                            time.perf_counter() - t_level, note, s.replica))

    await asyncio.sleep(rng.uniform(0, args.ramp))
    s = Session(base, timeout=args.timeout)
    try:
        await s.connect()
    except Exception as e:                      # noqa: BLE001
        level.ops.append(Op(level.students, i, "open", page, "connect", 0.0, f"connect failed: {e}", False, 0,
                            time.perf_counter() - t_level))
        return
    try:
        run = await s.open(page, link)
        record("open", page, run)
        while True:
            now = time.perf_counter()
            if now >= stop_at:
                break
            think = rng.uniform(*args.think)
            if now + think > stop_at:            # no time for another input; stay connected to the end
                if not await s.wait_lost(stop_at - now):
                    break
                dropped = True
            else:
                dropped = await s.wait_lost(think)
            if dropped:                          # the replica went away: reconnect at once, like a browser
                t0 = time.perf_counter()
                query = s.query_string
                await s.close()
                s = Session(base, cookie=s.cookie, timeout=args.timeout)   # pinned, as a browser
                try:
                    await s.connect()
                except Exception as e:           # noqa: BLE001
                    level.ops.append(Op(level.students, i, "reconnect", page, "connect",
                                        time.perf_counter() - t0, f"failed: {e}", False, 0,
                                        time.perf_counter() - t_level))
                    await asyncio.sleep(1.0)
                    continue
                run = await s.open(page, query)
                run.seconds = time.perf_counter() - t0
                record("reconnect", page, run)
                events["reconnects"] = events.get("reconnects", 0) + 1
                continue
            kind, page, what, run = await page_input(s, page, rng, args.interact)
            record(kind, what, run)
    finally:
        await s.close()


async def page_input(s: Session, page: str, rng: random.Random, interact: float):
    """A student's input on `page`: change one of its controls (share `interact`) or open another page.
    Returns (kind "interact" or "navigate", the page now shown, the widget key or page, the Run)."""
    options = [(w, st) for w in choices_on(s) if (st := next_state(w, rng)) is not None]
    if options and rng.random() < interact:
        w, st = rng.choice(options)
        return "interact", page, w.key or w.kind, await s.set_widget(w, st)
    page = rng.choice([p for p in (s.pages or {x.url_path: "" for x in PAGES}) if p != page])
    return "navigate", page, page, await s.open(page, "")


async def flooder(level: Level, base: str, args, t_level: float, stop_at: float, rng: random.Random):
    """One more session that changes the Routing explorer's controls back to back, never thinking: the most a
    single browser tab can ask of the server. Its inputs are recorded as "flood", apart from the students'."""
    s = Session(base, timeout=args.timeout)
    await s.connect()
    try:
        await s.open("routing", {"preset": "own", "text": "A flood of inputs from flood000, as fast as it can."})
        while time.perf_counter() < stop_at:
            options = [(w, st) for w in choices_on(s) if (st := next_state(w, rng)) is not None]
            if not options:
                break
            w, st = rng.choice(options)
            run = await s.set_widget(w, st)
            level.ops.append(Op(level.students, 0, "flood", "routing", w.key or w.kind, run.seconds, run.status,
                                run.ok, run.bytes, time.perf_counter() - t_level, "", s.replica))
    finally:
        await s.close()


async def close_level(level: Level, t0: float, sampler: "Sampler", ru0) -> None:
    """A level's wall time, the servers' cores and peak RSS, this client's CPU, the load average after it, and
    how the sessions' page opens spread over the replicas."""
    level.wall = time.perf_counter() - t0
    level.cores, level.rss_peak = await sampler.stop()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    level.client_cpu = (ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime) / level.wall
    level.load_after = os.getloadavg()
    for op in level.ops:
        if op.kind == "open" and op.replica:
            level.spread[op.replica] = level.spread.get(op.replica, 0) + 1


def open_level(n: int, sampler: "Sampler", duration: float):
    """A level of n students begins: its record, this client's CPU so far, its start and end (perf_counter)."""
    level = Level(n)
    level.load_before = os.getloadavg()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    sampler.start()
    return level, ru0, t0, t0 + duration


async def run_level(n: int, base: str, sampler: Sampler, args, rng: random.Random, target) -> Level:
    level, ru0, t0, stop_at = open_level(n, sampler, args.duration)
    events: dict = {}
    tasks = [asyncio.create_task(student(i + 1, level, base, args, t0, random.Random(rng.random()), stop_at, events))
             for i in range(n)]
    if args.flood:
        tasks.append(asyncio.create_task(flooder(level, base, args, t0, stop_at, random.Random(rng.random()))))
    killer = None
    if args.kill_one is not None and isinstance(target, Proxied):
        async def kill():
            await asyncio.sleep(args.kill_one)
            counts: dict[str, int] = {}
            for op in level.ops:
                if op.kind == "open" and op.replica:
                    counts[op.replica] = counts.get(op.replica, 0) + 1
            victim_addr = max(counts, key=counts.get) if counts else target.status["replicas"][0]["addr"]
            victim = next(r for r in target.status["replicas"] if r["addr"] == victim_addr)
            os.kill(victim["pid"], signal.SIGKILL)
            level.killed = f"{victim_addr} (pid {victim['pid']}, {counts.get(victim_addr, 0)} sessions) at {args.kill_one:.0f} s"
            print(f"  killed replica {level.killed}", flush=True)
        killer = asyncio.create_task(kill())
    await asyncio.gather(*tasks)
    if killer is not None:
        killer.cancel()
    await close_level(level, t0, sampler, ru0)
    if isinstance(target, Proxied) and level.killed:
        alive = [r for r in target.status["replicas"] if r["addr"] not in level.killed]
        level.survivors_healthy = all(healthy(r["addr"]) for r in alive)
    return level


# ---- report -------------------------------------------------------------------------------------

def summary(level: Level, goal: float) -> dict:
    by = {k: [o.seconds for o in level.ops if o.kind == k and o.ok] for k in ("interact", "navigate", "open", "reconnect")}
    errors = [o for o in level.ops if not o.ok]
    inter = by["interact"]
    return {
        "students": level.students, "interactions": len(inter),
        "p50": pct(inter, 50), "p95": pct(inter, 95), "max": max(inter) if inter else float("nan"),
        "nav_n": len(by["navigate"]), "nav_p50": pct(by["navigate"], 50), "nav_p95": pct(by["navigate"], 95),
        "open_p50": pct(by["open"], 50), "open_p95": pct(by["open"], 95),
        "reconnects": len(by["reconnect"]), "reconnect_p95": pct(by["reconnect"], 95),
        "errors": len(errors), "error_notes": sorted({f"{o.kind} {o.page}/{o.what}: {o.status} {o.note}" for o in errors})[:8],
        "cores": level.cores, "rss_peak_mb": level.rss_peak / 2**20, "client_cores": level.client_cpu,
        "load_before": level.load_before[0], "load_after": level.load_after[0],
        "meets_goal": bool(inter) and pct(inter, 95) <= goal and not errors,
        "spread": level.spread, "killed": level.killed, "survivors_healthy": level.survivors_healthy,
        "slowest": slowest(level.ops),
        "flood": len([o for o in level.ops if o.kind == "flood"]),
    }


def slowest(ops: list[Op], n: int = 5) -> list[tuple[str, int, float]]:
    """The controls with the highest median latency in this level: (page/key, count, median s)."""
    per: dict[str, list[float]] = {}
    for o in ops:
        if o.kind == "interact" and o.ok:
            per.setdefault(f"{o.page or '(default)'}/{o.what}", []).append(o.seconds)
    ranked = sorted(((k, len(v), statistics.median(v)) for k, v in per.items()), key=lambda x: -x[2])
    return [(k, c, round(m, 2)) for k, c, m in ranked[:n]]


def print_table(rows: list[dict], goal: float) -> None:
    print(f"\n{'students':>8} {'inter':>5} {'p50':>6} {'p95':>6} {'max':>6} | {'nav p50':>7} {'p95':>6} | "
          f"{'open p50':>8} {'p95':>6} | {'err':>3} | {'server CPU':>10} {'RSS peak':>9} | {'client':>6} | load avg")
    for r in rows:
        print(f"{r['students']:>8} {r['interactions']:>5} {r['p50']:>6.2f} {r['p95']:>6.2f} {r['max']:>6.2f} | "
              f"{r['nav_p50']:>7.2f} {r['nav_p95']:>6.2f} | {r['open_p50']:>8.2f} {r['open_p95']:>6.2f} | "
              f"{r['errors']:>3} | {r['cores']:>6.2f} core {r['rss_peak_mb']:>6.0f} MB | {r['client_cores']:>6.2f} | "
              f"{r['load_before']:.1f} -> {r['load_after']:.1f}" + ("" if r["meets_goal"] else "   <- misses the goal"))
        if r["slowest"]:
            print(f"{'':>10}slowest controls (median s): " + ", ".join(f"{k} {m:.2f} (x{c})" for k, c, m in r["slowest"]))
        if r["flood"]:
            print(f"{'':>10}beside one session flooding the Routing explorer: {r['flood']} inputs back to back")
        for note in r["error_notes"]:
            print(f"{'':>10}error: {note}")
        if r["spread"] and len(r["spread"]) > 1 or r["killed"]:
            print(f"{'':>10}sessions per replica: {r['spread']}")
        if r["killed"]:
            print(f"{'':>10}killed {r['killed']}; reconnects: {r['reconnects']} (p95 {r['reconnect_p95']:.2f} s); "
                  f"survivors healthy after: {r['survivors_healthy']}")
    ok = [r["students"] for r in rows if r["meets_goal"]]
    failing = [r["students"] for r in rows if not r["meets_goal"]]
    if ok:
        top = max(ok)
        above = [f for f in failing if f > top]
        print(f"\ncapacity: {top} students hold interaction p95 <= {goal} s"
              + (f"; {min(above)} do not" if above else " (the largest level tried)"))
    else:
        print(f"\ncapacity: no level met interaction p95 <= {goal} s")


async def warm_up(base: str, timeout: float, solo: bool, rng: random.Random) -> tuple[dict, dict]:
    """The Routing explorer (the model loads), then every page the server lists once (first-visit times,
    and the pages' caches filled); with `solo`, then every control of every page once, alone on the
    server: the floor under each interaction's latency."""
    first, alone = {}, {}
    s = Session(base, timeout=timeout)
    await s.connect()
    try:
        run = await s.open("routing", "")
        first["routing"] = round(run.seconds, 2)
        paths = ["routing"] + [p for p in s.pages if p != "routing"]
        for path in paths[1:]:
            run = await s.open(path, "")
            first[path or "(default)"] = round(run.seconds, 2)
            if not run.ok:
                print(f"  warm-up: /{path} {run.status} {run.exceptions[:1]}")
        if solo:
            for path in paths:
                await s.open(path, "")
                for key in [w.key for w in choices_on(s)]:
                    w = s.find(key)
                    st = next_state(w, rng) if w else None
                    if st is None:
                        continue
                    run = await s.set_widget(w, st)
                    alone[f"{path or '(default)'}/{key}"] = round(run.seconds, 2)
                    if not run.ok:
                        print(f"  solo: /{path} {key}: {run.status} {run.exceptions[:1]}")
    finally:
        await s.close()
    return first, alone


async def main_async(args) -> int:
    rng = random.Random(args.seed)
    target = None
    if args.url:
        base = args.url if args.url.endswith("/") else args.url + "/"
        pids = [args.pid] if args.pid else []
    elif args.proxy:
        target = Proxied(args.proxy, args.app_dir)
        target.wait()
        base, pids = target.url, target.pids
        print(f"nginx at {base} in front of {args.proxy} replicas: "
              + ", ".join(f"{r['addr']} (pid {r['pid']}, {r['rss_bytes'] / 2**20:.0f} MB)" for r in target.status["replicas"]))
    else:
        target = Replica(set(args.server_cpus) if args.server_cpus else None, args.app_dir)
        target.wait()
        base, pids = target.url, target.pids
        print(f"server at {base} (pid {target.proc.pid}"
              + (f", pinned to cores {sorted(args.server_cpus)}" if args.server_cpus else ", not pinned") + ")")
    rows, levels = [], []
    try:
        t = time.perf_counter()
        sampler = Sampler(pids)
        rss0 = sampler.now_rss()
        # warm every replica directly (through a proxy, one session would warm one replica only)
        bases = [r["url"] for r in target.status["replicas"]] if isinstance(target, Proxied) else [base]
        warmed = [await warm_up(b, args.timeout, args.solo and k == 0, rng) for k, b in enumerate(bases)]
        first, alone = warmed[0]
        rss_warm = sampler.now_rss()
        print(f"warm-up {time.perf_counter() - t:.0f} s; first visits (s): {first}")
        if alone:
            xs = sorted(alone.values())
            print(f"each control once, alone on the server ({len(xs)} controls): median {pct(xs, 50):.2f} s, "
                  f"p95 {pct(xs, 95):.2f} s; slowest: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in sorted(alone.items(), key=lambda kv: -kv[1])[:6]))
        print(f"server RSS: {rss0 / 2**20:.0f} MB at start, {rss_warm / 2**20:.0f} MB with the model loaded and "
              f"every page visited once")
        for n in args.levels:
            print(f"\n{n} students for {args.duration:.0f} s (think {args.think[0]:.0f}-{args.think[1]:.0f} s, "
                  f"load average {os.getloadavg()[0]:.1f}) ...", flush=True)
            level = await run_level(n, base, Sampler(sampler.pids), args, rng, target)
            levels.append(level)
            row = summary(level, args.goal)
            rows.append(row)
            print(f"  {row['interactions']} interactions: p50 {row['p50']:.2f} s, p95 {row['p95']:.2f} s; "
                  f"{row['nav_n']} navigations p95 {row['nav_p95']:.2f} s; errors {row['errors']}; "
                  f"server {row['cores']:.2f} cores, RSS peak {row['rss_peak_mb']:.0f} MB", flush=True)
            if not args.keep_going and row["interactions"] and row["p95"] > 3 * args.goal:
                print("  far over the goal: higher levels skipped (--keep-going runs them)")
                break
        print_table(rows, args.goal)
        print(f"\nmachine: {os.cpu_count()} cores; load average now {os.getloadavg()}; "
              f"client pinned to {sorted(args.client_cpus) if args.client_cpus else 'no cores (not pinned)'}")
        if args.json:
            Path(args.json).write_text(json.dumps({
                "args": {k: (list(v) if isinstance(v, (set, tuple)) else v) for k, v in vars(args).items()},
                "first_visits": first, "alone": alone, "rss_start_mb": rss0 / 2**20, "rss_warm_mb": rss_warm / 2**20,
                "levels": rows, "ops": [asdict(o) for lv in levels for o in lv.ops]}, indent=1, default=str))
            print(f"wrote {args.json}")
        return 0 if rows and all(r["errors"] == 0 for r in rows) else 1
    finally:
        if target is not None:
            target.stop()


def cpu_list(s: str) -> set[int]:
    out = set()
    for part in s.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def student_args(ap: argparse.ArgumentParser) -> None:
    """The options of a simulated student, which bench/class_capacity.py's students share."""
    ap.add_argument("--ramp", type=float, default=10.0, help="students arrive within this many seconds (default 10)")
    ap.add_argument("--think", default="10,30", help="think time range in seconds (default 10,30)")
    ap.add_argument("--interact", type=float, default=0.65, help="share of inputs that change a control (default 0.65)")
    ap.add_argument("--goal", type=float, default=1.5, help="interaction p95 goal in seconds (default 1.5)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a run may take before it counts as failed")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="5,10,20,40", help="students per level (default 5,10,20,40)")
    ap.add_argument("--duration", type=float, default=75.0, help="seconds per level (default 75)")
    student_args(ap)
    ap.add_argument("--server-cpus", type=cpu_list, default=None, help="pin the server to these cores (e.g. 1 or 0-1)")
    ap.add_argument("--client-cpus", type=cpu_list, default=None, help="pin this client to these cores")
    ap.add_argument("--proxy", type=int, default=0, help="through python -m deploy with this many replicas")
    ap.add_argument("--kill-one", type=float, default=None, metavar="T",
                    help="with --proxy: kill the busiest replica T seconds into each level")
    ap.add_argument("--url", default=None, help="use a running server instead of starting one")
    ap.add_argument("--pid", type=int, default=None, help="with --url: the server's pid, for CPU and memory")
    ap.add_argument("--app-dir", type=Path, default=ROOT,
                    help="the app to serve (a directory with serve.py; default this checkout), e.g. a "
                         "snapshot: git archive HEAD | tar -x -C /tmp/k3-snap")
    ap.add_argument("--no-solo", dest="solo", action="store_false",
                    help="skip the pass that times every control once, alone on the server")
    ap.add_argument("--flood", action="store_true",
                    help="one more session changes controls back to back, without thinking (not counted as a student)")
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--keep-going", action="store_true", help="run every level even when one is far over the goal")
    ap.add_argument("--json", default=None, help="write every measurement here")
    args = ap.parse_args()
    args.levels = [int(x) for x in args.levels.split(",") if x.strip()]
    args.think = tuple(float(x) for x in args.think.split(","))
    if args.kill_one is not None and not args.proxy:
        ap.error("--kill-one needs --proxy N")
    if args.client_cpus:
        os.sched_setaffinity(0, args.client_cpus)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
