"""The one state mechanism (app/state.py): parsing of link values (app/controls.py), and the view surviving a
sequence of inputs (AppTest) that lost it before: own text typed after moving the layer and top-k."""
from __future__ import annotations

import re

import pytest

from app import state
from tests.conftest import open_app_page

# ---- parsing a link value: clamp, ignore, say so --------------------------------------------------------

def test_int_clamps_out_of_range_and_ignores_junk():
    c = state.Int("layer", 46, "layer", lo=0, hi=92)
    assert c.parse("12") == (12, None)
    value, note = c.parse("500")
    assert value == 92 and "layer 500" in note and "showing 92" in note
    value, note = c.parse("-3")
    assert value == 0 and "showing 0" in note
    for junk in ("abc", "1e309", "NaN", "4.5", "", "99999999999999999999"):
        value, note = c.parse(junk)
        assert value is None and note, junk


def test_choice_matches_names_without_case_and_numbers_to_the_nearest():
    names = state.Choice("colour", "probability", "colouring", options=("probability", "load"))
    assert names.parse("LOAD") == ("load", None)
    value, note = names.parse("<script>x</script>")
    # shown as text: inside a code span (where Markdown reads no markup), and nowhere outside one
    assert value is None and "`<script>x</script>`" in note and "<" not in re.sub(r"`[^`]*`", "", note)
    numbers = state.Choice("gamma", 0.001, "step", options=(0.0001, 0.001, 0.01))
    assert numbers.parse("0.01") == (0.01, None)
    value, note = numbers.parse("0.004")
    assert value == 0.001 and "0.001" in note
    assert numbers.parse("inf")[0] is None and numbers.parse("nan")[0] is None


def test_flag_lists_and_text():
    flag = state.Flag("bias", True, "balancing-bias")
    assert flag.parse("off") == (False, None) and flag.parse("ON") == (True, None)
    assert flag.parse("maybe")[0] is None
    ints = state.Ints("ko", [], "knocked-out experts", lo=0, hi=895, most=3)
    value, note = ints.parse("5,abc,9999,5,7,8,9")
    assert value == [5, 7, 8] and "abc" in note and "9999" in note and "first 3" in note
    assert ints.dump([3, 40]) == "3,40"
    typed, note = ints.parse(" 12 40;7 x", whose="Your")               # typed in a text box: spaces, semicolons
    assert typed == [12, 40, 7] and note.startswith("Your knocked-out experts list") and "(x)" in note
    assert ints.parse("") == ([], None)
    many = state.Choices("verdict", ["a", "b"], "verdict filter", options=("holds", "does-not-hold"))
    assert many.parse("holds,nope") == (["holds"], many.parse("holds,nope")[1]) and "nope" in many.parse("x,nope")[1]
    assert many.parse("nope")[0] is None
    text = state.Text("q", "", "search text", most=5)
    value, note = text.parse("abcdefgh")
    assert value == "abcde" and note.startswith("The link's search text") and "first 5 characters (of 8)" in note


def test_fit_moves_a_value_into_a_range_that_depends_on_the_page():
    token = state.Index("token", None, "token")
    assert token.parse("-1")[0] == 0 and token.parse("x")[0] is None and token.parse("40") == (40, None)
    assert token.fit(40, range(27)) == 26 and token.fit(3, range(27)) == 3
    layer = state.Choice("layer", 5, "layer", options=(1, 2, 3))
    assert layer.fit(7, [1, 2, 3]) == 3


# ---- a page keeps its view through a long sequence of inputs (AppTest) ----------------------------------

def params(at) -> dict:
    return {k: at.query_params[k][0] if isinstance(at.query_params[k], list) else at.query_params[k]
            for k in at.query_params}


