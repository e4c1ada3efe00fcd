"""Routing explorer in headless Chromium: clicking a token chip and a grid cell updates the page."""
import re

import pytest

from tests.conftest import settle

pytestmark = pytest.mark.browser




def grid(page):
    """The grid's plot (its title names the layer) and its trace of 896 expert squares."""
    plot = page.locator(".js-plotly-plot").filter(has_text=re.compile(r"Layer \d+: the experts of"))
    cells = plot.locator("g.trace.scatter").nth(1).locator("path.point")
    return plot, cells


def test_token_chip_and_grid_click_update_the_page(server, page, shot_dir):
    page.goto(server)                      # the app's entry first, so st.navigation owns the URL paths
    settle(page)
    page.goto(server + "routing?layer=46&token=0")
    page.wait_for_selector("text=Layer 46: the experts of", timeout=180_000)
    settle(page)
    plot, cells = grid(page)
    assert cells.count() == 896
    first_title = plot.locator(".gtitle").text_content()

    # a token chip: the fifth piece of the Prose preset
    chips = page.locator(".st-key-routing_token button").filter(has_text=re.compile(r"\S"))  # not the help icon
    assert chips.count() > 5
    chips.nth(5).click()
    page.wait_for_function("() => new URL(location.href).searchParams.get('token') === '5'", timeout=120_000)
    settle(page)
    plot, cells = grid(page)
    assert plot.locator(".gtitle").text_content() != first_title
    assert page.locator('[data-testid="stException"]').count() == 0

    # a grid cell: expert 100 (row 3, column 16), which the panel does not show yet
    heading = page.get_by_role("heading", name=re.compile(r"^Expert \d+ at layer 46"))
    assert "Expert 100 " not in heading.text_content()
    plot.scroll_into_view_if_needed()
    box = cells.nth(100).bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_selector(".hoverlayer .hovertext", timeout=10_000)
    assert "expert 100" in plot.locator(".hoverlayer").text_content()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.get_by_role("heading", name=re.compile(r"^Expert 100 at layer 46")).wait_for(timeout=120_000)
    settle(page)
    assert "expert=100" in page.url
    assert page.locator('[data-testid="stException"]').count() == 0
    page.screenshot(path=str(shot_dir / "routing-clicked.png"))
    assert not page.js_errors, page.js_errors
