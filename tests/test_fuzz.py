"""Fuzz the link parameters and the prompt box of every registered page: no traceback, ever.

(a) AppTest, no browser: every page in app.navigation.PAGES is opened with random query parameters,
    both the names the page understands (recorded from the controls it declares with app.state.page, so new
    parameters are picked up automatically) and unknown names; pages with a prompt box then get
    random text typed into it. Values: random Unicode with control characters, RTL and zero-width
    marks, emoji, 10,000-character strings, markup, "%00", huge and negative numbers, NaN, 1e309...
(b) One browser test: a few pages opened with fuzzed, raw query strings against the live server;
    no exception on the page, and the server still answers its health check afterwards.

Every case comes from random.Random(f"{SEED}-{page}"), so a failure reproduces: the assertion
message prints the page and the exact parameters. Set K3_FUZZ_SEED to explore other cases.
"""
from __future__ import annotations

import os
import random
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.navigation import PAGES

ROOT = Path(__file__).resolve().parent.parent
SEED = int(os.environ.get("K3_FUZZ_SEED", "20260"))

# Names many pages use: tried on every page, so a page that does not know them must say so politely.
COMMON_NAMES = ("preset", "text", "layer", "token", "k", "expert", "n", "view", "source", "present", "embed")

NASTY = (
    "", " ", "\x00", "%00", "%", "%ZZ", "%C3%28", "\r\n\t", "\x7f\x85\x9f\x1b[31m",
    "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "</div><h1>x</h1>",
    "**bold** _it_ `code` [a](javascript:alert(1))", "$$\\frac{1}{0}$$", ":material/warning: :red[x]",
    "\u202eevil\u202c", "\u200f\u200e\u200b\ufeff\u2066\u2069", "👩‍👩‍👧‍👦🏳️‍🌈🇺🇦" * 3, "Ω≈ç√∫˜µ≤≥÷",
    "NaN", "nan", "inf", "-inf", "Infinity", "1e309", "-1e309", "1e-400", "99999999999999999999999999999",
    "-99999999999999999999", "2147483648", "9223372036854775808", "-1", "-0", "0", "1.5", "0x10",
    "1_000", "٣", "１２", "²", "true", "None", "null", "[]", "{}", ",,,", "1,2,3", "1,-5,99999,x,,",
    "../../etc/passwd", "' OR 1=1 --", "{{7*7}}", "a" * 10_000,
)

# Code point ranges for random strings: controls, Latin, combining marks, Hebrew/Arabic (RTL), bidi
# and zero-width controls, CJK, private use, specials, emoji, an astral plane block. No surrogates.
RANGES = ((0x00, 0x1F), (0x20, 0x7E), (0x7F, 0x9F), (0xA0, 0x2FF), (0x300, 0x36F), (0x590, 0x6FF),
          (0x200B, 0x200F), (0x202A, 0x202E), (0x2066, 0x2069), (0x4E00, 0x4FFF), (0xE000, 0xE0FF),
          (0xFFF0, 0xFFFF), (0x1F300, 0x1F64F), (0x10000, 0x1007F))


def random_unicode(rng: random.Random, n: int) -> str:
    out = []
    for _ in range(n):
        lo, hi = rng.choice(RANGES)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def fuzz_value(rng: random.Random) -> str | list[str]:
    r = rng.random()
    if r < 0.55:
        return rng.choice(NASTY)
    if r < 0.75:
        return random_unicode(rng, rng.choice((1, 5, 40, 300)))
    if r < 0.85:
        return random_unicode(rng, 10_000)
    if r < 0.93:
        return str(rng.choice((-1, 1)) * rng.randint(0, 10 ** rng.randint(1, 40)))
    return [rng.choice(NASTY), random_unicode(rng, 8)]          # a repeated key: ?x=a&x=b


