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
    assert page.locator(".js-plotly-plot").count() >= 1 or "chart" not in spec.title.lower()
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
    plot = page.locator(".js-plotly-plot").first
    plot.scroll_into_view_if_needed()
    # hover the first MLA square (layer 3): plotly renders points as path.point
    points = plot.locator("g.trace.scatter").first.locator("path.point")
    assert points.count() == 69
    mla = plot.locator("g.trace.scatter").nth(1).locator("path.point").first
    mla.hover(force=True)
    page.wait_for_selector(".hoverlayer .hovertext", timeout=10_000)
    text = plot.locator(".hoverlayer").text_content()
    assert "layer 3" in text and "gated MLA" in text
