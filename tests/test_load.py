"""Several students at once: concurrent browser sessions on the Routing explorer, each with its own
prompt and settings, see no exception and only their own view, before and after an interaction.

A light version of bench/load_test.py (which runs 20 sessions over every page and reports times and
memory). The sessions are opened one after the other without waiting, so the server runs their
scripts at the same time; then each is checked. No timing assertions, only generous timeouts.

"Its own view" is checked three ways: the token chips spell the session's prompt (with its unique
marker word and no other session's), the page shows the session's layer and top-k, and the experts
outlined in the grid are exactly those the live model chooses for that prompt, token, layer and top-k
(computed again here, in this process, with the app's own code path).
"""
from __future__ import annotations

import re
import urllib.parse

import pytest

# "Settled" = a script run happened, the app is idle and connected, and the DOM has been quiet for a
# moment (the app's idle flag alone comes before the browser has drawn a warm page): see bench/harness.py.
from bench.harness import CHIPS, MARKER, ROUTING_DRAWN_JS, SETTLED_JS, STILL_JS, WATCH_RUNS

TIMEOUT = 300_000                     # ms: a cold server on a busy 2-core machine
SESSIONS = (          # prompt (with a unique marker word), layer, top-k, token (the marker's digits)
    ("The router zebra01 sends every token to a few experts.", 5, 4, 8),
    ("def zebra02(values):\n    return sum(values) / len(values)\n", 31, 9, 5),
    ("In 2026 zebra03 had 2,779 billion weights; 104 billion ran.", 62, 23, 8),
    ("Wait -- zebra04? Yes: (a), [b], {c}; \"quoted\" and 'single'!", 90, 40, 6),
)

GRID_JS = """(cols) => {
  const list = document.querySelector('.st-key-routing_grid_chosen');
  const head = document.querySelector('.st-key-routing_grid_title');
  if (!list || !head || !document.querySelector('.st-key-routing_grid canvas')) return null;
  const m = /experts here: ([0-9, ]+)/.exec(list.innerText || '');
  return {title: head.innerText.trim(),
          chosen: m ? m[1].split(',').map(s => parseInt(s, 10)).sort((a, b) => a - b) : null};
}"""


def url_of(base: str, text: str, layer: int, k: int, token: int) -> str:
    query = urllib.parse.urlencode({"preset": "own", "text": text, "layer": layer, "k": k, "token": token},
                                   quote_via=urllib.parse.quote)
    return f"{base}routing?{query}"


def wait_settled(page, timeout=TIMEOUT):
    """Settled, and still idle half a second later with no new run (a run may queue another)."""
    while True:
        page.wait_for_function(SETTLED_JS, timeout=timeout)
        page.evaluate("window.__k3ran = false")
        page.wait_for_timeout(500)
        if page.evaluate(STILL_JS):
            return


def own_view(page, cols: int) -> dict:
    chips = page.locator(CHIPS).all_inner_texts()
    spelled = "".join(chips).replace("␣", " ").replace("↵", "\n")
    return {"chips": spelled, "markers": set(MARKER.findall(spelled)), "body": page.inner_text("body"),
            "grid": page.evaluate(GRID_JS, cols), "url": urllib.parse.unquote(page.url)}


@pytest.fixture(scope="module")
def expected():
    """The experts each session's grid must outline, from the app's own functions in this process."""
    from app import routing as rt
    from app.live import forward, live, prepare_prompt
    from app.routing_cache import rerouted
    from app.text import chip_label
    lv = live()
    out = []
    for text, layer, k, token in SESSIONS:
        prompt = prepare_prompt(text, lv.tokenizer)
        labels = [chip_label(p) for p in prompt.pieces]
        assert labels.count(labels[token]) == 1, (   # see test_token_chip_stays_put_when_top_k_moves
            f"pick a token whose chip label is unique in {text!r}: {labels}")
        settings, _ = rt.normalise(rt.Rerouting(top_k=k), lv.model.cfg)
        run = rerouted(prompt.ids, layer, settings) or forward(prompt.ids)
        settings2, _ = rt.normalise(rt.Rerouting(top_k=k - 1), lv.model.cfg)
        run2 = rerouted(prompt.ids, layer, settings2) or forward(prompt.ids)
        out.append((sorted(rt.chosen_at(run, layer, token)), sorted(rt.chosen_at(run2, layer, token))))
    return out


