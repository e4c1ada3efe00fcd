"""Teaching and sharing (AppTest): the prompt lives in the link on every page that has one, presenter
mode is a link flag, each chart offers its data, and the guided tour leads from page to page."""
import pytest

from app.navigation import PAGES
from app.tour import TOUR, next_stop
from tests.conftest import outside_code
from tests.test_precision_pages import open_page, param

PROMPT_PAGES = ["views/routing.py", "views/attention.py", "views/parallel.py", "views/situ_glu.py"]


@pytest.mark.parametrize("path", PROMPT_PAGES)
def test_own_text_in_the_link_is_the_prompt_and_is_written_back(path):
    at = open_page(path, {"preset": "own", "text": "zebra 42 crossings"})
    box = at.text_area(key="prompt_text")
    assert box.value == "zebra 42 crossings"
    assert param(at, "preset") == "own" and param(at, "text") == "zebra 42 crossings"
    box.set_value("a different sentence").run()
    assert param(at, "text") == "a different sentence"


def test_a_named_preset_drops_the_text_and_unknown_presets_say_so():
    at = open_page("views/attention.py", {"preset": "code"})
    assert param(at, "preset") == "code" and param(at, "text") is None
    assert any("def mean" in t.value for t in at.text_area)
    bad = open_page("views/attention.py", {"preset": "<b>poetry</b>"})
    assert any("preset" in i.value and "<b>" not in outside_code(i.value) for i in bad.info)
    assert param(bad, "preset") is None and any("The router sends" in t.value for t in bad.text_area)  # the default


def test_presenter_mode_is_a_link_flag_and_a_toggle():
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file("../streamlit_app.py", default_timeout=600)
    at.query_params["present"] = "1"                    # a link with the flag opens a new session
    at.run().switch_page("views/situ_glu.py").run()
    assert not at.exception
    assert at.toggle(key="presenter_mode").value is True and param(at, "present") == "1"
    assert presenter_sheet(at)                                     # the presenter style sheet
    at.toggle(key="presenter_mode").set_value(False).run()
    assert param(at, "present") is None
    assert not presenter_sheet(at)


def presenter_sheet(at) -> bool:
    return any("k3-presenter" in h.proto.body for h in at.get("html"))


def test_every_chart_has_a_csv_download_and_no_page_draws_plotly():
    at = open_page("views/situ_glu.py")                                   # Vega-Lite charts: Streamlit's toolbar saves PNG
    charts = at.get("vega_lite_chart")
    downloads = [d for d in at.get("download_button") if "CSV" in d.proto.label]
    assert len(charts) == 6 and len(downloads) == len(charts) and not at.get("plotly_chart")
    assert not at.get("segmented_control") or all(c.proto.label != "Chart downloads" for c in at.get("segmented_control"))
    at = open_page("views/balance.py", {"m": "1024", "steps": "3"})
    charts = at.get("vega_lite_chart")
    downloads = [d for d in at.get("download_button") if "CSV" in d.proto.label]
    assert len(charts) == 4 and len(downloads) == len(charts) and not at.get("plotly_chart")


def test_tour_footer_leads_to_the_next_stop():
    stop = TOUR[1]
    spec = next(p for p in PAGES if p.url_path == stop.url_path)
    at = open_page(spec.path)
    labels = [p.proto.label for p in at.get("page_link")]
    assert any(next_stop(stop.url_path).title in label and "guided tour" in label for label in labels)
    assert any("Why it matters" in c.value for c in at.caption)


def test_the_link_box_script_survives_the_html_sanitiser():
    # DOMPurify (Streamlit's st.html) drops a <script> whose text holds "<" before a letter or "/": the box
    # then stayed empty. The script builds such strings from a character code instead.
    import re

    from app.sidebar import SHARE_HTML
    script = SHARE_HTML.split("<script>", 1)[1].rsplit("</script>", 1)[0]
    assert not re.search(r"<[/\w]", script)
    assert "location.href" in script and "k3-share-link" in script
