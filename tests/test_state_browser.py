"""The view survives what a student does (headless Chromium): a long sequence of inputs on the Routing
explorer, its link reopened in a fresh browser gives the same view; presenter mode draws every chart;
an embedded page shows no navigation; switching presenter mode off keeps the sidebar."""
from urllib.parse import parse_qs, urlparse

import pytest

from tests.conftest import settle

pytestmark = pytest.mark.browser


def slider(page, label):
    return page.locator('[data-testid="stSlider"]').filter(has_text=label).first.get_by_role("slider")


def toggle(page, label):
    return page.locator('[data-testid="stCheckbox"]').filter(has_text=label).first


def ids_box(page, label):
    return page.locator('[data-testid="stTextInput"]').filter(has_text=label).first.locator("input")


def view_of(page) -> dict:
    """What a person sees of the view: the controls' values and the grid's title."""
    return {
        "layer": slider(page, "Layer").input_value(),
        "k": slider(page, "Experts per token").input_value(),
        "text": page.locator('[data-testid="stTextArea"] textarea').first.input_value(),
        "dense": toggle(page, "Dense").locator("input").is_checked(),
        "bias": toggle(page, "Balancing bias").locator("input").is_checked(),
        "knocked": ids_box(page, "Knock out").input_value(),
        "forced": ids_box(page, "Force experts").input_value(),
        "grid": page.locator(".st-key-routing_grid_title").first.inner_text(),
        "chosen": page.locator(".st-key-routing_grid_chosen").first.inner_text(),
    }


