"""Presenter mode's version of a Vega-Lite chart (app.ui.presenter_spec): larger type, the spec's own settings kept."""
import copy

from app.ui import PRESENTER_VEGA, presenter_spec


def test_presenter_type_is_merged_into_the_specs_own_config():
    spec = {"width": "container", "height": 300, "mark": "bar",
            "config": {"axis": {"labelAngle": 0, "labelFontSize": 11}, "title": {"fontWeight": "normal"}}}
    before = copy.deepcopy(spec)
    big = presenter_spec(spec)
    assert spec == before                                           # cached specs are shared: never changed
    assert big["config"]["axis"] == {"labelAngle": 0, "labelFontSize": 15, "titleFontSize": 16}
    assert big["config"]["title"] == {"fontWeight": "normal", "fontSize": 18}
    assert big["config"]["legend"]["labelFontSize"] > 11 and big["config"]["text"]["fontSize"] >= 14
    assert set(PRESENTER_VEGA) <= set(big["config"])
    assert big["height"] == 405                                     # 1.35x, as plotly charts grow


def test_a_fixed_size_chart_keeps_its_proportions():
    grid = {"width": 560, "height": 640, "mark": "square"}
    big = presenter_spec(grid)
    assert (big["width"], big["height"]) == (560, 640)
    assert big["config"]["axis"]["labelFontSize"] == 15
    assert "config" not in grid


def test_stacked_panels_that_stretch_grow_each():
    stack = {"vconcat": [{"width": "container", "height": 200, "mark": "line"},
                         {"width": "container", "height": 100, "mark": "line"}]}
    big = presenter_spec(stack)
    assert [p["height"] for p in big["vconcat"]] == [270, 135]
    assert [p["height"] for p in stack["vconcat"]] == [200, 100]
    from app.ui import stretches
    assert stretches(stack) and stretches({"width": "container"})
    assert not stretches({"vconcat": [{"width": "container"}, {"width": 300}]}) and not stretches({"width": 400})


def test_presenter_mode_still_shows_the_prompt_its_text_box_hides():
    from streamlit.testing.v1 import AppTest

    from app.ui import K_PRESENT, VERBATIM
    from tests.conftest import ROOT
    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=600).run()
    at.switch_page("views/routing.py").run()
    assert not at.exception
    prompt = at.text_area(key="prompt_text").value
    assert prompt and not any(t.value == VERBATIM + prompt.strip() for t in at.text)   # not shown twice normally
    about_controls = lambda: any(c.value.startswith("The change applies to every token") for c in at.caption)
    assert about_controls()
    at.session_state[K_PRESENT] = True
    at.run()
    assert not at.exception
    assert any(t.value == VERBATIM + prompt.strip() for t in at.text)               # the text, verbatim
    assert not about_controls()                    # the note on the re-routing controls goes with the controls
    # the controls are hidden, so the box says what they are set to
    said = [m.value for m in at.markdown if m.value.startswith("Experts per token:")]
    assert said == ["Experts per token: 16 of 896 (the model's own)  \nBalancing bias: on  \nKnocked out: none  \n"
                    "Forced: none"]


def test_rerouting_in_words():
    from app.routing import Rerouting
    from model.config import K3Config
    cfg = K3Config.tiny()
    assert Rerouting().describe(cfg) == ["Experts per token: 16 of 896 (the model's own)", "Balancing bias: on",
                                         "Knocked out: none", "Forced: none"]
    changed = Rerouting(top_k=4, use_bias=False, knocked_out=(3, 40), forced=(7,), scope="only").describe(cfg)
    assert changed == ["Experts per token: 4 of 896", "Balancing bias: off", "Knocked out: 3, 40", "Forced: 7",
                       "Applies at: this layer only"]
    assert Rerouting(dense=True).describe(cfg)[0] == "Experts per token: every one of 896 (dense)"
