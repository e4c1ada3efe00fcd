"""Interaction latency of the Routing explorer against the framework's floor, and page reloads, in one run.

    python bench/bench_interactions.py                       # everything, 8 repeats after 2 warm-up rounds
    python bench/bench_interactions.py --n 12 --json /tmp/interactions.json
    python bench/bench_interactions.py --parts interactions  # only the floor and the Routing explorer
    python bench/bench_interactions.py --parts reloads,first --pages overview,routing
    python bench/bench_interactions.py --parts held          # a slider's arrow key held for 20 steps

What it launches (each on a free loopback port, stopped at the end): `streamlit run bench/floor_app.py`
(the floor: one slider, one button, one plotly scatter of 896 squares, nothing else: the cheapest rerun
of this Streamlit on this machine), `streamlit run serve.py` for the app, and for the first
visits a separate, fresh `streamlit run serve.py`. One headless Chromium (Debian's, see
bench/harness.py) drives them all through Playwright's sync API.

Latency of an input: from the input event itself (the page's own `keydown` / `click` event, timed by
the browser) until the app is idle again with the change drawn: the rerun's result is on the page (a
marker that only the server's rerun rewrites has changed: the floor's line of text; on /routing the
link, the grid's title, the "Experts per token" metric, the expert panel's buttons or the charts'
titles; so a rerun too fast to see the "running" state is still caught), the app is idle and
connected, no element is a loading skeleton, and the DOM has been quiet for 0.4 s and still is 0.3 s
later with no new run. The end is the last DOM change before that quiet (for the floor that is
plotly's redraw of the scatter); a hover tooltip that opens meanwhile (a button's help text appears
~0.5 s after the pointer arrives) is not a change of the app's answer and does not count. After each input
the expected change is checked (the grid shows
the next layer, the metric the new top-k, the chip is selected, the panel's buttons swapped, the
toggle and the link agree), and the run stops with a clear message when a widget is missing.
A slider key is timed as a person feels it: Streamlit commits it after a short debounce, and that
wait is in the figure. Inputs run round-robin (all floor and routing inputs once per round) so that
a burst of load from elsewhere spreads over all of them; the first `--warmup` rounds are not counted.

- floor: slider ArrowRight, button click.
- /routing: "Layer" slider ArrowRight; "Experts per token (top-k)" slider ArrowRight (16 -> 17) and
  back ArrowLeft (17 -> 16); a click on the next token chip (st.pills "Token …"); "Next"; "Knock out N"
  in the expert panel, then "Restore N"; the "Balancing bias" toggle off, then on. Each round ends
  with the routing back at its defaults, so every input is timed from the same kind of state.
- held key (`--parts held`): on /routing, the "Layer" slider's ArrowRight and the top-k slider's ArrowRight,
  then ArrowLeft, each pressed HELD_KEYS times HELD_REPEAT_MS apart (a keyboard's auto-repeat), timed from the
  last key's event until the page shows the value HELD_KEYS steps on, drawn and idle (goal: within 2 s).
- warm reload: the floor app (a reference, no goal), then every page of app/navigation.py PAGES, each
  visited once, then reloaded (warm-up, then N). Timed from the reload call until the page is drawn and
  quiet (same rule; the ratio column is to the floor app's reload).
- first visit: the floor app's, on a fresh server in a new browser context (a reference, no goal: what
  Streamlit itself costs a first page here); then a fresh server of the app, and each page once, in
  PAGES order, in one new browser context (the first page also pays for the imports; the app's warm-up,
  app/warm.py, starts after it, as it does for a person), the next page at once or, with `--think S`,
  S seconds after the one before was drawn.

Goals (checked per row): slider keys <= 1.5x the floor's slider key (median), clicks and toggles
<= 2.5x the floor's click, p95 <= 2x median, warm reload median <= 1.5 s, first visit <= 5 s.
Exit status: 0 all goals met, 1 some goal missed, 2 something could not be measured (a widget missing,
a server that did not start, an exception on the page, ...: the table says which, as ERROR rows; a
failing page is skipped and the next one measured, a failing input ends the interactions).
Note: the browser, both servers and this script share the machine's cores; figures taken while other
work runs on the machine are slower and noisier (the start and end load averages are printed).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.harness import CHROMIUM_FLAGS, IDLE, chromium_path, free_port, pct  # noqa: E402
from deploy.launcher import stop_process  # noqa: E402

FLOOR_APP = Path(__file__).resolve().parent / "floor_app.py"
QUIET_MS = 400            # the DOM must have been quiet this long ...
CONFIRM_S = 0.3           # ... and still be, with no new run, this much later
# How often the page's state is read while waiting. The time measured is the page's own last change (the
# observer's timestamp), not when a poll saw it, so polling less often costs no precision; each poll reads
# innerText (a forced layout), which at 25 ms slowed a page of the app's size measurably while it drew.
POLL_MS = 100
START_LAYER = 20          # the Routing explorer starts here (a MoE layer; two layers are added per round)
VIEWPORT = {"width": 1400, "height": 2400}

GOAL_KEY, GOAL_CLICK, GOAL_TAIL, GOAL_RELOAD_S, GOAL_FIRST_S = 1.5, 2.5, 2.0, 1.5, 3.0
GOAL_HELD_S = 2.0
HELD_KEYS, HELD_REPEAT_MS = 20, 33        # a held arrow key: 20 presses at a keyboard's ~30 per second


class BenchError(RuntimeError):
    """The benchmark cannot go on (a widget is missing, a server died, the page shows an exception)."""


# ---- in the page -----------------------------------------------------------------------------------
# Installed in every document before the app's scripts. __bwLastMut: performance.now() of the last DOM
# change anywhere; __bwRan: a script run was seen (the state attribute was "running", or an element
# went stale) or a canvas was redrawn; __bwRunEnd: when the state last turned from running to notRunning; __bwInput: the
# first keydown/click event after __bwArm was set, with the event's own timestamp.
WATCH = """
(() => {
  if (window.__bw) return;
  window.__bw = true; window.__bwRan = false; window.__bwLastMut = performance.now();
  window.__bwRunEnd = null; window.__bwInput = null; window.__bwArm = false;
  let app = null;
  const note = () => {
    if (!app || !app.isConnected) app = document.querySelector('[data-testid="stApp"]');
    const v = app ? app.getAttribute('data-test-script-state') : null;
    if (v === 'running') window.__bwRan = true;
    if (v === 'notRunning' && window.__bwState === 'running') window.__bwRunEnd = performance.now();
    window.__bwState = v;
  };
  // no timer polls it: a 10 ms setInterval cost the page ~0.2 s of CPU per input (Chrome's sampling profiler)
  // A hover tooltip (a button's help, opening ~0.5 s after the pointer arrives; a chart's tooltip) is no
  // part of a rerun's answer: its nodes live outside the app's root or under role=tooltip, and the hovered
  // element only gains aria-describedby. Such changes do not move the last-change time.
  const hoverOnly = r => r.attributeName === 'aria-describedby' || (() => {
    const t = r.target.nodeType === 1 ? r.target : r.target.parentElement;
    return !t || !t.closest('[data-testid="stApp"]') || t.closest('[role="tooltip"]') !== null;
  })();
  new MutationObserver(records => {
    if (!records.every(hoverOnly)) window.__bwLastMut = performance.now();
    for (const r of records) {
      if (r.attributeName === 'data-test-script-state' && r.oldValue === 'running') {
        window.__bwRan = true; window.__bwRunEnd = performance.now();
      }
      if (r.attributeName === 'data-stale' && r.target.getAttribute('data-stale') === 'true') window.__bwRan = true;
    }
    note();
  }).observe(document, {subtree: true, childList: true, characterData: true, attributes: true,
                        attributeOldValue: true});
  // a canvas redraw (Vega-Lite charts draw on one) changes no DOM node: count each as a change too
  for (const name of ['clearRect', 'restore']) {
    const orig = CanvasRenderingContext2D.prototype[name];
    CanvasRenderingContext2D.prototype[name] = function (...args) {
      window.__bwLastMut = performance.now();
      return orig.apply(this, args);
    };
  }
  const mark = e => {
    if (window.__bwArm) { window.__bwArm = false; window.__bwInput = {type: e.type, t: e.timeStamp}; }
  };
  window.addEventListener('keydown', mark, true);
  window.addEventListener('click', mark, true);
})()
"""
IDLE_JS = ("(document.querySelector('" + IDLE.replace("'", "\\'") + "') !== null"
           " && !document.querySelector('[data-testid=\"stSkeleton\"]'))")
QUIET_JS = f"(performance.now() - window.__bwLastMut > {QUIET_MS})"
CONTENT_JS = "(document.querySelector('[data-testid=\"stMain\"] [data-testid=\"stElementContainer\"]') !== null)"

# What a rerun rewrites. The floor: its one line of text. /routing: the link (the page writes the whole
# view into it), the grid's title and the "Experts per token" metric.
FLOOR_STATE = """() => {
  const t = [...document.querySelectorAll('[data-testid="stText"]')].map(e => e.innerText)
    .find(s => s.startsWith('floor '));
  return {text: t === undefined ? null : t};
}"""
ROUTING_STATE = """() => {
  const head = document.querySelector('.st-key-routing_grid_title');
  const chosen = document.querySelector('.st-key-routing_grid_chosen');
  const title = head && document.querySelector('.st-key-routing_grid canvas') ? head.innerText.trim() : null;
  const charts = [chosen ? chosen.innerText : ''];
  for (const c of document.querySelectorAll('[data-testid="stVegaLiteChart"]'))
    charts.push(c.getAttribute('aria-label') || '?');
  let metric = null;
  for (const m of document.querySelectorAll('[data-testid="stMetric"]'))
    if (/Experts per token/.test(m.innerText)) {
      const v = m.querySelector('[data-testid="stMetricValue"]');
      metric = v ? v.innerText : m.innerText;
    }
  const panel = [...document.querySelectorAll('button')].filter(b => /(Knock out|Restore) \\d+/.test(b.innerText))
    .map(b => b.innerText.replace(/\\s+/g, ' ').trim() + (b.disabled ? ' (disabled)' : ''));
  return {search: location.search, params: Object.fromEntries(new URLSearchParams(location.search)),
          title: title, metric: metric, panel: panel, charts: charts};
}"""


def done_js(state_js: str) -> str:
    """True once the rerun's marker differs from `before` (a JSON string) and the page is idle and quiet."""
    return (f"(before) => {{ const s = ({state_js})(); delete s.params;"
            f" return JSON.stringify(s) !== before && {IDLE_JS} && {QUIET_JS}; }}")