@pytest.mark.browser
def test_concurrent_sessions_see_only_their_own_routing(browser, server, expected):
    from app.routing import GRID_COLS
    contexts, pages, errors = [], [], []
    try:
        for i, (text, layer, k, token) in enumerate(SESSIONS):      # start every session, wait for none
            ctx = browser.new_context(viewport={"width": 1400, "height": 2400})
            ctx.add_init_script(WATCH_RUNS)
            pg = ctx.new_page()
            pg.on("pageerror", lambda e, i=i: errors.append((i, str(e))))
            pg.goto(url_of(server, text, layer, k, token), timeout=TIMEOUT)
            contexts.append(ctx)
            pages.append(pg)

        def check(i, k_now, chosen_now, when):
            text, layer, _, _ = SESSIONS[i]
            pg = pages[i]
            assert pg.locator('[data-testid="stException"]').count() == 0, f"session {i}: traceback {when}"
            try:                               # drawn? (if not, the assertions below say what is missing)
                pg.wait_for_function(ROUTING_DRAWN_JS, arg=k_now, timeout=60_000)
            except Exception:                  # noqa: BLE001
                pass
            v = own_view(pg, GRID_COLS)
            own = f"zebra{i + 1:02d}"
            assert v["markers"] == {own}, f"session {i} {when}: chips spell {v['chips']!r}"
            assert own in v["url"] and not (set(MARKER.findall(v["url"])) - {own}), f"session {i}: link {v['url']}"
            assert f"{k_now} of 896" in v["body"], f"session {i} {when}: top-k {k_now} not shown"
            title = re.sub(r"<[^>]*>", "", v["grid"]["title"]) if v["grid"] else ""
            assert title.startswith(f"Layer {layer}:"), f"session {i} {when}: grid {v['grid']}"
            got = v["grid"]["chosen"]
            others = [j for j, e in enumerate(expected) if j != i and got in e]
            assert got == chosen_now, (f"session {i} {when}: grid outlines {got}, the model chooses {chosen_now}"
                                       + (f" (that is session {others}'s routing)" if others else ""))

        for i, pg in enumerate(pages):
            pg.wait_for_selector(".st-key-routing_grid canvas", timeout=TIMEOUT)
            wait_settled(pg)
            check(i, SESSIONS[i][2], expected[i][0], "after loading")

        # one interaction each, all at once: top-k one step down with the keyboard
        for pg in pages:
            pg.evaluate("window.__k3ran = false")
            slider = pg.get_by_role("slider", name="Experts per token (top-k)")
            slider.focus()
            slider.press("ArrowLeft")
        for i, pg in enumerate(pages):
            k_new = SESSIONS[i][2] - 1
            pg.wait_for_function(f"() => new URL(location.href).searchParams.get('k') === '{k_new}'",
                                 timeout=TIMEOUT)
            wait_settled(pg)
            check(i, k_new, expected[i][1], "after moving top-k")
        assert not errors, errors
    finally:
        for ctx in contexts:
            ctx.close()


def test_token_chip_stays_put_when_top_k_moves():
    """A prompt whose chip labels repeat ("a b c a b c"): the second token is selected through the
    link, then top-k moves; the selected token must not jump to another chip with the same label.
    (Found by the load test: st.pills keeps its value as the chip's label, so equal labels collide.)"""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest
    root = Path(__file__).resolve().parent.parent
    at = AppTest.from_file(str(root / "streamlit_app.py"), default_timeout=240)
    at.run()
    at.query_params.update({"preset": "own", "text": "a b c a b c", "token": "1", "layer": "46"})
    at.switch_page("views/routing.py").run()
    assert not at.exception
    assert at.session_state["routing_token"] == 1
    at.slider(key="routing_k").set_value(15).run()
    assert not at.exception
    assert at.session_state["routing_token"] == 1, (
        f"the token moved from 1 to {at.session_state['routing_token']} when only top-k changed")
