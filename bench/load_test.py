"""Load test: a class of N students on one server. Render times, interaction latency, leaks, memory.

    python bench/load_test.py                      # 1 session, then 20 sessions, every page
    python bench/load_test.py --sessions 8 --pages routing,overview,attention
    python bench/load_test.py --phases 20 --json /tmp/load.json

Each phase starts its own `streamlit run serve.py` on loopback (so the memory of one phase
does not carry into the next), then N browser sessions (Playwright contexts of one headless
Chromium) open at the same moment. Every session has its own prompt, with a unique marker word
("zebra07"), and its own settings, all given through the link: prompt pages get
`?preset=own&text=...`, the Routing explorer also `layer`, `k` (top-k) and `token`. Each session
visits the pages in order (`--pages`, default every page in app.navigation.PAGES) and for each:

- render time: from the navigation until the page is drawn (a script run happened, the app is idle
  and connected, the DOM and the network have been quiet for 0.4 s, confirmed 0.5 s later), and
  until the server finished the run (the app's "not running" flag; the browser draws after that);
- no `stException` on the page, and no other session's marker word in its text (a failure is
  recorded, the session goes on);
- on /routing, that it sees its own view: the token chips spell its own marker and no other
  session's, and the page shows its own top-k and layer;
- one interaction on /routing: top-k one step down with the keyboard (focus the slider, ArrowLeft),
  timed the same way from the key press; the link must then hold the new top-k and the same token
  (with --interact-all, also the first slider of every other page).

The server's memory (RSS of the streamlit process and its children, sampled every 0.5 s) is
reported per phase; the check is peak(N sessions) <= 2 x peak(1 session) + 200 MB.
Note: the browser shares the machine's cores with the server, so times include its rendering work.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from app.navigation import PAGES  # noqa: E402
from bench.harness import (  # noqa: E402
    CHIPS,
    CHROMIUM_FLAGS,
    MARKER,
    QUIET_MS,
    ROUTING_DRAWN_JS,
    SETTLED_JS,
    STILL_JS,
    WATCH_RUNS,
    chromium_path,
    free_port,
    pct,
)
from deploy.launcher import stop_process, tree_rss  # noqa: E402

TEMPLATES = (
    "The router sends zebra{i:02d} and every other token to 16 of its 896 experts.",
    "def zebra{i:02d}(values):\n    return sum(values) / len(values)\n",
    "In 2026 zebra{i:02d} counted 2,779 billion weights; 104 billion ran per token.",
    "Wait -- zebra{i:02d}? Yes: (a), [b], {{c}}; \"quoted\" and 'single'!",
    "Students ask zebra{i:02d} why one layer reads a latent cache and the next a state.",
)

GRID_TITLE_JS = """() => {
  const head = document.querySelector('.st-key-routing_grid_title');
  return head && document.querySelector('.st-key-routing_grid canvas') ? head.innerText.trim() : null;
}"""


# ---- the server and its memory ---------------------------------------------------------------------

class MemorySampler(threading.Thread):
    def __init__(self, pid: int, every: float = 0.5):
        super().__init__(daemon=True)
        self.pid, self.every, self.peak, self.last = pid, every, 0, 0
        self._stop_event = threading.Event()

    def run(self):
        while not self._stop_event.is_set():
            self.last = tree_rss(self.pid)
            self.peak = max(self.peak, self.last)
            self._stop_event.wait(self.every)

    def stop(self):
        self._stop_event.set()
        self.join(timeout=5)
        self.last = tree_rss(self.pid) or self.last
        self.peak = max(self.peak, self.last)


class Server:
    def __init__(self, port: int):
        self.port, self.base = port, f"http://127.0.0.1:{port}/"
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", prefix="k3-load-", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "serve.py", "--server.headless", "true",
             "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none"], cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_healthy(self, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited early:\n{self.tail()}")
            if self.healthy():
                return
            time.sleep(0.3)
        raise RuntimeError(f"streamlit not healthy after {timeout:.0f} s:\n{self.tail()}")

    def healthy(self) -> bool:
        try:
            return urllib.request.urlopen(self.base + "_stcore/health", timeout=5).read() == b"ok"
        except OSError:
            return False

    def tail(self, n: int = 3000) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-n:]

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()
        os.unlink(self.log.name)


# ---- one session -----------------------------------------------------------------------------------

@dataclass
class Session:
    index: int
    text: str
    marker: str
    layer: int
    k: int
    token: int
    renders: list = field(default_factory=list)        # (page, seconds until drawn, until the server was done)
    interactions: list = field(default_factory=list)   # (page, seconds until drawn, until the server was done)
    failures: list = field(default_factory=list)       # (page, message)


def make_session(i: int) -> Session:
    k = 2 + (i * 5) % 40
    if k in (16, 17):                  # 16 is the default (no `k` in the link); 17 - 1 would land there
        k += 2
    return Session(i, TEMPLATES[i % len(TEMPLATES)].format(i=i), f"zebra{i:02d}", layer=1 + (i * 37) % 92,
                   k=k, token=1 + i % 3)


def has_prompt(spec) -> bool:
    try:
        return "prompt_input(" in (ROOT / spec.path).read_text()
    except OSError:
        return False


def url_for(base: str, spec, s: Session) -> str:
    params = {}
    if has_prompt(spec):
        params.update(preset="own", text=s.text)
    if spec.url_path == "routing":
        params.update(layer=s.layer, k=s.k, token=s.token)
    query = urllib.parse.urlencode(params, quote_via=urllib.parse.quote)
    return base + spec.url_path + (f"?{query}" if query else "")


class NetWatch:
    """In-flight HTTP requests of one page (the app lazy-loads chart code and fonts after a run ends,
    with the DOM quiet meanwhile); the websocket is not a request and does not count."""

    def __init__(self, page):
        self.pending, self.last = set(), time.time()
        page.on("request", self._start)
        page.on("requestfinished", self._end)
        page.on("requestfailed", self._end)

    def _start(self, request):
        self.pending.add(request)
        self.last = time.time()

    def _end(self, request):
        self.pending.discard(request)
        self.last = time.time()

    def quiet(self) -> bool:
        return not self.pending and time.time() - self.last > QUIET_MS / 1000


async def settled(page, net: NetWatch, timeout_ms: float) -> tuple[float, float]:
    """Wait until a script run has happened, the app is idle, the DOM and the network quiet, and all
    still so 0.5 s later with no new run; returns (when the page last changed, when the server last
    finished a run), both as time.time()."""
    deadline = time.time() + timeout_ms / 1000
    while True:
        left = max(1.0, (deadline - time.time()) * 1000)
        await page.wait_for_function(SETTLED_JS, timeout=left)
        if not net.quiet():
            if time.time() > deadline:
                raise TimeoutError("requests still in flight")
            await asyncio.sleep(0.1)
            continue
        t_done = max(await page.evaluate("window.__k3quiet") / 1000, net.last)
        t_server = await page.evaluate("window.__k3runEnd") / 1000
        await page.evaluate("window.__k3ran = false")
        await asyncio.sleep(0.5)
        if await page.evaluate(STILL_JS) and net.quiet():
            return t_done, t_server
        if time.time() > deadline:
            raise TimeoutError("the app kept re-running")


async def interact(page, net, spec, s: Session, timeout_ms: float) -> tuple[float, float] | None:
    """One keyboard interaction: seconds from the key press until the page is settled again, and
    until the server finished the run (None when the page has no slider)."""
    if spec.url_path == "routing":
        slider = page.get_by_role("slider", name="Experts per token (top-k)")
        keys, expect_k = ["ArrowLeft"], s.k - 1
    else:
        slider = page.get_by_role("slider", disabled=False).first       # a range input inside each slider
        if await slider.count() == 0:
            return None
        keys, expect_k = ["ArrowRight", "ArrowLeft"], None        # the other key if one is at the end
    await slider.scroll_into_view_if_needed(timeout=timeout_ms)
    await slider.focus()
    for key in keys:
        await page.evaluate("window.__k3ran = false")
        t0 = time.time()
        await slider.press(key)
        try:
            await page.wait_for_function("() => window.__k3ran === true",
                                         timeout=timeout_ms if expect_k is not None else 15_000)
        except Exception:
            if key == keys[-1]:
                raise
            continue                                               # no run: the slider was at its end
        t_idle, t_server = await settled(page, net, timeout_ms)
        if expect_k is not None:
            found = await page.evaluate("() => new URL(location.href).searchParams.get('k')")
            if found != str(expect_k):
                raise AssertionError(f"after the key press the link has k={found}, expected {expect_k}")
        return t_idle - t0, t_server - t0
    return None


async def check_own_view(page, s: Session, k_now: int) -> None:
    # the checked elements must be drawn, whatever the settle heuristics said (else: the checks say why)
    try:
        await page.wait_for_function(ROUTING_DRAWN_JS, arg=k_now, timeout=60_000)
    except Exception:                                            # noqa: BLE001
        pass
    chips = await page.locator(CHIPS).all_inner_texts()
    spelled = "".join(chips).replace("␣", " ").replace("↵", "\n")
    markers = set(MARKER.findall(spelled))
    if markers != {s.marker}:
        raise AssertionError(f"token chips show markers {sorted(markers)}, expected only {s.marker}: {spelled[:120]!r}")
    body = await page.inner_text("body")
    if f"{k_now} of 896" not in body:
        shown = sorted(set(re.findall(r"\b(\d+) of 896\b", body)))
        link = await page.evaluate("() => new URL(location.href).searchParams.get('k')")
        raise AssertionError(f"the page does not show this session's top-k ({k_now} of 896) but {shown} "
                             f"of 896; link k={link}")
    others = set(MARKER.findall(body)) - {s.marker}
    if others:
        raise AssertionError(f"the page text names other sessions' markers {sorted(others)}")
    title = await page.evaluate(GRID_TITLE_JS)
    if title is None:
        charts = await page.evaluate("() => [...document.querySelectorAll('[data-testid=\"stVegaLiteChart\"]')]"
                                     ".map(c => c.getAttribute('aria-label') || '?')")
        raise AssertionError(f"no routing grid on the page; its charts: {charts}")
    if not re.sub(r"<[^>]*>", "", str(title)).startswith(f"Layer {s.layer}:"):
        raise AssertionError(f"the grid shows {title!r}, not this session's layer {s.layer}")


async def run_session(browser, base: str, pages, s: Session, timeout_ms: float, interact_all: bool) -> None:
    ctx = await browser.new_context(viewport={"width": 1400, "height": 2400})
    await ctx.add_init_script(WATCH_RUNS)
    page = await ctx.new_page()
    net = NetWatch(page)
    js_errors = []
    page.on("pageerror", lambda e: js_errors.append(str(e)))
    try:
        for spec in pages:
            name = spec.url_path
            try:
                t0 = time.time()
                await page.goto(url_for(base, spec, s), wait_until="domcontentloaded", timeout=timeout_ms)
                t_idle, t_server = await settled(page, net, timeout_ms)
                s.renders.append((name, t_idle - t0, t_server - t0))
                if await page.locator('[data-testid="stException"]').count():
                    s.failures.append((name, "exception on the page: " + (await page.locator(
                        '[data-testid="stException"]').first.inner_text())[:300]))
                    continue
                others = set(MARKER.findall(await page.inner_text("body"))) - {s.marker}
                if others:
                    s.failures.append((name, f"the page names other sessions' markers {sorted(others)}"))
                if name == "routing":
                    await check_own_view(page, s, s.k)
                    token_js = "() => new URL(location.href).searchParams.get('token')"
                    token_before = await page.evaluate(token_js)
                    latency = await interact(page, net, spec, s, timeout_ms)
                    s.interactions.append((name, *latency))
                    if await page.locator('[data-testid="stException"]').count():
                        s.failures.append((name, "exception after the interaction"))
                    else:
                        await check_own_view(page, s, s.k - 1)
                        token_after = await page.evaluate(token_js)
                        if token_after != token_before:
                            s.failures.append((name, f"moving top-k moved the token from {token_before} to "
                                                     f"{token_after}"))
                elif interact_all:
                    latency = await interact(page, net, spec, s, timeout_ms)
                    if latency is not None:
                        s.interactions.append((name, *latency))
                    if await page.locator('[data-testid="stException"]').count():
                        s.failures.append((name, "exception after the interaction"))
            except Exception as e:                                  # noqa: BLE001 - recorded, reported
                s.failures.append((name, f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"))
        if js_errors:
            s.failures.append(("(browser)", f"JavaScript errors: {js_errors[:3]}"))
    finally:
        await ctx.close()


# ---- a phase: one server, N sessions ---------------------------------------------------------------

async def run_phase(browser, n: int, pages, args) -> dict:
    port = args.port or free_port()
    server = Server(port)
    try:
        t_start = time.perf_counter()
        await asyncio.to_thread(server.wait_healthy)
        healthy_s = time.perf_counter() - t_start
        sampler = MemorySampler(server.proc.pid)
        sampler.start()
        await asyncio.sleep(1.0)
        idle_rss = sampler.last
        sessions = [make_session(i) for i in range(n)]
        t0 = time.perf_counter()
        await asyncio.gather(*(run_session(browser, server.base, pages, s, args.timeout * 1000, args.interact_all)
                               for s in sessions))
        wall = time.perf_counter() - t0
        sampler.stop()
        alive = server.proc.poll() is None and server.healthy()
        return {"sessions": n, "wall_s": wall, "healthy_after_s": healthy_s, "idle_rss": idle_rss,
                "peak_rss": sampler.peak, "end_rss": sampler.last, "server_alive": alive,
                "detail": [asdict(s) for s in sessions]}
    finally:
        server.stop()


def mb(b: float) -> str:
    return f"{b / 2**20:,.0f} MB"


def report(phase: dict, pages) -> None:
    n, detail = phase["sessions"], phase["detail"]
    print(f"\n== {n} session{'s' if n > 1 else ''}: wall {phase['wall_s']:.0f} s, server healthy after "
          f"{phase['healthy_after_s']:.1f} s, RSS idle {mb(phase['idle_rss'])}, peak {mb(phase['peak_rss'])}, "
          f"end {mb(phase['end_rss'])}, server {'alive' if phase['server_alive'] else 'DOWN'}")
    print("seconds from navigation (or key press) until the page is drawn, and until the server finished the run")
    print(f"{'page':<14}{'n':>4}{'drawn p50':>11}{'p95':>7}{'max':>7}{'server p50':>12}{'p95':>7}{'failed':>8}")

    def row(name, items, failed):
        drawn, server = [d for d, _ in items], [sv for _, sv in items]
        print(f"{name:<14}{len(items):>4}{pct(drawn, 50):>11.1f}{pct(drawn, 95):>7.1f}"
              f"{max(drawn, default=float('nan')):>7.1f}{pct(server, 50):>12.1f}{pct(server, 95):>7.1f}{failed:>8}")

    for spec in pages:
        items = [(d, sv) for s in detail for p, d, sv in s["renders"] if p == spec.url_path]
        row(spec.url_path, items, sum(1 for s in detail for p, _ in s["failures"] if p == spec.url_path))
    for label, keep in (("key: routing", lambda p: p == "routing"), ("key: others", lambda p: p != "routing")):
        items = [(d, sv) for s in detail for p, d, sv in s["interactions"] if keep(p)]
        if items:
            row(label, items, 0)
    fails = [(s["index"], p, m) for s in detail for p, m in s["failures"]]
    print(f"failures: {len(fails)}")
    for i, p, m in fails[:40]:
        print(f"  session {i:>2} {p:<12} {m}")
    if len(fails) > 40:
        print(f"  … {len(fails) - 40} more")


async def main_async(args) -> int:
    from playwright.async_api import async_playwright
    wanted = None if args.pages in ("", "all") else [p.strip().strip("/") for p in args.pages.split(",") if p.strip()]
    pages = [s for s in PAGES if wanted is None or s.url_path in wanted]
    unknown = set(wanted or []) - {s.url_path for s in PAGES}
    if unknown or not pages:
        print(f"unknown pages {sorted(unknown)}; known: {[s.url_path for s in PAGES]}", file=sys.stderr)
        return 2
    phases = [int(x) for x in args.phases.replace("N", str(args.sessions)).split(",")]
    exe = chromium_path()
    if exe is None:
        print("no chromium found (apt-get install -y chromium)", file=sys.stderr)
        return 2
    print(f"pages: {', '.join(s.url_path for s in pages)}; phases: {phases} sessions; "
          f"timeout {args.timeout:.0f} s per wait; {os.cpu_count()} CPUs")
    results = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_FLAGS)
        try:
            for n in phases:
                phase = await run_phase(browser, n, pages, args)
                results.append(phase)
                report(phase, pages)
        finally:
            await browser.close()

    ok = all(ph["server_alive"] and not any(s["failures"] for s in ph["detail"]) for ph in results)
    print("\n== summary")
    print(f"{'sessions':>8}{'render p50':>12}{'p95':>8}{'key p50':>9}{'p95':>8}{'key, server p50':>17}{'p95':>8}"
          f"{'peak RSS':>11}{'failures':>10}")
    for ph in results:
        r = [d for s in ph["detail"] for _, d, _ in s["renders"]]
        it = [d for s in ph["detail"] for _, d, _ in s["interactions"]]
        its = [sv for s in ph["detail"] for _, _, sv in s["interactions"]]
        nf = sum(len(s["failures"]) for s in ph["detail"])
        print(f"{ph['sessions']:>8}{pct(r, 50):>11.1f}s{pct(r, 95):>7.1f}s{pct(it, 50):>8.1f}s{pct(it, 95):>7.1f}s"
              f"{pct(its, 50):>16.1f}s{pct(its, 95):>7.1f}s{mb(ph['peak_rss']):>11}{nf:>10}")
    one = next((ph for ph in results if ph["sessions"] == 1), None)
    many = max(results, key=lambda ph: ph["sessions"])
    if one is not None and many is not one:
        limit = 2 * one["peak_rss"] + 200 * 2**20
        within = many["peak_rss"] <= limit
        ok = ok and within
        print(f"memory: peak({many['sessions']}) = {mb(many['peak_rss'])} vs 2 x peak(1) + 200 MB = {mb(limit)}: "
              f"{'OK' if within else 'OVER'}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
        print(f"raw results: {args.json}")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=20, help="concurrent sessions in the big phase (default 20)")
    ap.add_argument("--pages", default="all", help="comma-separated url paths (default: every page)")
    ap.add_argument("--port", type=int, default=0, help="server port (default: a free one)")
    ap.add_argument("--phases", default="1,N", help="session counts to run, N = --sessions (default 1,N)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds to wait for one page or interaction")
    ap.add_argument("--interact-all", action="store_true", help="also move the first slider of every page")
    ap.add_argument("--json", default="", help="write the raw results here")
    args = ap.parse_args()
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