def marker(page, state_js: str) -> str:
    return page.evaluate(f"() => {{ const s = ({state_js})(); delete s.params; return JSON.stringify(s); }}")


# ---- servers ---------------------------------------------------------------------------------------

class Server:
    """`streamlit run SCRIPT` on a free loopback port, its output in a temporary log."""

    def __init__(self, script: Path, cwd: Path, name: str):
        self.name, self.port = name, free_port()
        self.base = f"http://127.0.0.1:{self.port}/"
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", prefix=f"bench-{name}-", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(script), "--server.headless", "true",
             "--server.address", "127.0.0.1", "--server.port", str(self.port), "--browser.gatherUsageStats",
             "false", "--server.fileWatcherType", "none", "--server.runOnSave", "false"],
            cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_healthy(self, timeout: float = 180) -> float:
        t0, deadline = time.perf_counter(), time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"the {self.name} server exited early:\n{self.tail()}")
            try:
                if urllib.request.urlopen(self.base + "_stcore/health", timeout=2).read() == b"ok":
                    return time.perf_counter() - t0
            except OSError:
                time.sleep(0.2)
        raise BenchError(f"the {self.name} server was not healthy after {timeout:.0f} s:\n{self.tail()}")

    def tail(self, n: int = 3000) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-n:]

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()
        os.unlink(self.log.name)


