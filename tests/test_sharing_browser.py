"""Teaching and sharing, end to end in headless Chromium: a deep link opened first on a fresh server,
the link box, keyboard control written into the link, presenter mode."""
from urllib.parse import parse_qs, urlparse

import pytest

from tests.conftest import launch_server, settle

pytestmark = pytest.mark.browser


def test_a_deep_link_on_a_fresh_server_gets_the_app_navigation(browser):
    # Regression: with the page files in pages/, Streamlit served a link opened before the app's first
    # run from its own pages/ discovery (flat sidebar, narrow layout, sometimes "Page not found").
    with launch_server() as base:
        ctx = browser.new_context(viewport={"width": 1400, "height": 1600})
        pg = ctx.new_page()
        pg.goto(base + "balance?steps=3&m=1024")
        settle(pg)
        assert pg.locator("h1").first.inner_text() == "Load balancing lab"
        assert pg.locator('[data-testid="stNavSectionHeader"]').count() >= 5      # our sections
        assert pg.locator('[data-testid="stException"]').count() == 0
        assert "not found" not in pg.inner_text("body").lower()
        ctx.close()


def test_link_box_and_keyboard_control_write_the_view_into_the_link(server, page):
    page.goto(server + "routing?preset=own&text=zebra%20crossing%20at%20noon&layer=12")
    settle(page)
    link = page.locator("#k3-share-link").input_value()
    params = parse_qs(urlparse(link.strip()).query)
    assert params["preset"] == ["own"] and params["text"] == ["zebra crossing at noon"]
    assert params["layer"] == ["12"] and "/routing" in link
    slider = page.locator('[data-testid="stSlider"]').first.get_by_role("slider")      # the layer slider
    slider.focus()
    page.keyboard.press("ArrowRight")
    settle(page)
    assert parse_qs(urlparse(page.url).query)["layer"] == ["13"]
    page.wait_for_timeout(600)                      # the box follows the address bar (every 0.4 s)
    link = page.locator("#k3-share-link").input_value()
    assert parse_qs(urlparse(link.strip()).query)["layer"] == ["13"]
    assert page.locator('[data-testid="stException"]').count() == 0


def test_presenter_mode_hides_controls_and_enlarges_type(server, page, shot_dir):
    page.goto(server + "situ-glu")
    settle(page)
    normal = page.evaluate("parseFloat(getComputedStyle(document.querySelector('h1')).fontSize)")
    assert page.locator('[data-testid="stMain"] [data-testid="stSlider"]').first.is_visible()
    page.goto(server + "situ-glu?present=1")
    settle(page)
    big = page.evaluate("parseFloat(getComputedStyle(document.querySelector('h1')).fontSize)")
    assert big > 1.2 * normal
    assert not page.locator('[data-testid="stMain"] [data-testid="stSlider"]').first.is_visible()
    assert page.locator(".js-plotly-plot, .vega-embed").count() >= 1
    page.screenshot(path=str(shot_dir / "presenter-situ.png"))


def test_presenter_mode_enlarges_the_tables_too(server, page):
    size = "parseFloat(getComputedStyle(document.querySelector('[data-testid=\"stMain\"] td')).fontSize)"
    page.goto(server + "claims")
    settle(page)
    normal = page.evaluate(size)
    page.goto(server + "claims?present=1")
    settle(page)
    assert page.evaluate(size) > 1.2 * normal          # a Markdown table (ui.table) reads from the back of a room
