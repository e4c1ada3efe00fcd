"""AppTest of the Routing explorer page: the grid, the re-routing controls, layer 0, bad prompts and bad
links. Each run forwards the live model, so the tests are few and each checks several things."""
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import outside_code, vega_datasets

ROOT = Path(__file__).resolve().parent.parent
PAGE = "views/routing.py"


def open_page(**params) -> AppTest:
    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=300)
    at.run()
    for k, v in params.items():
        at.query_params[k] = v
    at.switch_page(PAGE).run()
    ok(at)
    return at


def ok(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def chart(at, name):
    """A Vega-Lite chart by the name in its usermeta: its named datasets as data frames, or None."""
    for el in at.get("vega_lite_chart"):
        if json.loads(el.proto.spec).get("usermeta", {}).get("chart") == name:
            return vega_datasets(el)
    return None


def grid_data(at):
    """The expert grid's rows (a Vega-Lite chart, its data in the named dataset "experts"), or None."""
    import pyarrow as pa
    for el in at.get("vega_lite_chart"):
        for ds in el.proto.datasets:
            if ds.name == "experts":
                return pa.ipc.open_stream(ds.data.data).read_all().to_pandas()
    return None


def outlined(at) -> set[int]:
    """Experts the grid outlines (the chosen experts of the token)."""
    df = grid_data(at)
    assert df is not None and len(df) == 896 and list(df["expert"]) == list(range(896))
    return set(df.loc[df["chosen"], "expert"].tolist())


def infos(at) -> str:
    return " ".join(i.value for i in at.info)


def test_grid_outlines_k_experts_and_top_k_changes_k():
    at = open_page()
    assert len(outlined(at)) == 16
    assert at.slider(key="routing_layer").value == 46
    finger = chart(at, "routing_fingerprint")
    assert (finger["rows"]["chosen"] == 16).all() and len(finger["rows"]) == 92
    assert finger["image"]["url"][0].startswith("data:image/png;base64,")
    pred = chart(at, "routing_predictions")["predictions"]
    assert len(pred) == 10 and (pred.groupby("panel")["prob"].sum() <= 1).all()
    at.slider(key="routing_k").set_value(5).run()
    ok(at)
    assert len(outlined(at)) == 5
    assert at.query_params["k"] == "5"
    changed = chart(at, "routing_changed")                 # the re-routing now shows its effect
    assert changed is not None and changed["changed"]["layer"].iloc[0] == 46
    assert changed["changed"]["experts"].max() > 0 and changed["changed"]["experts"].max() <= 16
    at.toggle(key="routing_dense").set_value(True).run()
    ok(at)
    assert len(outlined(at)) == 896
    assert "896 of 896" in " ".join(m.value for m in at.metric)


def test_knocked_out_expert_is_never_outlined():
    at = open_page(token="4")
    before = outlined(at)
    victim = int(at.text_input(key="routing_expert").value)       # the panel opens on the token's first expert
    assert victim in before
    # the panel's two tables, each one Markdown table: the prompt's 8 tokens scoring it highest, then the held-out ones
    tables = [m.value for m in at.markdown if m.value.startswith("| ")]
    assert [t.splitlines()[0] for t in tables] == ["| position | token | router probability | chose it |",
                                                   "| token | in context | router probability | chose it |"]
    assert all(len(t.splitlines()) == 2 + 8 for t in tables)
    at.button(key="routing_knock").click().run()            # "Knock out" in the expert panel
    ok(at)
    assert at.text_input(key="routing_ko").value == str(victim)
    assert int(at.text_input(key="routing_expert").value) == victim    # the panel stays on it (now crossed out)
    after = outlined(at)
    assert victim not in after and len(after) == 16
    other = sorted(after)[:2]
    at.text_input(key="routing_ko").input(f"{victim}, {other[0]} {other[1]}").run()   # typed: commas or spaces
    ok(at)
    after = outlined(at)
    assert not after & {victim, *other} and len(after) == 16
    assert at.query_params["ko"] == ",".join(map(str, sorted([victim, *other])))
    assert at.text_input(key="routing_ko").value == ", ".join(map(str, sorted([victim, *other])))


def test_typed_expert_ids_keep_the_good_ones_and_say_what_was_dropped():
    at = open_page(token="4")
    at.text_input(key="routing_ko").input("5, abc, 9999, 5, <b>7</b>").run()
    ok(at)
    assert at.query_params["ko"] == "5" and 5 not in outlined(at)
    said = " ".join(c.value for c in at.caption)
    assert "not whole numbers" in said and "outside 0–895" in said and "<b>" not in said
    at.text_input(key="routing_ko").input("").run()                      # emptied: nothing knocked out
    ok(at)
    assert "ko" not in at.query_params and at.text_input(key="routing_ko").value == ""


def test_layer_zero_says_it_is_dense():
    at = open_page(layer="0")
    assert "Layer 0 is dense" in infos(at)
    assert grid_data(at) is None


@pytest.mark.parametrize("params, expected", [
    ({"layer": "500", "token": "-3"}, ["layer 500", "showing 92", "token -3", "showing 0"]),
    ({"layer": "abc", "k": "999", "ko": "5,<b>x</b>", "junk": "1"}, ["not a whole number", "top-k 999",
                                                                     "ignored link parameters"]),
])
def test_bad_links_clamp_with_a_notice(params, expected):
    at = open_page(**params)
    text = infos(at)
    for phrase in expected:
        assert phrase in text, (phrase, text)
    assert "<b>" not in outside_code(text)
    if params.get("layer") == "500":
        assert at.slider(key="routing_layer").value == 92 and at.pills(key="routing_token").value == 0
        assert at.query_params["layer"] == "92" and at.query_params["token"] == "0"
    else:
        assert at.slider(key="routing_k").value == 64 and at.text_input(key="routing_ko").value == "5"
        assert "junk" not in at.query_params


def test_bad_prompts_give_a_message_not_a_traceback():
    at = open_page()
    at.segmented_control(key="prompt_preset").set_value("own").run()
    box = "prompt_text"
    for text in ("", "   \n  "):
        at.text_area(key=box).input(text).run()
        ok(at)
        assert "empty" in infos(at) and grid_data(at) is None
    for text in ("x" * 100_000, "🙂🙃 emoji 👍🏽", "مرحبا بالعالم", "<script>alert(1)</script>"):
        at.text_area(key=box).input(text).run()
        ok(at)
        assert grid_data(at) is not None
        tokens = at.pills(key="routing_token")
        assert tokens.value == len(tokens.options) - 1          # the last token is chosen
        if text.startswith("x"):
            assert any("cut" in c.value for c in at.caption)
        if text.startswith("<script>"):
            assert at.query_params["preset"] == "own" and at.query_params["text"] == text
            labels = "".join(tokens.options)
            assert "<" in labels and "<" not in labels.replace("\\<", "")   # markup shown as text


def test_expert_panel_follows_the_token_until_an_expert_is_picked():
    at = open_page(token="4")
    top = lambda: int(grid_data(at).query("chosen").sort_values("rank")["expert"].iloc[0])  # its first expert here
    assert int(at.text_input(key="routing_expert").value) == top() and "expert" not in at.query_params
    at.slider(key="routing_layer").set_value(47).run()
    ok(at)
    assert int(at.text_input(key="routing_expert").value) == top() and "expert" not in at.query_params
    picked = next(e for e in range(896) if e not in outlined(at))            # an expert this token did not choose
    at.text_input(key="routing_expert").input(str(picked)).run()
    ok(at)
    assert at.query_params["expert"] == str(picked)
    at.slider(key="routing_layer").set_value(48).run()                        # a picked expert stays in the panel
    ok(at)
    assert int(at.text_input(key="routing_expert").value) == picked and at.query_params["expert"] == str(picked)


def test_a_token_chip_redraws_the_results_alone():
    """A token chip reruns the results fragment by its key (token_moved), so the 64 chips and the panel's list
    controls are not sent again; AppTest then holds only what that run drew. Dense reruns the explorer.
    (A top-k key reruns the results as its own fragment, which AppTest runs whole: tests/test_routing_browser.py
    checks that one on the wire.)"""
    at = open_page()

    def drawn(at):
        return {w.key for kind in ("pills", "toggle", "slider", "text_input", "radio") for w in at.get(kind)}
    assert {"routing_token", "routing_dense", "routing_ko", "routing_force", "routing_k", "routing_bias",
            "routing_scope", "routing_layer"} <= drawn(at)
    before = outlined(at)
    at.pills(key="routing_token").set_value(3).run()
    ok(at)
    assert drawn(at) & {"routing_token", "routing_dense", "routing_ko", "routing_force"} == set()
    assert {"routing_k", "routing_bias", "routing_scope", "routing_layer"} <= drawn(at)
    assert len(outlined(at)) == 16 and outlined(at) != before                 # the fourth token's experts
    at.run()                                                                  # the whole page again
    at.toggle(key="routing_dense").set_value(True).run()
    ok(at)
    assert {"routing_token", "routing_dense", "routing_k"} <= drawn(at) and at.slider(key="routing_k").disabled


def settle(calls: list, quiet: float = 2.0, most: float = 120) -> None:
    """Wait until `calls` has not grown for `quiet` seconds (the idle-time prefetch has done what it was asked)."""
    import time
    deadline, seen, since = time.time() + most, len(calls), time.time()
    while time.time() < deadline and time.time() - since < quiet:
        time.sleep(0.1)
        if len(calls) != seen:
            seen, since = len(calls), time.time()


def test_a_nudge_finds_its_charts_built_ahead(monkeypatch):
    """While the server is idle, the prefetch computes the re-runs one nudge away and the page's charts of each
    (views/routing.py build_ahead, the page's own calls and keys), and the layer view's charts of the layers
    either side (layer_ahead): top-k one up, or the next layer, then builds no grid."""
    import time

    from app import live
    from app.charts import routing as charts
    calls = []
    real = charts.grid_spec
    monkeypatch.setattr(charts, "grid_spec", lambda *a, **k: calls.append(a[1:]) or real(*a, **k))
    pf = live._prefetcher
    pf.enabled = True
    try:
        at = open_page(layer="61")
        deadline = time.time() + 120
        while len(calls) < 7 and time.time() < deadline:      # the page's grid, layers 62 and 60, the 4 nudges
            time.sleep(0.2)
        time.sleep(0.5)
        assert len(calls) == 7, calls
        at.slider(key="routing_k").set_value(17).run()
        ok(at)
        assert len(outlined(at)) == 17 and len(calls) == 7      # drawn from what was built ahead
        at.slider(key="routing_k").set_value(16).run()
        at.slider(key="routing_layer").set_value(62).run()      # the next layer of the model's own routing
        ok(at)
        assert any("Layer 62: the experts of" in m.value for m in at.markdown) and len(calls) == 7
        # another token: the nudges' re-runs were computed before, what the page draws of them for this token was
        # not; it is built ahead too, so top-k one up for the new token builds no grid either
        settle(calls)
        at.pills(key="routing_token").set_value(3).run()
        ok(at)
        settle(calls)
        built = len(calls)
        at.run()
        at.slider(key="routing_k").set_value(17).run()
        ok(at)
        assert len(outlined(at)) == 17 and len(calls) == built, calls[built:]
    finally:
        pf.stop()                               # no wish of this test's left running into the next ones
        pf.enabled = live.os.environ.get("K3_PREFETCH", "1") != "0"
