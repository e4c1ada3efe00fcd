"""End to end in headless Chromium: every page renders with no exception; bad URLs stay friendly."""

import pytest

from app.navigation import PAGES
from tests.conftest import settle

pytestmark = pytest.mark.browser




@pytest.mark.parametrize("spec", PAGES, ids=[s.url_path for s in PAGES])
def test_page_renders_without_exception(server, page, spec, shot_dir):
    page.goto(server + spec.url_path)
    settle(page)
    page.wait_for_selector("h1", timeout=30_000)
    assert page.locator('[data-testid="stException"]').count() == 0
    assert page.locator(".js-plotly-plot, .vega-embed").count() >= 1 or "chart" not in spec.title.lower()
    page.screenshot(path=str(shot_dir / f"{spec.url_path}.png"))
    assert not page.js_errors, page.js_errors


def test_sidebar_lists_pages(server, page):
    page.goto(server)
    settle(page)
    if len(PAGES) > 1:   # Streamlit hides the navigation while there is a single page
        nav = page.locator('[data-testid="stSidebarNav"]')
        for spec in PAGES:
            assert nav.get_by_text(spec.title).count() >= 1
    assert page.get_by_role("heading", name="Kimi K3 at a glance").count() == 1


def test_unknown_page_and_junk_params_are_friendly(server, page, shot_dir):
    page.goto(server + "no-such-page?layer=%3Cimg%20src%3Dx%3E&%E2%80%AEzz=1")
    settle(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    body = page.inner_text("body")
    assert "Page not found" in body or "does not seem to exist" in body
    assert "ignored link parameters" in body
    assert page.locator("img[src='x']").count() == 0     # markup in the URL is shown as text
    page.screenshot(path=str(shot_dir / "not-found.png"))


def test_overview_hover_explains_a_layer(server, page):
    page.goto(server)
    settle(page)
    # the layer stack is Vega-Lite drawn as SVG: one square per layer and row, each described for screen readers
    squares = page.locator(".vega-embed svg g.mark-symbol path[aria-label*='row: ']")    # not the legend's
    assert squares.count() == 2 * 93
    attention = squares.locator("xpath=self::*[contains(@aria-label, 'row: attention')]")
    assert attention.count() == 93
    assert squares.locator("xpath=self::*[contains(@aria-label, 'kind: gated MLA')]").count() == 24
    mla = squares.locator("xpath=self::*[contains(@aria-label, 'position 4 of 93') and contains(@aria-label, 'row: attention')]")
    mla.first.scroll_into_view_if_needed()
    mla.first.hover(force=True)
    tip = page.locator("#vg-tooltip-element")
    tip.wait_for(state="visible", timeout=10_000)
    text = tip.inner_text()
    assert "layer 3" in text and "gated MLA" in text
