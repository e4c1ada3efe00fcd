"""A seeded random walk over the app in headless Chromium, as a curious student would click: other pages,
own text of every kind, slider keys, buttons, pills, toggles and lists, Back, reloads, presenter mode, and
the link opened in a fresh browser. After every step the page must be alive: no exception box, no
traceback text, no JavaScript error, connected and idle within the step's time.

    python bench/random_walk.py                      # 300 steps, seed 0, on a server it starts
    python bench/random_walk.py --steps 1000 --seed 7 --shots /tmp/walk   # a screenshot of every problem
    python bench/random_walk.py --url http://127.0.0.1:8501/

tests/test_random_walk_browser.py runs a short walk of the same code in the suite. Exit status 0: no problem.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from app.navigation import PAGES  # noqa: E402
from bench.harness import IDLE  # noqa: E402

TEXTS = (
    "The router sends every token to 16 of 896 experts.",
    "Grüße aus Kyoto: 日本語のテキスト 🐱 and Ελληνικά",
    "<script>alert(1)</script> **bold** $x^2$ [link](javascript:alert(1)) {{ }}",
    "def f(x):\n    return x * 2  # code",
    "a" * 3000,
    "   ",
    "\u200b\u202eRTL override and zero-width",
    "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
)
# controls a walk leaves alone: the expert-parallel run starts processes for ~10 s (its own browser test covers
# it), downloads open files, the animation runs on its own
SKIP_BUTTONS = ("Run layer", "Download", "Play", "Stop")
MAIN = '[data-testid="stMain"]'


@dataclass
class Walk:
    steps: list[tuple[str, str]] = field(default_factory=list)        # (action, url after it)
    problems: list[str] = field(default_factory=list)
    js_errors: list[str] = field(default_factory=list)


def settle(page, timeout_ms: int = 60_000) -> None:
    time.sleep(0.3)
    page.wait_for_selector(IDLE, timeout=timeout_ms)
    time.sleep(0.3)
    page.wait_for_selector(IDLE, timeout=timeout_ms)


def check(page, where: str) -> list[str]:
    found = []
    boxes = page.locator('[data-testid="stException"]')
    if boxes.count():
        found.append(f"{where}: exception box: {boxes.first.inner_text()[:300]}")
    body = page.locator("body").inner_text()
    if "Traceback (most recent call last)" in body:
        found.append(f"{where}: traceback text on the page")
    if page.locator("h1").count() == 0 and page.locator('[data-testid="stAlert"]').count() == 0:
        found.append(f"{where}: no heading and no message")
    found.extend(disagreements(page, where))
    return found


def disagreements(page, where: str) -> list[str]:
    """On the Routing explorer: the layer slider, the link and the grid's title name the same layer (the
    reliability test once found the thumb on 43 while the link and the grid said 44)."""
    from urllib.parse import parse_qs, urlsplit
    u = urlsplit(page.url)
    if not u.path.rstrip("/").endswith("/routing"):
        return []
    slider = page.locator('[data-testid="stSlider"]').filter(has_text="Layer").first.get_by_role("slider")
    title = page.locator(".st-key-routing_grid_title")
    if not slider.count() or not title.count():
        return []
    shown = slider.input_value()
    linked = parse_qs(u.query).get("layer", ["46"])[0]         # absent: the default, views/routing.py DEFAULT_LAYER
    heading = title.first.inner_text()
    if shown != linked or not heading.startswith(f"Layer {shown}:"):
        return [f"{where}: the layer slider shows {shown}, the link {linked}, the grid {heading[:20]!r}"]
    return []


def _visible(loc) -> list:
    return [loc.nth(i) for i in range(min(loc.count(), 60)) if loc.nth(i).is_visible()]


def step(page, rng: random.Random, base: str, browser, fresh_problems: list) -> str:
    """One random action; returns its description (what a fresh browser found goes into fresh_problems)."""
    actions = ["nav", "type", "slider", "click", "click", "click", "back", "reload", "fresh", "presenter"]
    action = rng.choice(actions)
    if action == "nav":
        spec = rng.choice(PAGES)
        links = page.locator(f'[data-testid="stSidebarNav"] a[href$="/{spec.url_path}"]')
        closed = page.locator('[data-testid="stExpandSidebarButton"]')      # a closed sidebar's links stay "visible"
        if links.count() and links.first.is_visible() and not (closed.count() and closed.first.is_visible()):
            links.first.click(timeout=10_000)
        else:                                   # the sidebar is closed (presenter mode): the address bar
            page.goto(base + ("" if spec is PAGES[0] else spec.url_path))
        return f"open {spec.url_path}"
    if action == "type":
        boxes = _visible(page.locator(f"{MAIN} textarea"))
        if not boxes:
            return step(page, rng, base, browser, fresh_problems)
        text = rng.choice(TEXTS)
        box = rng.choice(boxes)
        box.fill(text)
        box.press("Control+Enter")
        return f"type {text[:30]!r}"
    if action == "slider":
        thumbs = _visible(page.locator(f'{MAIN} [role="slider"]'))
        if not thumbs:
            return step(page, rng, base, browser, fresh_problems)
        thumb = rng.choice(thumbs)
        key, n = rng.choice(["ArrowRight", "ArrowLeft", "End", "Home"]), rng.randint(1, 6)
        thumb.focus()
        for _ in range(n if key.startswith("Arrow") else 1):
            page.keyboard.press(key)
            time.sleep(rng.uniform(0.02, 0.25))
        return f"slider {thumb.get_attribute('aria-label') or ''} {key} x{n}"
    if action == "click":
        sel = ", ".join(f'{MAIN} {c}:not([data-testid="stElementToolbar"] *)'       # a chart's toolbar shows on hover
                        for c in ("button", '[role="radio"]', 'label[data-baseweb="checkbox"]'))
        cands = [b for b in _visible(page.locator(sel))
                 if b.is_enabled() and not any(s in (b.inner_text() or "") for s in SKIP_BUTTONS)]
        if not cands:
            return step(page, rng, base, browser, fresh_problems)
        b = rng.choice(cands)
        label = (b.inner_text() or b.get_attribute("aria-label") or "?").strip()[:30]
        try:
            b.click(timeout=10_000)
        except Exception as e:                          # noqa: BLE001 - name what could not be clicked
            if not (b.count() and b.is_visible() and b.is_enabled()):
                # gone or hidden since it was picked (a rerun replaced it, presenter mode hid the controls): a
                # person could not have clicked it either
                return f"click {label!r} skipped: hidden meanwhile"
            raise RuntimeError(f"click {label!r} ({page.url[len(base):]}): {str(e).splitlines()[0]}") from e
        return f"click {label!r}"
    if action == "back":
        page.go_back()
        if not page.url.startswith(base):       # before the walk's first page: the browser's blank page
            page.go_forward()
            return "back (out of the app) and forward"
        return "back"
    if action == "reload":
        page.reload()
        return "reload"
    if action == "fresh":
        url = page.url
        ctx = browser.new_context(viewport={"width": 1200, "height": 1600})
        try:
            other = ctx.new_page()
            other.goto(url)
            settle(other)
            fresh_problems.extend(check(other, f"the link {url} in a fresh browser"))
        finally:
            ctx.close()
        return f"fresh {url[len(base):][:60]}"
    opener = page.locator('[data-testid="stExpandSidebarButton"]')
    if opener.count() and opener.first.is_visible():     # presenter mode closes the sidebar: open it as a person would
        opener.first.click()
        time.sleep(1.0)                                  # the sidebar slides in
    box = page.locator('[data-testid="stSidebar"] label:has-text("Presenter mode")')
    if box.count() and box.first.is_visible():
        box.first.click(timeout=10_000)
        return "presenter"
    return step(page, rng, base, browser, fresh_problems)


def walk(base: str, browser, steps: int, seed: int = 0, shots: Path | None = None) -> Walk:
    rng = random.Random(seed)
    w = Walk()
    ctx = browser.new_context(viewport={"width": 1400, "height": 1800})
    page = ctx.new_page()
    page.on("pageerror", lambda e: w.js_errors.append(str(e)[:300]))
    try:
        page.goto(base + "routing")
        settle(page)
        for i in range(steps):
            what, fresh = "?", []
            try:
                what = step(page, rng, base, browser, fresh)
                settle(page)
                found = fresh + check(page, f"step {i} {what}")
            except Exception as e:                    # noqa: BLE001 - a stuck or broken page is the finding
                found = [f"step {i} {what}: {type(e).__name__}: {str(e)[:300]}"]
            w.steps.append((what, page.url[len(base):]))
            if found:
                w.problems.extend(found)
                if shots is not None:
                    shots.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(shots / f"problem-{i:04d}.png"))
                page.goto(base + "routing")            # go on from a known place
                settle(page)
    finally:
        ctx.close()
    return w


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--url", default="", help="a server that is already running (default: start one)")
    ap.add_argument("--shots", type=Path, default=None, help="write a screenshot of every problem here")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from bench.capacity import Replica
    from bench.harness import CHROMIUM_FLAGS, chromium_path
    server = None
    if not args.url:
        server = Replica(None)
        server.wait()
    base = args.url or server.url
    t0 = time.perf_counter()
    try:
        with sync_playwright() as p:
            br = p.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_FLAGS)
            try:
                w = walk(base, br, args.steps, args.seed, args.shots)
            finally:
                br.close()
    finally:
        if server:
            server.stop()
    kinds: dict[str, int] = {}
    for what, _ in w.steps:
        kinds[what.split()[0]] = kinds.get(what.split()[0], 0) + 1
    print(f"{len(w.steps)} steps in {time.perf_counter() - t0:.0f} s (seed {args.seed}): "
          + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    print(f"{len(w.problems)} problems, {len(w.js_errors)} JavaScript errors")
    for p in w.problems + w.js_errors:
        print("  " + p)
    return 1 if w.problems or w.js_errors else 0


if __name__ == "__main__":
    sys.exit(main())