def test_routing_view_survives_own_text_and_reopens_from_its_link():
    at = open_app_page("views/routing.py")
    at.slider(key="routing_layer").set_value(12).run()
    at.slider(key="routing_k").set_value(4).run()
    at.toggle(key="routing_bias").set_value(False).run()
    at.segmented_control(key="prompt_preset").set_value("own").run()      # empty own text: the page stops
    assert any("empty" in i.value for i in at.info)
    at.text_area(key="prompt_text").input("The cat sat on the mat").run()  # the bug: layer and top-k reset
    assert not at.exception
    assert at.slider(key="routing_layer").value == 12
    assert at.slider(key="routing_k").value == 4
    assert at.toggle(key="routing_bias").value is False
    at.button(key="routing_next").click().run()
    assert at.slider(key="routing_layer").value == 13
    link = params(at)
    assert link["layer"] == "13" and link["k"] == "4" and link["bias"] == "off"
    assert link["preset"] == "own" and link["text"] == "The cat sat on the mat"
    at.button(key="routing_knock").click().run()
    knocked = params(at)["ko"]
    assert at.text_input(key="routing_ko").value == knocked
    at.pills(key="routing_token").set_value(2).run()
    # a chip reruns only the results fragment (by its key), and AppTest then holds only what that run drew:
    # a plain run shows the whole page again, the explorer's controls included
    assert at.slider(key="routing_k").value == 4 and params(at)["token"] == "2"
    at.run()
    assert at.pills(key="routing_token").value == 2
    at.toggle(key="routing_dense").set_value(True).run()
    link = params(at)
    assert link["token"] == "2" and link["dense"] == "on"
    caption = next(c.value for c in at.caption if "route it differently" in c.value)
    moved, layers = map(int, re.search(r"(\d+) of (\d+) layers route", caption).groups())
    assert moved == layers > 0                                              # dense adds experts everywhere

    fresh = open_app_page("views/routing.py", link)                         # the link, in a new session
    assert fresh.slider(key="routing_layer").value == 13
    assert fresh.slider(key="routing_k").value == 4
    assert fresh.toggle(key="routing_dense").value is True
    assert fresh.toggle(key="routing_bias").value is False
    assert fresh.text_input(key="routing_ko").value == knocked
    assert fresh.pills(key="routing_token").value == 2
    assert fresh.text_area(key="prompt_text").value == "The cat sat on the mat"
    assert params(fresh) == link


def test_a_bad_link_gets_notices_and_a_sane_view():
    at = open_app_page("views/routing.py", {"layer": "500", "k": "0", "ko": "5,abc", "bias": "maybe",
                                            "colour": "<b>x</b>", "token": "9999", "zzz": "1"})
    notes = " ".join(i.value for i in at.info)
    assert "layer 500" in notes and "top-k 0" in notes and "abc" in notes and "maybe" in notes
    assert "zzz" in notes and "token 9999" in notes
    assert at.slider(key="routing_layer").value == 92 and at.slider(key="routing_k").value == 1
    assert "zzz" not in params(at)


@pytest.mark.parametrize("page,key,value", [("views/balance.py", "bal_k", 8), ("views/moe_vs_moa.py", "moa_n", 3)])
def test_a_control_is_written_to_the_link_and_back(page, key, value):
    at = open_app_page(page)
    at.slider(key=key).set_value(value).run()
    param = key.split("_", 1)[1]
    assert params(at)[param] == str(value)
    fresh = open_app_page(page, params(at))
    assert fresh.slider(key=key).value == value


def test_a_draw_takes_its_range_from_the_declaration():
    """A control's range was written twice, in the declaration and in the widget call (66 calls)."""
    assert state.Int("layer", 46, "layer", lo=0, hi=92).widget_range("slider") == (0, 92)
    assert state.Choice("n", 896, "experts", options=(16, 896)).widget_range("select_slider") == ([16, 896],)
    assert state.Choice("mode", "a", "mode", options=("a", "b")).widget_range("segmented_control") == (["a", "b"],)
    assert state.Flag("bias", True, "bias").widget_range("toggle") == ()
    import ast

    from tests.conftest import ROOT
    repeated = []
    for f in sorted((ROOT / "views").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "draw"
                    and len(node.args) > 3 and isinstance(node.args[0], ast.Attribute)
                    and node.args[0].attr in ("slider", "select_slider", "segmented_control", "pills")
                    and all(isinstance(a, (ast.Constant, ast.Name)) for a in node.args[3:])
                    and not any(k.arg == "options" for k in node.keywords)):
                repeated.append((f.name, node.lineno, ast.unparse(node.args[1])))
    # what is left passes a range that depends on the page now (the prompt's tokens, the steps a run may take)
    assert len(repeated) <= 2, repeated
