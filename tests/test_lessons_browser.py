"""A lesson followed in headless Chromium: started from the Lessons page, Next opens the next step's page and
writes it into the address bar, and a reload finds the same step."""
from urllib.parse import parse_qs, urlparse

import pytest

from tests.conftest import settle

pytestmark = pytest.mark.browser


def query(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def panel(page):
    return page.locator('[data-testid="stSidebar"] .st-key-k3-lesson')


def test_start_a_lesson_press_next_and_reload(server, page):
    page.goto(server + "lessons")
    settle(page)
    page.locator(".st-key-lesson-checking-claims").get_by_text("Start this lesson").click()
    settle(page)
    assert urlparse(page.url).path.endswith("/claims")
    assert query(page)["lesson"] == "checking-claims" and query(page)["lesson_step"] == "1"
    assert "Step 1 of 8" in panel(page).inner_text()

    panel(page).get_by_role("button", name="Next").click()
    settle(page)
    assert urlparse(page.url).path.rstrip("/") == urlparse(server).path.rstrip("/")     # the Overview
    assert query(page)["lesson_step"] == "2" and "claim" not in query(page)
    assert page.locator("h1").first.inner_text() == "Kimi K3 at a glance"
    assert "Step 2 of 8" in panel(page).inner_text() and "Claim 1's link leads here" in panel(page).inner_text()

    page.reload()
    settle(page)
    assert query(page)["lesson_step"] == "2" and "Step 2 of 8" in panel(page).inner_text()
    assert page.locator('[data-testid="stException"]').count() == 0
    assert not page.js_errors, page.js_errors


def test_write_a_lesson_in_the_app_and_preview_it(server, page):
    page.goto(server + "glossary?term=mxfp4")
    settle(page)
    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.get_by_role("button", name="Add this view to a lesson").click()
    settle(page)
    assert "Step 1 added: Glossary with term=mxfp4" in sidebar.inner_text()
    sidebar.get_by_text("Edit your lesson draft (1 step)").click()
    settle(page)
    assert urlparse(page.url).path.endswith("/lessons")
    for key, text in (("title", "Four-bit numbers"), ("summary", "What MXFP4 stores."),
                      ("0_note", "Read the **MXFP4** entry: a block of 32 shares one scale.")):
        page.locator(f".st-key-k3_author_{key} textarea, .st-key-k3_author_{key} input").fill(text)
        page.keyboard.press("Control+Enter" if key != "title" else "Enter")
        settle(page)
    page.get_by_role("button", name="Preview as a student").click()
    settle(page)
    assert urlparse(page.url).path.endswith("/glossary")
    assert query(page) == {"term": "mxfp4", "lesson": "four-bit-numbers", "lesson_step": "1"}
    text = panel(page).inner_text()
    assert "Four-bit numbers" in text and "Step 1 of 1" in text
    assert "Read the MXFP4 entry: a block of 32 shares one scale." in text      # the note, drawn as Markdown
    assert page.locator('[data-testid="stException"]').count() == 0
    assert not page.js_errors, page.js_errors


def test_back_and_forward_after_next_find_each_step_as_it_was(server, page):
    """Next switches the page from the server: the new page's link values arrive while the address still shows the
    old page, and the old page's history entry must keep its own step (app/sidebar.py BROWSER_GUARDS_HTML)."""
    page.goto(server + "lessons")
    settle(page)
    page.locator(".st-key-lesson-checking-claims").get_by_text("Start this lesson").click()
    settle(page)
    for _ in range(2):
        panel(page).get_by_role("button", name="Next").click()
        settle(page)
    assert urlparse(page.url).path.endswith("/claims") and query(page)["lesson_step"] == "3"
    page.go_back()
    settle(page)
    assert query(page)["lesson_step"] == "2" and "Step 2 of 8" in panel(page).inner_text()
    assert "verdict" not in query(page)                               # no value of the claims page came along
    page.go_back()
    settle(page)
    assert urlparse(page.url).path.endswith("/claims") and query(page)["lesson_step"] == "1"
    assert "Step 1 of 8" in panel(page).inner_text()
    page.go_forward()
    settle(page)
    assert query(page)["lesson_step"] == "2" and "Step 2 of 8" in panel(page).inner_text()
    assert not page.js_errors, page.js_errors
