"""AppTest smoke test: every page registered in the navigation runs with no exception."""
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.navigation import PAGES

ROOT = Path(__file__).resolve().parent.parent


def test_every_page_file_is_registered_and_exists():
    registered = {spec.path for spec in PAGES}
    on_disk = {f"views/{p.name}" for p in (ROOT / "views").glob("*.py")}
    assert registered == on_disk
    assert len({spec.url_path for spec in PAGES}) == len(PAGES)


@pytest.fixture(scope="module")
def app():
    return AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=180)


@pytest.mark.parametrize("spec", PAGES, ids=[s.url_path for s in PAGES])
def test_page_runs_without_exception(app, spec):
    at = app.run() if spec is PAGES[0] else app.switch_page(spec.path).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert len(at.title) == 1 and at.title[0].value
    for el in at.get("plotly_chart"):
        fig = json.loads(el.proto.spec)
        assert fig["data"], f"empty chart on {spec.title}"


def test_overview_cards_all_check_out():
    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=180).run()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Total parameters"] == "2.78T"
    assert metrics["Active per token"] == "104.2B"
    assert metrics["Layers"] == "93"
    captions = " ".join(c.value for c in at.caption)
    assert captions.count("✓ matches published") == len(metrics) == 8


def test_overview_breakdown_toggle_switches_to_active():
    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=180).run()
    bar = lambda: next(json.loads(c.proto.spec) for c in at.get("vega_lite_chart")
                       if json.loads(c.proto.spec).get("usermeta", {}).get("chart") == "overview_breakdown")
    assert "stored" in bar()["layer"][0]["encoding"]["x"]["title"]
    at.segmented_control(key="breakdown_view").set_value("active").run()
    assert not at.exception
    assert "per-token" in bar()["layer"][0]["encoding"]["x"]["title"]


def test_junk_query_params_get_a_notice_not_a_traceback():
    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=180)
    at.query_params["<script>alert(1)</script>"] = "x"
    at.query_params["layer"] = "9999999"
    at.run()
    assert not at.exception
    notice = " ".join(i.value for i in at.info)
    assert "ignored link parameters" in notice
    assert "<script>" not in notice          # escaped, shown as text


def _main_order(at) -> list:
    """(element type, value) of the main area's elements in page order."""
    seen = []

    def walk(node):
        seen.append((getattr(node, "type", None), getattr(node, "value", None)))
        for child in getattr(node, "children", {}).values():
            walk(child)
    walk(at.main)
    return seen


@pytest.mark.parametrize("path", ["views/glossary.py", "views/claims.py", "views/balance.py", "views/moe_vs_moa.py"])
def test_a_link_notice_sits_above_the_title_on_every_page(path):
    # one place for a bad link's notice, whichever page it is on and wherever that page declares its controls
    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=180)
    at.switch_page(path)
    at.query_params["zz"] = "1"
    at.run()
    assert not at.exception
    kinds = [kind for kind, value in _main_order(at) if kind in ("info", "title")]
    assert kinds[:2] == ["info", "title"], (path, kinds[:4])