def query(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def test_a_long_sequence_of_inputs_and_the_link_reopened(server, browser, page):
    page.goto(server + "routing?layer=20")
    settle(page)
    page.locator('[data-testid="stButtonGroup"] button').filter(has_text="Your own text").first.click()
    settle(page)
    box = page.locator('[data-testid="stTextArea"] textarea').first
    box.fill("Zebras cross the road at noon")
    box.press("Control+Enter")
    settle(page)
    assert slider(page, "Layer").input_value() == "20"      # kept (it reset to 0 before)
    slider(page, "Layer").focus()
    page.keyboard.press("ArrowRight")
    settle(page)
    slider(page, "Experts per token").focus()
    for _ in range(4):
        page.keyboard.press("ArrowLeft")
    settle(page)
    page.get_by_role("button", name="Next", exact=True).click()
    settle(page)
    page.locator('[data-testid="stButton"] button').filter(has_text="Knock out").first.click()
    settle(page)
    assert ids_box(page, "Knock out").input_value() != ""     # the panel's box shows the knocked-out expert
    ids_box(page, "Force experts").fill("7")
    ids_box(page, "Force experts").press("Enter")
    settle(page)
    toggle(page, "Balancing bias").click()
    settle(page)
    chips = (page.locator('[data-testid="stElementContainer"]').filter(has_text="Token: click one")
             .locator('[data-testid="stButtonGroup"] button'))
    n_chips = chips.count()
    chips.nth(2).click()
    settle(page)
    toggle(page, "Dense").click()
    settle(page)
    seen = view_of(page)
    assert seen["layer"] == "22" and seen["k"] == "12" and seen["dense"] and not seen["bias"]
    assert seen["text"] == "Zebras cross the road at noon"
    link = query(page)
    assert link["layer"] == "22" and link["k"] == "12" and link["dense"] == "on" and link["bias"] == "off"
    assert link["token"] != str(n_chips - 1) and link["ko"] and link["preset"] == "own"   # not the last token
    assert link["force"] == "7" and seen["forced"] == "7" and seen["knocked"] == link["ko"].replace(",", ", ")
    assert page.locator('[data-testid="stException"]').count() == 0

    fresh = browser.new_context(viewport={"width": 1400, "height": 2400})
    other = fresh.new_page()
    other.goto(page.url)
    settle(other)
    assert view_of(other) == seen
    assert query(other) == link
    assert other.locator('[data-testid="stException"]').count() == 0
    fresh.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_presenter_mode_draws_every_chart_with_its_traces(server, browser, scheme):
    ctx = browser.new_context(viewport={"width": 1400, "height": 9000}, color_scheme=scheme)
    page = ctx.new_page()
    for path in ("?present=1", "routing?present=1", "attnres?present=1"):
        page.goto(server + path)
        settle(page)
        plots = page.evaluate("""[...document.querySelectorAll('.js-plotly-plot')].map(p => ({
            traces: (p._fullData || []).filter(t => t.visible !== false).length,
            drawn: p.querySelectorAll('g.trace, .heatmaplayer image, g.barlayer path, g.scatterlayer path').length,
            axes: p.querySelectorAll('.xtick, .ytick').length,
            width: p.getBoundingClientRect().width}))""")
        for i, p in enumerate(plots):
            assert p["traces"] > 0 and p["drawn"] > 0 and p["width"] > 200, (path, i, p)
        # Vega-Lite charts draw on a canvas: it has a size and, somewhere, pixels that are not background
        canvases = page.evaluate("""[...document.querySelectorAll('.vega-embed canvas')].map(c => {
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let inked = 0;
            for (let i = 0; i < d.length; i += 4 * 97) if (d[i] !== d[0] || d[i + 1] !== d[1] || d[i + 2] !== d[2]) inked++;
            return {width: c.getBoundingClientRect().width, inked}; })""")
        for i, c in enumerate(canvases):
            assert c["width"] > 200 and c["inked"] > 50, (path, i, c)
        # ... or as SVG: marks drawn inside the chart's mark groups
        svgs = page.evaluate("""[...document.querySelectorAll('.vega-embed svg.marks')].map(s => ({
            width: s.getBoundingClientRect().width,
            marks: s.querySelectorAll('g[class*="mark-"] path, g[class*="mark-"] rect, g[class*="mark-"] line').length}))""")
        for i, s in enumerate(svgs):
            assert s["width"] > 200 and s["marks"] > 0, (path, i, s)
        assert plots or canvases or svgs, path
        if path.startswith("routing"):                          # grid, predictions, linked view, fingerprint
            assert len(canvases) >= 4, path
        assert page.locator('[data-testid="stMain"] [data-testid="stSlider"]').count() == 0 or \
            not page.locator('[data-testid="stMain"] [data-testid="stSlider"]').first.is_visible()
        # a metric's value is drawn larger than its label (the enlarged paragraph style must not win over it)
        sizes = page.evaluate("""[...document.querySelectorAll('[data-testid=stMetric]')].map(m => {
            const px = el => el ? parseFloat(getComputedStyle(el).fontSize) : 0;
            const value = m.querySelector('[data-testid=stMetricValue] p') || m.querySelector('[data-testid=stMetricValue]');
            return [px(value), px(m.querySelector('[data-testid=stMetricLabel] p'))]; })""")
        for value, label in sizes:
            assert value > 1.5 * label, (path, sizes)
    ctx.close()


def test_an_embedded_page_says_it_leaves_a_lesson_out(server, page):
    """A lesson's panel lives in the sidebar: an embedded view given a lesson's link showed the page's defaults
    without a word."""
    page.goto(server + "routing?embed=true&lesson=sparse-experts&lesson_step=3")
    settle(page)
    assert page.locator("h1").first.inner_text() == "Routing explorer"
    assert "a lesson runs in the full app" in page.locator('[data-testid="stMain"]').inner_text()
    assert page.locator('[data-testid="stException"]').count() == 0


def test_an_embedded_page_has_no_navigation(server, page):
    page.goto(server + "routing?embed=true&layer=12")
    settle(page)
    assert page.locator("h1").first.inner_text() == "Routing explorer"
    assert page.locator('[data-testid="stSidebar"]').count() == 0
    assert page.locator('[data-testid="stSidebarNav"]').count() == 0
    assert page.locator('[data-testid="stException"]').count() == 0


def test_presenter_mode_off_keeps_the_sidebar_open(server, page):
    page.goto(server + "situ-glu")
    settle(page)
    sidebar = page.locator('[data-testid="stSidebar"]')
    assert sidebar.get_attribute("data-collapsed") == "false" and sidebar.bounding_box()["width"] > 100
    toggle(page, "Presenter mode").click()
    settle(page)
    assert query(page).get("present") == "1"
    toggle(page, "Presenter mode").click()
    settle(page)
    assert "present" not in query(page)
    assert sidebar.get_attribute("data-collapsed") == "false" and sidebar.bounding_box()["width"] > 100
