"""Routing explorer in headless Chromium: clicking a token chip and a grid cell updates the page."""
import re

import pytest

from tests.conftest import settle

pytestmark = pytest.mark.browser




def grid(page):
    """The grid's title (it names the layer and the token), the list of the token's experts under it,
    and its canvas (a Vega-Lite chart)."""
    return (page.locator(".st-key-routing_grid_title"), page.locator(".st-key-routing_grid_chosen"),
            page.locator(".st-key-routing_grid canvas").first)


def test_token_chip_and_grid_click_update_the_page(server, page, shot_dir):
    from app.charts.routing import cell_centre
    page.goto(server)                      # the app's entry first, so st.navigation owns the URL paths
    settle(page)
    page.goto(server + "routing?layer=46&token=0")
    page.wait_for_selector("text=Layer 46: the experts of", timeout=180_000)
    settle(page)
    title, chart, canvas = grid(page)
    first_title, first_label = title.inner_text(), chart.inner_text()
    assert re.search(r"This token's 16 experts here: (\d+, ){15}\d+\.", first_label), first_label

    # a token chip: the fifth piece of the Prose preset
    chips = page.locator(".st-key-routing_token button").filter(has_text=re.compile(r"\S"))  # not the help icon
    assert chips.count() > 5
    chips.nth(5).click()
    page.wait_for_function("() => new URL(location.href).searchParams.get('token') === '5'", timeout=120_000)
    settle(page)
    title, chart, canvas = grid(page)
    assert title.inner_text() != first_title and chart.inner_text() != first_label
    assert page.locator('[data-testid="stException"]').count() == 0

    # a grid cell: expert 100 (row 3, column 16), which the panel does not show yet
    heading = page.get_by_role("heading", name=re.compile(r"^Expert \d+ at layer 46"))
    assert "Expert 100 " not in heading.text_content()
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    x, y = cell_centre(100)
    page.mouse.move(box["x"] + x, box["y"] + y)
    tip = page.locator("#vg-tooltip-element")
    tip.wait_for(state="visible", timeout=20_000)
    assert re.search(r"expert\s*100\b", tip.inner_text())
    page.mouse.click(box["x"] + x, box["y"] + y)
    page.get_by_role("heading", name=re.compile(r"^Expert 100 at layer 46")).wait_for(timeout=120_000)
    settle(page)
    assert "expert=100" in page.url
    assert page.locator('[data-testid="stException"]').count() == 0
    page.screenshot(path=str(shot_dir / "routing-clicked.png"))
    assert not page.js_errors, page.js_errors