def load_pages(app_dir: Path):
    """app/navigation.py PAGES of the app under test (loaded from its file: it imports nothing of the app)."""
    spec = importlib.util.spec_from_file_location("_bench_navigation", app_dir / "app" / "navigation.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod                      # dataclasses looks the module up while it builds
    spec.loader.exec_module(mod)
    return mod.PAGES


# ---- waiting ---------------------------------------------------------------------------------------

def check_no_exception(page, where: str) -> None:
    exc = page.locator('[data-testid="stException"]')
    if exc.count():
        raise BenchError(f"{where}: the page shows an exception: {exc.first.inner_text()[:600]}")


def settle_after_input(page, state_js: str, before: str, timeout_ms: float) -> float:
    """Wait until the rerun's change is on the page and the app is idle and quiet (confirmed CONFIRM_S
    later with no new run); returns performance.now() of the last DOM change."""
    deadline = time.time() + timeout_ms / 1000
    wait_js = done_js(state_js)
    while True:
        left = max(1000.0, (deadline - time.time()) * 1000)
        page.wait_for_function(wait_js, arg=before, timeout=left, polling=POLL_MS)
        end = page.evaluate("window.__bwLastMut")
        page.evaluate("window.__bwRan = false")
        time.sleep(CONFIRM_S)
        if page.evaluate(f"() => window.__bwRan === false && window.__bwLastMut === {end!r} && {IDLE_JS}"):
            return end
        if time.time() > deadline:
            raise BenchError("the page kept changing or re-running after the input")


def settle_navigation(page, timeout_ms: float) -> float:
    """After a navigation or reload: a run has drawn content, the app is idle and connected, no skeleton,
    the DOM quiet, still so CONFIRM_S later; returns the epoch (ms) of the last DOM change."""
    deadline = time.time() + timeout_ms / 1000
    js = f"() => {CONTENT_JS} && {IDLE_JS} && {QUIET_JS}"
    while True:
        left = max(1000.0, (deadline - time.time()) * 1000)
        page.wait_for_function(js, timeout=left, polling=POLL_MS)
        end = page.evaluate("window.__bwLastMut")
        page.evaluate("window.__bwRan = false")
        time.sleep(CONFIRM_S)
        if page.evaluate(f"() => window.__bwRan === false && window.__bwLastMut === {end!r} && {IDLE_JS}"):
            return page.evaluate(f"performance.timeOrigin + {end!r}")
        if time.time() > deadline:
            raise BenchError("the page kept changing or re-running after loading")


# ---- locating widgets ------------------------------------------------------------------------------

def _names(page, role: str) -> list[str]:
    return page.get_by_role(role).evaluate_all(
        "els => els.map(e => (e.getAttribute('aria-label') || e.innerText || '').replace(/\\s+/g, ' ').trim())"
        ".filter(s => s && !s.startsWith('Help for'))")


def by_role(page, role: str, patterns, what: str, where: str):
    """The first (visible, if any is) element of `role` whose accessible name matches one of `patterns`
    (an exact label, or a regular expression), in order; a clear error listing what the page has otherwise."""
    for pat in patterns:
        if isinstance(pat, str):           # exactly the label (a slider's input is named "label label")
            pat = re.compile(rf"^\s*{re.escape(pat)}(\s+{re.escape(pat)})?\s*$")
        loc = page.get_by_role(role, name=pat)
        count = loc.count()
        for i in range(count):
            if loc.nth(i).is_visible():
                return loc.nth(i)
        if count:                                  # e.g. a slider's range input, visually hidden
            return loc.first
    raise BenchError(f"{where}: no {role} for {what} (looked for {[getattr(p, 'pattern', p) for p in patterns]}); "
                     f"the page's {role} elements: {_names(page, role)[:40]}")


def enabled(loc, what: str, where: str):
    if not loc.is_enabled():
        raise BenchError(f"{where}: {what} is disabled")
    return loc


def toggle_label(page, patterns, what: str, where: str):
    """The clickable label of an st.toggle (its input is a visually hidden role=switch)."""
    sw = by_role(page, "switch", patterns, what, where)
    label = page.locator('[data-testid="stCheckbox"]').filter(has=sw).locator("label").first
    return label if label.count() else sw


def token_chips(page, where: str):
    """The chips of the st.pills whose label starts with 'Token' (its help icon left out)."""
    groups = page.locator('[data-testid="stButtonGroup"], [data-testid="stPills"]').filter(
        has=page.locator('[data-testid="stWidgetLabel"]', has_text=re.compile(r"^\s*Token")))
    if groups.count() == 0:
        labels = page.locator('[data-testid="stButtonGroup"] [data-testid="stWidgetLabel"]').all_inner_texts()
        raise BenchError(f"{where}: no token chips (st.pills labelled 'Token …'); button groups on the page: "
                         f"{labels[:10]}")
    chips = groups.first.locator("button:not([aria-label^='Help for'])")
    if chips.count() < 2:
        raise BenchError(f"{where}: the token pills have {chips.count()} chip(s); need at least 2")
    return chips


# ---- inputs ----------------------------------------------------------------------------------------

@dataclass
class Input:
    name: str
    kind: str                                  # "key" or "click": which floor figure it is held to
    target: str                                # "floor" or "routing"
    act: Callable                              # (page, state before) -> expected-change checker(state after)
    samples: list = field(default_factory=list)
    server_ms: list = field(default_factory=list)


def page_url(spec) -> str:
    """The address of a page: the default (first) page lives at the root; its url path there would be a
    "Page not found" (Streamlit serves the default page at / only)."""
    from app.navigation import PAGES
    return "" if spec.url_path == PAGES[0].url_path else spec.url_path


def _int(params: dict, name: str, default: int | None = None) -> int | None:
    v = params.get(name)
    try:
        return int(v) if v is not None else default
    except ValueError:
        return default


FLOOR_WHERE, ROUTING_WHERE = "floor app", "Routing explorer (/routing)"
FLOOR_KEY = "(floor app)"
RE_FLOOR = re.compile(r"floor value=(\d+) clicks=(\d+)")


def floor_values(state: dict) -> tuple[int, int]:
    m = RE_FLOOR.search(state.get("text") or "")
    if not m:
        raise BenchError(f"{FLOOR_WHERE}: its 'floor value=… clicks=…' line is missing (got {state.get('text')!r})")
    return int(m.group(1)), int(m.group(2))


def act_floor_key(page, before):
    v, c = floor_values(before)
    by_role(page, "slider", ["Value"], "the slider 'Value'", FLOOR_WHERE).press("ArrowRight")
    return lambda page, after: None if floor_values(after) == (v + 1, c) else f"expected value={v + 1}, got {after['text']!r}"


def act_floor_click(page, before):
    v, c = floor_values(before)
    by_role(page, "button", ["Click"], "the button 'Click'", FLOOR_WHERE).click()
    return lambda page, after: None if floor_values(after) == (v, c + 1) else f"expected clicks={c + 1}, got {after['text']!r}"


LAYER_PATTERNS = ["Layer", re.compile(r"^Layer\b")]
TOPK_PATTERNS = ["Experts per token (top-k)", re.compile(r"top-k", re.I), re.compile(r"^Experts per token")]
NEXT_PATTERNS = [re.compile(r"(^|\s)Next$"), re.compile(r"\bNext\b")]
KNOCK_PATTERNS = [re.compile(r"Knock out \d+$"), re.compile(r"Knock out \d+")]
RESTORE_PATTERNS = [re.compile(r"Restore \d+$"), re.compile(r"Restore \d+")]
BIAS_PATTERNS = ["Balancing bias (selection only)", re.compile(r"^Balancing bias"), re.compile(r"bias", re.I)]
FALSY = {"off", "0", "false", "no"}


def shown_layer(state: dict) -> int:
    """The layer the page shows: from the grid's title ("Layer N: …"), else from the link."""
    m = re.match(r"Layer (\d+)\b", re.sub(r"<[^>]*>", "", state.get("title") or ""))
    if m:
        return int(m.group(1))
    v = _int(state["params"], "layer")
    if v is None:
        raise BenchError(f"{ROUTING_WHERE}: cannot tell the layer: the grid's title is {state.get('title')!r} "
                         f"and the link is {state['search']!r}")
    return v


def shown_k(state: dict) -> int:
    """top-k as the page shows it: the "Experts per token" metric ("16 of 896"), else the link (16 if absent)."""
    m = re.match(r"\s*(\d+)\s+of\b", state.get("metric") or "")
    return int(m.group(1)) if m else _int(state["params"], "k", 16)


def expect_layer(n: int):
    def check(page, after):
        got = shown_layer(after)
        return None if got == n else f"expected the grid to show layer {n}, it shows {after.get('title')!r}"
    return check


def act_layer_key(page, before):
    n = shown_layer(before)
    by_role(page, "slider", LAYER_PATTERNS, "the 'Layer' slider", ROUTING_WHERE).press("ArrowRight")
    return expect_layer(n + 1)


def act_next(page, before):
    n = shown_layer(before)
    enabled(by_role(page, "button", NEXT_PATTERNS, "the 'Next' button", ROUTING_WHERE),
            "the 'Next' button", ROUTING_WHERE).click()
    return expect_layer(n + 1)


def act_topk(key: str, delta: int):
    def act(page, before):
        want = shown_k(before) + delta
        by_role(page, "slider", TOPK_PATTERNS, "the 'Experts per token (top-k)' slider", ROUTING_WHERE).press(key)

        def check(page, after):
            got = shown_k(after)
            return None if got == want else f"expected top-k {want}, the page shows {after.get('metric')!r} " \
                                            f"(link {after['search']!r})"
        return check
    return act


def selected_chip(chips) -> int | None:
    flags = chips.evaluate_all("els => els.map(e => e.getAttribute('aria-checked') === 'true' || "
                               "e.getAttribute('aria-pressed') === 'true' || e.dataset.selected === 'true')")
    return flags.index(True) if True in flags else None


def act_chip(page, before):
    chips = token_chips(page, ROUTING_WHERE)
    n = chips.count()
    cur = selected_chip(chips)
    if cur is None:
        cur = _int(before["params"], "token", n - 1)
    nxt = (cur + 1) % n
    chips.nth(nxt).click()

    def check(page, after):
        got = selected_chip(token_chips(page, ROUTING_WHERE))
        return None if got == nxt else f"expected token chip {nxt} selected, chip {got} is"
    return check


def _expert_button(page, patterns, what):
    btn = enabled(by_role(page, "button", patterns, what, ROUTING_WHERE), what, ROUTING_WHERE)
    name = re.sub(r"\s+", " ", btn.inner_text())
    m = re.search(r"(\d+)\s*$", name)
    if not m:
        raise BenchError(f"{ROUTING_WHERE}: {what} names no expert ({name!r})")
    return btn, m.group(1)


def expect_panel(expert: str, knocked: bool):
    """After Knock out N: "Restore N" enabled and "Knock out N" disabled; after Restore N: the reverse."""
    def check(page, after):
        panel = after.get("panel") or []
        want = {f"Knock out {expert}": knocked, f"Restore {expert}": not knocked}       # label: disabled?
        for label, disabled in want.items():
            hit = [b for b in panel if b.endswith(label) or b.endswith(label + " (disabled)")]
            if not hit:
                return f"the expert panel has no '{label}' button any more (buttons: {panel})"
            if hit[0].endswith("(disabled)") != disabled:
                return f"expected '{label}' {'disabled' if disabled else 'enabled'}; the panel shows {panel}"
        return None
    return check


def act_knock(page, before):
    btn, expert = _expert_button(page, KNOCK_PATTERNS, "the 'Knock out N' button of the expert panel")
    btn.click()
    return expect_panel(expert, knocked=True)


def act_restore(page, before):
    btn, expert = _expert_button(page, RESTORE_PATTERNS, "the 'Restore N' button of the expert panel")
    btn.click()
    return expect_panel(expert, knocked=False)


def act_bias(want_on: bool):
    def act(page, before):
        what = "the 'Balancing bias' toggle"
        sw = by_role(page, "switch", BIAS_PATTERNS, what, ROUTING_WHERE)
        if sw.is_checked() == want_on:
            raise BenchError(f"{ROUTING_WHERE}: {what} is already {'on' if want_on else 'off'} (expected it "
                             f"{'off' if want_on else 'on'}: the page's default is bias on)")
        toggle_label(page, BIAS_PATTERNS, what, ROUTING_WHERE).click()

        def check(page, after):
            if by_role(page, "switch", BIAS_PATTERNS, what, ROUTING_WHERE).is_checked() != want_on:
                return f"{what} did not turn {'on' if want_on else 'off'}"
            raw = after["params"].get("bias")
            link_on = raw is None or str(raw).lower() not in FALSY
            if link_on != want_on:
                return f"the link says bias={raw!r} after turning the bias {'on' if want_on else 'off'}"
            return None
        return check
    return act


def act_held(patterns, what: str, key: str, shown, expect):
    """The slider's arrow key pressed HELD_KEYS times, HELD_REPEAT_MS apart; the input event timed is the last
    one (measure() armed the first: it is armed again before the last press)."""
    def act(page, before):
        start = shown(before)
        slider = by_role(page, "slider", patterns, what, ROUTING_WHERE)
        slider.focus()
        for _ in range(HELD_KEYS - 1):
            page.keyboard.press(key)
            page.wait_for_timeout(HELD_REPEAT_MS)
        page.evaluate("window.__bwArm = true; window.__bwInput = null; window.__bwRunEnd = null")
        page.keyboard.press(key)
        return expect(start + (HELD_KEYS if key == "ArrowRight" else -HELD_KEYS))
    return act


def expect_k(want: int):
    def check(page, after):
        got = shown_k(after)
        return None if got == want else f"expected top-k {want}, the page shows {after.get('metric')!r}"
    return check


def make_held() -> list[Input]:
    return [
        Input(f"routing: Layer slider, ArrowRight held {HELD_KEYS}", "held", "routing",
              act_held(LAYER_PATTERNS, "the 'Layer' slider", "ArrowRight", shown_layer, expect_layer)),
        Input(f"routing: top-k slider, ArrowRight held {HELD_KEYS}", "held", "routing",
              act_held(TOPK_PATTERNS, "the top-k slider", "ArrowRight", shown_k, expect_k)),
        Input(f"routing: top-k slider, ArrowLeft held {HELD_KEYS}", "held", "routing",
              act_held(TOPK_PATTERNS, "the top-k slider", "ArrowLeft", shown_k, expect_k)),
    ]


def measure_round(inputs, page_of, r: int, rounds: int, counted: bool, timeout_ms: float, log) -> None:
    """Round r of `rounds`: each input once, on page_of(input) = (page, its state script); its samples kept if counted
    (not a warm-up round), and the round logged."""
    line = []
    for inp in inputs:
        page, state_js = page_of(inp)
        ms, server_ms = measure(page, inp, state_js, timeout_ms)
        line.append(f"{ms:.0f}")
        if counted:
            inp.samples.append(ms)
            if server_ms is not None:
                inp.server_ms.append(server_ms)
    log(f"  round {r + 1}/{rounds}{' (warm-up)' if not counted else ''}: " + " ".join(line) + " ms")


def run_held(browser, app_base: str, n: int, warmup: int, timeout_ms: float, log) -> tuple[list[Input], str | None]:
    """Each round: the layer held from START_LAYER on, top-k held up from 16 and back down (the page reopened at
    START_LAYER first, so every round starts from the same view)."""
    inputs = make_held()
    ctx, page = new_page(browser)
    error = None
    try:
        for r in range(warmup + n):
            open_routing(page, app_base, timeout_ms)
            measure_round(inputs, lambda inp: (page, ROUTING_STATE), r, warmup + n, r >= warmup, timeout_ms, log)
    except Exception as e:                                            # noqa: BLE001 - reported, run goes on
        error = why(e)
        log(f"  STOPPED: {error}")
    finally:
        ctx.close()
    return inputs, error


def make_inputs() -> list[Input]:
    return [
        Input("floor: slider ArrowRight", "key", "floor", act_floor_key),
        Input("floor: button click", "click", "floor", act_floor_click),
        Input("routing: Layer slider ArrowRight", "key", "routing", act_layer_key),
        Input("routing: Next button", "click", "routing", act_next),
        Input("routing: token chip click", "click", "routing", act_chip),
        Input("routing: top-k slider ArrowRight", "key", "routing", act_topk("ArrowRight", +1)),
        Input("routing: top-k slider ArrowLeft", "key", "routing", act_topk("ArrowLeft", -1)),
        Input("routing: Knock out N", "click", "routing", act_knock),
        Input("routing: Restore N", "click", "routing", act_restore),
        Input("routing: Balancing bias off", "click", "routing", act_bias(False)),
        Input("routing: Balancing bias on", "click", "routing", act_bias(True)),
    ]


def measure(page, inp: Input, state_js: str, timeout_ms: float) -> tuple[float, float | None]:
    """One input: (ms from the input event until drawn and idle, ms until the server's run ended or None)."""
    where = FLOOR_WHERE if inp.target == "floor" else ROUTING_WHERE
    before_state = page.evaluate(state_js)
    before = marker(page, state_js)
    page.evaluate("window.__bwArm = true; window.__bwInput = null; window.__bwRan = false; window.__bwRunEnd = null")
    t_fallback = page.evaluate("performance.now()")
    check = inp.act(page, before_state)
    try:
        end = settle_after_input(page, state_js, before, timeout_ms)
    except Exception as e:                                        # noqa: BLE001 - said why, then stop
        raise BenchError(f"{where}: {inp.name}: the page did not show the change within {timeout_ms / 1000:.0f} s "
                         f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    ev = page.evaluate("window.__bwInput")
    t_in = ev["t"] if ev else t_fallback
    run_end = page.evaluate("window.__bwRunEnd")
    check_no_exception(page, f"{where}, after {inp.name}")
    problem = check(page, page.evaluate(state_js))
    if problem:
        raise BenchError(f"{where}: {inp.name}: {problem}")
    return end - t_in, (run_end - t_in if run_end is not None else None)


# ---- the phases ------------------------------------------------------------------------------------

def new_page(browser):
    ctx = browser.new_context(viewport=VIEWPORT)
    ctx.add_init_script(WATCH)
    page = ctx.new_page()
    page.js_errors = []
    page.on("pageerror", lambda e: page.js_errors.append(str(e)))
    return ctx, page


def open_routing(page, base: str, timeout_ms: float) -> int:
    """Open /routing at START_LAYER with default routing; returns the Layer slider's maximum."""
    page.goto(base + f"routing?layer={START_LAYER}", wait_until="commit", timeout=timeout_ms)
    settle_navigation(page, timeout_ms)
    try:
        page.wait_for_function("() => document.querySelector('.st-key-routing_grid canvas') !== null",
                               timeout=timeout_ms)
    except Exception:                                             # noqa: BLE001 - said below
        pass
    check_no_exception(page, ROUTING_WHERE)
    state = page.evaluate(ROUTING_STATE)
    if state["title"] is None:
        raise BenchError(f"{ROUTING_WHERE}: no expert grid (a canvas under .st-key-routing_grid and a title "
                         "'Layer N: …' in .st-key-routing_grid_title)")
    if shown_layer(state) != START_LAYER:
        raise BenchError(f"{ROUTING_WHERE}: opened with ?layer={START_LAYER} but the grid shows {state['title']!r}")
    slider = by_role(page, "slider", LAYER_PATTERNS, "the 'Layer' slider", ROUTING_WHERE)
    return int(slider.get_attribute("aria-valuemax") or slider.get_attribute("max") or 92)


def why(e: Exception) -> str:
    text = str(e).strip()
    return text if isinstance(e, BenchError) else f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def run_interactions(browser, floor_base: str, app_base: str, n: int, warmup: int, timeout_ms: float,
                     log) -> tuple[list[Input], str | None]:
    """Round-robin over the inputs; (the inputs with their samples, why it stopped early or None). An error
    ends this part (the page's state is then unknown); the samples taken so far are kept."""
    inputs = make_inputs()
    fctx, fpage = new_page(browser)
    rctx, rpage = new_page(browser)
    error = None
    try:
        fpage.goto(floor_base, wait_until="commit", timeout=timeout_ms)
        settle_navigation(fpage, timeout_ms)
        check_no_exception(fpage, FLOOR_WHERE)
        floor_values(fpage.evaluate(FLOOR_STATE))
        last = open_routing(rpage, app_base, timeout_ms)
        per_round = sum(1 for i in inputs if i.act in (act_layer_key, act_next))
        for r in range(warmup + n):
            if shown_layer(rpage.evaluate(ROUTING_STATE)) + per_round > last:   # keep clear of the last layer
                last = open_routing(rpage, app_base, timeout_ms)
            measure_round(inputs, lambda inp: (fpage, FLOOR_STATE) if inp.target == "floor" else (rpage, ROUTING_STATE),
                          r, warmup + n, r >= warmup, timeout_ms, log)
        for page, where in ((fpage, FLOOR_WHERE), (rpage, ROUTING_WHERE)):
            if page.js_errors:
                log(f"  note: JavaScript errors on the {where}: {page.js_errors[:3]}")
    except Exception as e:                                            # noqa: BLE001 - reported, run goes on
        error = why(e)
        log(f"  STOPPED: {error}")
    finally:
        fctx.close()
        rctx.close()
    return inputs, error


def run_reloads(browser, base: str, pages, n: int, warmup: int, timeout_ms: float, log,
                floor_base: str | None = None) -> tuple[dict[str, list], dict[str, str]]:
    """Warm reloads: ({url path: [ms]}, {url path: why it failed}); the floor app's reloads are under the
    key FLOOR_KEY (a reference). A failing page is recorded and the next one is measured."""
    out, errors = {}, {}
    targets = ([(FLOOR_KEY, floor_base)] if floor_base else []) + [(s.url_path, base + page_url(s)) for s in pages]
    for path, url in targets:
        shown = path if path == FLOOR_KEY else "/" + path
        ctx, page = new_page(browser)
        try:
            page.goto(url, wait_until="commit", timeout=timeout_ms)
            settle_navigation(page, timeout_ms)
            check_no_exception(page, shown)
            times = []
            for i in range(warmup + n):
                t0 = time.time() * 1000
                page.reload(wait_until="commit", timeout=timeout_ms)
                end = settle_navigation(page, timeout_ms)
                check_no_exception(page, f"{shown} (reloaded)")
                if i >= warmup:
                    times.append(end - t0)
            out[path] = times
            log(f"  {shown}: " + " ".join(f"{t:.0f}" for t in times) + " ms")
        except Exception as e:                                        # noqa: BLE001 - reported, next page
            errors[path] = why(e)
            log(f"  {shown}: FAILED: {errors[path][:300]}")
        finally:
            ctx.close()
    return out, errors


def first_visit_floor(browser, app_dir: Path, timeout_ms: float, log) -> float:
    """The floor app's first visit: a fresh server, a new browser context, one visit (ms). What Streamlit
    itself costs a first page on this machine (its scripts fetched and started, a session, one run)."""
    server = Server(FLOOR_APP, app_dir, "floor-first")
    try:
        server.wait_healthy()
        ctx, page = new_page(browser)
        try:
            t0 = time.time() * 1000
            page.goto(server.base, wait_until="commit", timeout=timeout_ms)
            ms = settle_navigation(page, timeout_ms) - t0
        finally:
            ctx.close()
    finally:
        server.stop()
    log(f"  floor app: {ms:.0f} ms")
    return ms


def run_first_visits(browser, app_dir: Path, pages, timeout_ms: float, log, think_s: float = 0.0):
    """The floor app's first visit (key FLOOR_KEY, a reference), then a fresh server of the app and each
    page once: ({url path: ms}, {url path: why it failed}, seconds until healthy)."""
    out, errors = {}, {}
    try:
        out[FLOOR_KEY] = first_visit_floor(browser, app_dir, timeout_ms, log)
    except Exception as e:                                            # noqa: BLE001 - a reference only
        errors[FLOOR_KEY] = why(e)
    server = Server(app_dir / "serve.py", app_dir, "first-visit")
    try:
        healthy = server.wait_healthy()
        log(f"  fresh server healthy after {healthy:.1f} s")
        ctx, page = new_page(browser)
        try:
            for spec in pages:
                try:
                    t0 = time.time() * 1000
                    page.goto(server.base + page_url(spec), wait_until="commit", timeout=timeout_ms)
                    end = settle_navigation(page, timeout_ms)
                    check_no_exception(page, f"/{spec.url_path} (first visit)")
                    out[spec.url_path] = end - t0
                    log(f"  /{spec.url_path}: {end - t0:.0f} ms")
                    time.sleep(think_s)                       # a person reading the page before the next
                except Exception as e:                                # noqa: BLE001 - reported, next page
                    errors[spec.url_path] = why(e)
                    log(f"  /{spec.url_path}: FAILED: {errors[spec.url_path][:300]}")
        finally:
            ctx.close()
    finally:
        server.stop()
    return out, errors, healthy


# ---- statistics and the report ---------------------------------------------------------------------

def make_row(name: str, group: str, samples: list, ref: float | None, ref_name: str | None,
             ratio_goal: float | None, abs_goal_ms: float | None, tail: bool, server_ms=None) -> dict:
    med, p95 = statistics.median(samples), pct(samples, 95)
    ratio = med / ref if ref else None
    checks = []
    if ratio_goal is not None and ratio is not None:
        checks.append({"goal": f"median <= {ratio_goal:g}x {ref_name}", "value": round(ratio, 2),
                       "limit": ratio_goal, "pass": ratio <= ratio_goal,
                       "by": f"{ratio:.2f}x vs {ratio_goal:g}x ({ratio / ratio_goal:.1f}x over)"})
    if abs_goal_ms is not None:
        checks.append({"goal": f"median <= {abs_goal_ms / 1000:g} s", "value": round(med, 1), "limit": abs_goal_ms,
                       "pass": med <= abs_goal_ms,
                       "by": f"{med / 1000:.2f} s vs {abs_goal_ms / 1000:g} s (+{(med - abs_goal_ms) / 1000:.2f} s)"})
    if tail and len(samples) > 1:
        checks.append({"goal": f"p95 <= {GOAL_TAIL:g}x median", "value": round(p95 / med, 2), "limit": GOAL_TAIL,
                       "pass": p95 <= GOAL_TAIL * med, "by": f"p95 {p95 / med:.2f}x median vs {GOAL_TAIL:g}x"})
    row = {"input": name, "group": group, "n": len(samples), "median_ms": round(med, 1), "p95_ms": round(p95, 1),
           "ratio": round(ratio, 2) if ratio is not None else None, "ratio_to": ref_name,
           "samples_ms": [round(s, 1) for s in samples], "checks": checks, "pass": all(c["pass"] for c in checks)}
    if server_ms:
        row["server_run_end_median_ms"] = round(statistics.median(server_ms), 1)
    return row


def error_row(name: str, group: str, error: str) -> dict:
    return {"input": name, "group": group, "n": 0, "median_ms": None, "p95_ms": None, "ratio": None,
            "ratio_to": None, "samples_ms": [], "checks": [], "pass": False, "error": error}


def build_rows(inputs, interactions_error, reloads, reload_errors, first, first_errors) -> list[dict]:
    rows = []
    by_name = {i.name: i for i in inputs}
    floor_key = by_name.get("floor: slider ArrowRight")
    floor_click = by_name.get("floor: button click")
    ref_key = statistics.median(floor_key.samples) if floor_key and floor_key.samples else None
    ref_click = statistics.median(floor_click.samples) if floor_click and floor_click.samples else None
    for i in inputs:
        if not i.samples:
            if interactions_error:
                rows.append(error_row(i.name, i.target, "not measured: " + interactions_error))
            continue
        if i.kind == "held":
            rows.append(make_row(i.name, "held", i.samples, ref_key, "floor slider key", None, GOAL_HELD_S * 1000,
                                 False, i.server_ms))
            continue
        if i.kind == "key":
            ref, ref_name, goal = ref_key, "floor slider key", GOAL_KEY
        else:
            ref, ref_name, goal = ref_click, "floor click", GOAL_CLICK
        is_floor = i.target == "floor"
        row = make_row(i.name, i.target, i.samples, ref, ref_name, None if is_floor else goal, None, True,
                       i.server_ms)
        if interactions_error:
            row["note"] = "the interactions stopped early: " + interactions_error
        rows.append(row)
    floor_reload = reloads.get(FLOOR_KEY)
    ref_reload = statistics.median(floor_reload) if floor_reload else None
    for path in list(reloads) + [p for p in reload_errors if p not in reloads]:
        name = f"warm reload {'floor app' if path == FLOOR_KEY else '/' + path}"
        if path in reload_errors:
            rows.append(error_row(name, "reload", reload_errors[path]))
        elif reloads[path]:
            is_floor = path == FLOOR_KEY
            rows.append(make_row(name, "reload", reloads[path], ref_reload, "floor reload", None,
                                 None if is_floor else GOAL_RELOAD_S * 1000, True))
    floor_first = first.get(FLOOR_KEY)
    for path in list(first) + [p for p in first_errors if p not in first]:
        is_floor = path == FLOOR_KEY
        name = f"first visit {'floor app' if is_floor else '/' + path}"
        if path in first_errors:
            rows.append(error_row(name, "first visit", first_errors[path]))
        else:
            rows.append(make_row(name, "first visit", [first[path]], floor_first, "floor first visit", None,
                                 None if is_floor else GOAL_FIRST_S * 1000, False))
    return rows


def print_table(rows: list[dict]) -> None:
    w = max([len(r["input"]) for r in rows] + [5]) + 2
    print(f"\n{'input':<{w}}{'n':>3}{'median':>10}{'p95':>10}{'ratio':>8}  {'goal':<54}result")
    for r in rows:
        if r.get("error"):
            msg = re.sub(r"\s+", " ", r["error"])
            print(f"{r['input']:<{w}}{0:>3}{'-':>10}{'-':>10}{'-':>8}  {'':<54}ERROR: {msg[:200]}")
            continue
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        goals = "; ".join(c["goal"] for c in r["checks"]) or "(reference)"
        res = "PASS" if r["pass"] else "FAIL: " + "; ".join(c["by"] for c in r["checks"] if not c["pass"])
        print(f"{r['input']:<{w}}{r['n']:>3}{r['median_ms']:>8.0f}ms{r['p95_ms']:>8.0f}ms{ratio:>8}  {goals:<54}{res}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=8, help="measured repeats of each input and reload (default 8)")
    ap.add_argument("--warmup", type=int, default=2, help="uncounted rounds / reloads first (default 2)")
    ap.add_argument("--json", default="", help="write the results here as JSON")
    ap.add_argument("--parts", default="interactions,reloads,first",
                    help="comma-separated: interactions, reloads, first, held (default: the first three)")
    ap.add_argument("--think", type=float, default=0.0,
                    help="first visits: seconds spent on each page before opening the next, as a person reading it "
                         "would (default 0: the next page at once)")
    ap.add_argument("--pages", default="all", help="url paths for reloads and first visits (default: every page)")
    ap.add_argument("--timeout", type=float, default=180, help="seconds to wait for one input or page (default 180)")
    ap.add_argument("--app-dir", default=str(ROOT),
                    help="the app's project root (default: this checkout; e.g. a `git archive` of a commit)")
    args = ap.parse_args()
    if args.n < 1 or args.warmup < 0:
        ap.error("--n must be >= 1 and --warmup >= 0")
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    known = {"interactions", "reloads", "first", "held"}
    if not parts or parts - known:
        ap.error(f"unknown --parts {sorted(parts - known)}")
    app_dir = Path(args.app_dir).resolve()
    all_pages = load_pages(app_dir)
    wanted = None if args.pages in ("", "all") else [p.strip().strip("/") for p in args.pages.split(",") if p.strip()]
    pages = [s for s in all_pages if wanted is None or s.url_path in wanted]
    unknown = set(wanted or []) - {s.url_path for s in all_pages}
    if unknown or not pages:
        ap.error(f"unknown pages {sorted(unknown)}; known: {[s.url_path for s in all_pages]}")
    exe = chromium_path()
    if exe is None:
        print("no chromium found (apt-get install -y chromium)", file=sys.stderr)
        return 2
    timeout_ms = args.timeout * 1000

    def log(msg):
        print(msg, flush=True)

    import streamlit
    from playwright.sync_api import sync_playwright
    load0 = os.getloadavg()
    t_start = time.time()
    log(f"bench_interactions: n={args.n}, warm-up {args.warmup}, parts {sorted(parts)}, {os.cpu_count()} CPUs, "
        f"load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, streamlit {streamlit.__version__}, app {app_dir}")
    inputs, reloads, first, first_healthy = [], {}, {}, None
    interactions_error, reload_errors, first_errors = None, {}, {}
    servers = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_FLAGS)
            try:
                if "first" in parts:                  # first: nothing else has warmed anything yet
                    log("first visit of each page after a fresh server start:")
                    first, first_errors, first_healthy = run_first_visits(browser, app_dir, pages, timeout_ms, log,
                                                                        args.think)
                if parts & {"interactions", "reloads", "held"}:
                    app = Server(app_dir / "serve.py", app_dir, "app")
                    servers.append(app)
                    floor = Server(FLOOR_APP, app_dir, "floor")
                    servers.append(floor)
                    floor.wait_healthy()
                    app.wait_healthy()
                    if "interactions" in parts:
                        log("interactions, ms per input in the order: " + ", ".join(i.name for i in make_inputs()))
                        inputs, interactions_error = run_interactions(browser, floor.base, app.base, args.n,
                                                                      args.warmup, timeout_ms, log)
                    if "held" in parts:
                        log("held keys, ms from the last key, in the order: " + ", ".join(i.name for i in make_held()))
                        held, held_error = run_held(browser, app.base, args.n, args.warmup, timeout_ms, log)
                        inputs = inputs + held
                        interactions_error = interactions_error or held_error
                    if "reloads" in parts:
                        log("warm reloads:")
                        reloads, reload_errors = run_reloads(browser, app.base, pages, args.n, args.warmup,
                                                             timeout_ms, log, floor.base)
            finally:
                browser.close()
    except BenchError as e:
        print(f"\nbench_interactions could not finish: {e}", file=sys.stderr)
        for s in servers:
            if s.proc.poll() is not None:
                print(f"the {s.name} server's log:\n{s.tail()}", file=sys.stderr)
        return 2
    finally:
        for s in servers:
            s.stop()

    rows = build_rows(inputs, interactions_error, reloads, reload_errors, first, first_errors)
    load1 = os.getloadavg()
    print_table(rows)
    failed = [r for r in rows if not r["pass"]]
    errors = [r for r in rows if r.get("error")]
    if interactions_error:
        flat = re.sub(r"\s+", " ", interactions_error)
        print(f"\nthe interactions stopped early: {flat[:1000]}")
    print(f"\n{len(rows) - len(failed)} of {len(rows)} rows meet their goals"
          f"{f', {len(errors)} could not be measured' if errors else ''}; wall {time.time() - t_start:.0f} s; "
          f"load average at the end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} on {os.cpu_count()} CPUs")
    if args.json:
        meta = {"n": args.n, "warmup": args.warmup, "parts": sorted(parts), "cpus": os.cpu_count(),
                "loadavg_start": load0, "loadavg_end": load1, "streamlit": streamlit.__version__,
                "python": platform.python_version(), "app_dir": str(app_dir), "started": t_start,
                "wall_s": round(time.time() - t_start, 1), "first_visit_server_healthy_s": first_healthy,
                "goals": {"slider_key_x_floor": GOAL_KEY, "click_x_floor": GOAL_CLICK, "p95_x_median": GOAL_TAIL,
                          "warm_reload_s": GOAL_RELOAD_S, "first_visit_s": GOAL_FIRST_S},
                "latency": "ms from the input event (or the reload call) until the change is drawn and the app "
                           "idle; last DOM change before 0.4 s of quiet"}
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        print(f"results: {args.json}")
    return 2 if errors else 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