def fuzz_text(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.4:
        return rng.choice(NASTY)
    if r < 0.6:
        return random_unicode(rng, 10_000)
    if r < 0.8:
        return "".join(chr(rng.randint(0, 31)) for _ in range(rng.randint(1, 50)))   # only controls
    return random_unicode(rng, rng.randint(1, 400))


def short(value, n: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= n else f"{text[:n]}… ({len(str(value)):,} chars)"


def describe(params: dict) -> str:
    return "{" + ", ".join(f"{k!r}: {short(v)}" for k, v in params.items()) + "}"


def open_page(spec, params: dict) -> AppTest:
    """A fresh session: the app's first run, then the page with the given link parameters."""
    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=240)
    at.run()                                   # AppTest needs one run before switch_page
    at.query_params.clear()
    at.query_params.update(params)
    return at.switch_page(spec.path).run()


def check(at: AppTest, spec, what: str) -> None:
    assert not at.exception, (
        f"{spec.url_path}: traceback with {what}:\n"
        + "\n".join(f"{e.message}\n{''.join(e.stack_trace[-6:])}" for e in at.exception))
    assert len(at.title) >= 1 and at.title[0].value, f"{spec.url_path}: no page title with {what}"


@pytest.fixture()
def known_params(monkeypatch):
    """Records the link parameters of the controls each page declares (app.state.page)."""
    from app import state
    seen: list[set[str]] = []
    original = state.page

    def recording(*controls, **kwargs):
        seen.append({c.param for c in controls if c.link})
        return original(*controls, **kwargs)

    monkeypatch.setattr(state, "page", recording)
    return seen


@pytest.mark.parametrize("spec", PAGES, ids=[s.url_path for s in PAGES])
def test_fuzzed_link_and_prompt(spec, known_params):
    rng = random.Random(f"{SEED}-{spec.url_path}")

    # case 1: names the page may or may not know, plus junk names; records the names it knows
    params = {name: fuzz_value(rng) for name in rng.sample(COMMON_NAMES, 5)}
    for _ in range(3):
        params[random_unicode(rng, rng.randint(1, 12)) or "x"] = fuzz_value(rng)
    params["<script>alert(1)</script>"] = "1"
    at = open_page(spec, params)
    check(at, spec, f"params {describe(params)}")
    known = set().union(*known_params) - {"embed", "embed_options"}

    # case 2: every name the page knows, each with a fuzzed value
    params = {name: fuzz_value(rng) for name in sorted(known)}
    at = open_page(spec, params)
    check(at, spec, f"params {describe(params)}")

    # the prompt box, when the page has one: two random texts typed in, one after the other
    for _ in range(2):
        boxes = [t for t in at.text_area if t.key and "text" in t.key]
        if not boxes:
            break
        text = fuzz_text(rng)
        at = boxes[0].set_value(text).run()
        check(at, spec, f"params {describe(params)} then text {short(text)} in {boxes[0].key!r}")


# ---- (b) the live server, raw query strings ------------------------------------------------------

def raw_queries(rng: random.Random) -> list[str]:
    """Query strings a browser can send, some not valid percent-encoding at all."""
    q = lambda s: urllib.parse.quote(s, safe="")
    return [
        "preset=own&text=" + q(random_unicode(rng, 300)) + "&layer=1e309&k=-99999999999999999999&token=NaN",
        "preset=own&text=" + q("<script>alert(1)</script>" + "\u202e" + "z" * 9_000) + "&layer=%00&expert=%FF%FE",
        "text=%C3%28%E2%80%AE%00%%&preset=%F0%9F%98&k=1,2&k=3&" + q(random_unicode(rng, 10)) + "=1",
        "&".join(f"{q(random_unicode(rng, 6))}={q(random_unicode(rng, 20))}" for _ in range(30)),
    ]


@pytest.mark.browser
def test_fuzzed_links_in_the_browser(server, page):
    from tests.conftest import settle
    rng = random.Random(f"{SEED}-browser")
    by_path = {s.url_path: s for s in PAGES}
    wanted = [p for p in ("routing", "attention", "claims", "balance") if p in by_path] or [PAGES[0].url_path]
    queries = raw_queries(rng)
    cases = [(wanted[i % len(wanted)], query) for i, query in enumerate(queries)]
    cases.append(("no-such-page", queries[2]))
    for path, query in cases:
        page.goto(f"{server}{path}?{query}")
        settle(page)
        assert page.locator('[data-testid="stException"]').count() == 0, f"traceback on /{path}?{query[:300]}"
        if path in by_path:
            assert page.locator("h1").count() >= 1, f"no heading on /{path}?{query[:300]}"
        assert urllib.request.urlopen(server + "_stcore/health", timeout=30).read() == b"ok"
    assert not page.js_errors, page.js_errors
