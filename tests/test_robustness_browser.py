"""In the browser (headless Chromium): half a character pasted into the prompt box leaves the session alive,
and no page makes the browser ask another origin for anything (the page icon came from a public font host)."""
from urllib.parse import parse_qs, urlparse

import pytest

from app.navigation import PAGES
from tests.conftest import settle

pytestmark = pytest.mark.browser


def query(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def test_a_lone_surrogate_in_the_prompt_box_leaves_the_session_alive(server, page):
    """The browser cannot UTF-8 encode half a character; Streamlit's server refused the whole message with it
    and closed the connection, and every later input did nothing until a reload."""
    page.goto(server + "routing?preset=own&text=hello%20world&layer=20")
    settle(page)
    box = page.locator('[data-testid="stTextArea"] textarea').first
    box.click()
    page.keyboard.press("Control+A")
    # what pasting half an emoji types: the high surrogate of 🐱 without its low one
    page.evaluate("document.execCommand('insertText', false, 'cats \\uD83D here')")
    box.press("Control+Enter")
    settle(page)
    assert box.input_value() == "cats \ufffd here"
    assert query(page).get("text") == "cats \ufffd here"
    slider = page.locator('[data-testid="stSlider"]').filter(has_text="Layer").first.get_by_role("slider")
    slider.focus()
    page.keyboard.press("ArrowRight")                     # a later input still reaches the server
    settle(page)
    assert query(page).get("layer") == "21" and slider.input_value() == "21"
    assert page.locator('[data-testid="stException"]').count() == 0
    assert page.locator('[data-testid="stApp"][data-test-connection-state="CONNECTED"]').count() == 1


@pytest.mark.parametrize("spec", [PAGES[0], PAGES[2], PAGES[-2]], ids=lambda s: s.url_path)
def test_no_request_leaves_the_apps_origin(server, page, spec):
    origin = urlparse(server).netloc
    asked = []
    page.on("request", lambda r: asked.append(r.url))
    page.goto(server + spec.url_path)
    settle(page)
    page.wait_for_timeout(500)                            # the favicon is asked for after the page settles
    elsewhere = [u for u in asked if urlparse(u).scheme in ("http", "https") and urlparse(u).netloc != origin]
    assert not elsewhere, elsewhere
    assert any(urlparse(u).netloc == origin for u in asked)
