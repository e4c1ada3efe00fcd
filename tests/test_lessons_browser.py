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
