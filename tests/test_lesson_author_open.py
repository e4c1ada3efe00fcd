"""Opening a lesson file as a draft and changing a step's view values (app/lesson_author.py): a file opens only when
app/lessons.py reads it as a lesson, and the draft it makes writes that lesson back; a bad file's problem names its
line; a step's values are the page's own link parameters, and a bad one is named on its step by the lesson check."""
from __future__ import annotations

import pytest

from app import lessons as L
from app import state
from app.lesson_author import (
    DraftStep,
    allowed,
    by_step,
    check,
    file_name,
    free_name,
    from_lesson,
    link_options,
    read_file,
    shipped_names,
    to_toml,
    view_controls,
    with_values,
)
from app.navigation import PAGES
from app.page_controls import link_controls

BASE = '''title = "Layer twelve"
summary = "One layer."

[[steps]]
page = "routing"
params = { layer = 12, k = 8 }
note = "Look."
'''


def fields(step: L.Step) -> tuple:
    return step.page, step.params, step.note, step.question


@pytest.mark.parametrize("path", sorted(L.LESSONS_DIR.glob("*.toml")), ids=lambda p: p.stem)
def test_a_lesson_file_opens_as_a_draft_that_writes_the_same_lesson(path):
    shipped = L.load(path)
    opened = read_file(path.read_bytes(), path.name)
    assert isinstance(opened, L.Lesson) and opened.name == path.stem
    name = free_name(opened.name, shipped_names())
    back = L.parse(to_toml(from_lesson(opened), name), name)
    assert (back.title, back.summary) == (shipped.title, shipped.summary)
    assert [fields(s) for s in back.steps] == [fields(s) for s in shipped.steps]


def test_the_copy_of_a_shipped_lesson_gets_a_name_of_its_own_that_checks():
    lesson = L.shipped()["sparse-experts"]
    name = free_name(lesson.name, shipped_names())
    assert name == "sparse-experts-copy"
    assert isinstance(check(from_lesson(lesson), name), L.Lesson)
    assert free_name("mine", {"mine", "mine-copy"}) == "mine-copy-2" and free_name("mine", set()) == "mine"
    long = free_name("x" * 40, {"x" * 40})
    assert long == "x" * 30 + "-copy" and L.NAME.match(long)


@pytest.mark.parametrize("upload,name", [
    ("sparse-experts.toml", "sparse-experts"),
    ("Sparse experts (1).toml", "sparse-experts-1"),              # a browser's name for a second download
    ("C:\\Users\\teacher\\My Lesson.TOML", "my-lesson"),
    ("../../etc/passwd", "passwd"),
])
def test_the_lessons_name_is_the_files_made_a_link_name(upload, name):
    assert file_name(upload) == name


def _replace(line: int, new: str) -> str:
    lines = BASE.splitlines()
    lines[line - 1] = new
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("data,line,words", [
    (_replace(5, 'page = "nowhere"').encode(), 5, "there is no page 'nowhere'"),
    (_replace(6, "params = { depth = 3 }").encode(), 6, "the page routing has no link parameter 'depth'"),
    (_replace(6, "params = { layer = 93 }").encode(), 6, "layer = 93: layer 93 is outside 0–92"),
    (_replace(6, 'params = { scope = "everywhere" }').encode(), 6, "scope = everywhere"),
    (_replace(7, 'note = "an unfinished note').encode(), 7, "not valid TOML"),
    (_replace(7, 'note = "<script>alert(1)</script>"').encode(), 7, "note holds HTML"),
    (_replace(7, 'note = "caf\xe9"').encode("latin-1"), 7, "not UTF-8 text"),
    ((BASE + "deep = " + "[" * 5_000 + "]" * 5_000 + "\n").encode(), 8, "nested more than 50 deep"),
    ((BASE + "# padding\n" * 7_000).encode(), 1, f"a lesson file holds at most {L.MAX_BYTES:,}"),
])
def test_a_bad_file_is_not_opened_and_its_problem_names_its_line(data, line, words):
    result = read_file(data, "mine.toml")
    assert isinstance(result, L.LessonError)
    assert any(p.line == line and words in p.message for p in result.problems), [str(p) for p in result.problems]


def test_a_file_lessons_parse_does_not_foresee_is_a_problem_not_a_traceback():
    result = read_file(_replace(5, 'page = ["routing"]').encode(), "mine.toml")
    assert isinstance(result, L.LessonError) and result.problems


def test_a_byte_order_mark_and_windows_line_ends_are_read():
    result = read_file(("\ufeff" + BASE).replace("\n", "\r\n").encode(), "mine.toml")
    assert isinstance(result, L.Lesson) and result.steps[0].params == (("layer", "12"), ("k", "8"))


# ---- a step's view values ---------------------------------------------------------------------------------

def test_a_step_may_set_its_pages_own_parameters_not_the_students_sentence():
    shared = {c.param for c in state.carried()}
    assert {"preset", "text", "token"} <= shared
    plain = list(view_controls(DraftStep("routing", [("layer", "12")])))
    assert plain.index("layer") < plain.index("k") and "expert" in plain and not shared & set(plain)
    assert "token" in view_controls(DraftStep("routing", [("token", "3")]))       # a file may set it: shown, to edit
    assert view_controls(DraftStep("no-such-page", [])) == {}


@pytest.mark.parametrize("spec", [p for p in PAGES if p.url_path not in ("lessons", "classes")], ids=lambda s: s.url_path)
def test_each_option_offered_is_a_value_the_page_takes_and_never_its_default(spec):
    for name, c in link_controls(spec.path).items():
        options = link_options(c)
        assert allowed(c).startswith(f"{c.label}: ") and "Empty: the page's default" in allowed(c)
        if options is None:
            continue
        assert options and c.dump(c.default) not in options, name
        for text in options:
            value, note = c.parse(text)
            assert value is not None and note is None and state.link_text(c, value) == text, (name, text)


def test_what_a_box_says_the_page_takes():
    routing = link_controls("views/routing.py")
    assert allowed(routing["layer"]) == "layer: a whole number from 0 to 92. Empty: the page's default (46)."
    assert allowed(routing["bias"]).startswith("balancing-bias: on or off.")
    assert "one of from, only" in allowed(routing["scope"])


def test_changed_values_keep_their_place_new_ones_follow_and_emptied_ones_go():
    params = [("k", "8"), ("scope", "only")]
    assert with_values(params, {"layer": " 12 ", "k": "4", "scope": "", "bias": ""}) == [("k", "4"), ("layer", "12")]
    assert with_values(params, {}) == params


def test_a_changed_value_is_checked_on_its_step_with_its_line():
    d = from_lesson(L.shipped()["sparse-experts"])
    i = next(n for n, s in enumerate(d.steps) if ("scope", "only") in s.params)
    d.steps[i].params = with_values(d.steps[i].params, {"layer": "93"})
    result = check(d, "mine")
    assert isinstance(result, L.LessonError)
    [problem] = result.problems
    text = to_toml(d, "mine")
    assert "layer = 93" in text.splitlines()[problem.line - 1]
    assert f"step {i + 1}: layer = 93: layer 93 is outside 0–92" in problem.message
    assert by_step(d, "mine", result.problems) == {i: [problem]}

    d.steps[i].params = with_values(d.steps[i].params, {"layer": "12", "scope": ""})
    lesson = check(d, "mine")
    assert isinstance(lesson, L.Lesson) and lesson.steps[i].params == (("k", "8"), ("layer", "12"))
