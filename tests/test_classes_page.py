"""The Classes page and a class's place in the link (AppTest): joining with a wrong code or no nickname says why,
starting a class puts its code and the teacher's key in the link, a link's seat that opens no class gets a
notice, markup in a nickname stays text, and a database that cannot be reached is said on the page while the
rest of the app works."""
from __future__ import annotations

import pytest

from app import classes
from tests.conftest import open_app_page, outside_code

PAGE = "views/classes.py"


def form_button(at, label):
    return next(b for b in at.button if b.label == label)


def test_joining_with_a_wrong_code_or_no_nickname_says_why():
    at = open_app_page(PAGE)
    code, nick = at.text_input[0], at.text_input[1]
    code.input("ZZZZZZ")
    nick.input("Ana")
    form_button(at, "Join").click().run()
    assert any("no open class" in w.value for w in at.warning)
    at.text_input[1].input("   ")
    form_button(at, "Join").click().run()
    assert any("Type a nickname" in w.value for w in at.warning)
    assert not at.exception


def test_starting_a_class_shows_its_code_and_puts_the_key_in_the_link():
    at = open_app_page(PAGE)
    form_button(at, "Start a class").click().run()
    assert not at.exception, [e.value for e in at.exception]
    code = at.query_params["class"][0] if isinstance(at.query_params["class"], list) else at.query_params["class"]
    teacher = at.query_params["teacher"]
    teacher = teacher[0] if isinstance(teacher, list) else teacher
    assert classes.CODE.match(code) and classes.read_secret(teacher)
    assert any(m.value == code for m in at.metric)
    assert classes.store().teacher(code, teacher) is not None


def test_a_seat_that_opens_no_class_gets_a_notice_and_leaves_the_link():
    at = open_app_page("views/routing.py", {"class": "ABCDEF", "seat": "x" * 32})
    assert any("opens no class" in i.value for i in at.info), [i.value for i in at.info]
    assert "seat" not in at.query_params


def test_markup_in_a_nickname_stays_text():
    info, _ = classes.store().start("sparse-experts", 8)
    _, _, seat = classes.store().join(info.code, "**bold** <b>x</b>")
    at = open_app_page(PAGE, {"class": info.code, "seat": seat})
    shown = " ".join(m.value for m in at.markdown)
    assert "<b>x</b>" not in outside_code(shown) and "\\*\\*bold\\*\\*" in shown
    assert any(s.value.startswith("You are in class") for s in at.subheader)


@pytest.fixture
def unreachable(monkeypatch, tmp_path):
    monkeypatch.setattr(classes, "_store", classes.Store(f"sqlite:///{tmp_path}/no/such/dir/classes.sqlite"))


def test_an_unreachable_database_is_said_and_the_rest_works(unreachable):
    at = open_app_page(PAGE)
    form_button(at, "Start a class").click().run()
    assert any("cannot be reached" in w.value for w in at.warning), [w.value for w in at.warning]
    at = open_app_page("views/routing.py", {"class": "ABCDEF", "seat": "y" * 32})
    assert any("cannot be reached" in i.value for i in at.info)
    assert not at.exception and "seat" not in at.query_params
