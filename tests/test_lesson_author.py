"""A lesson written in the app (app/lesson_author.py): the file a draft makes is read by app/lessons.py as the same
lesson (every shipped lesson round trips, every page's controls are written so that they read back), and a draft
with problems gets lessons.parse's own messages, with the lines of the file it makes."""
from __future__ import annotations

import pytest

from app import lessons as L
from app import state
from app.lesson_author import Draft, DraftStep, by_step, check, from_lesson, suggest_name, to_toml
from app.navigation import PAGES
from app.page_controls import link_controls

SHIPPED = ("sparse-experts", "attention-memory", "checking-claims")


def draft(*steps: DraftStep, title: str = "A lesson", summary: str = "What it is about.") -> Draft:
    return Draft(title, summary, list(steps))


def line_of(text: str, start: str) -> int:
    """The line (1-based) of the file that starts with `start`, as a reader of the file counts it."""
    found = [n for n, line in enumerate(text.splitlines(), 1) if line.startswith(start)]
    assert len(found) == 1, (start, found)
    return found[0]


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_lesson_round_trips_through_a_draft(name):
    lesson = L.shipped()[name]
    assert isinstance(lesson, L.Lesson)
    text = to_toml(from_lesson(lesson), name)
    back = L.parse(text, name)
    assert (back.name, back.title, back.summary) == (lesson.name, lesson.title, lesson.summary)
    assert len(back.steps) == len(lesson.steps)
    for ours, theirs in zip(back.steps, lesson.steps):
        assert ours.page == theirs.page
        assert ours.params == theirs.params
        assert ours.note == theirs.note
        assert ours.question == theirs.question
    # each [[steps]] header is where the lesson says its step starts
    assert [s.line for s in back.steps] == [n for n, line in enumerate(text.splitlines(), 1) if line == "[[steps]]"]


def _a_value(c: state.Control) -> str | None:
    """A link text of a value the control takes that is not its default (None where none is known)."""
    if isinstance(c, state.Int):
        return str(c.hi if c.default == c.lo else c.lo)
    if isinstance(c, state.Index):
        return "3"
    if isinstance(c, state.Flag):
        return c.dump(not c.default)
    if isinstance(c, state.Choice):
        return c.dump(next(o for o in c.options if o != c.default))
    if isinstance(c, state.Ints):
        return f"{c.lo},{c.hi}"
    if isinstance(c, state.Choices):
        return ",".join(c.options[:2])
    if isinstance(c, state.Text):
        return 'a "quoted", odd \\ sentence'
    for raw in ("3", "mxfp4"):                                   # a page's own control (claim, glossary term)
        value, note = c.parse(raw)
        if value is not None and note is None:
            return c.dump(value)
    return None


@pytest.mark.parametrize("spec", [p for p in PAGES if p.url_path not in ("lessons", "classes")], ids=lambda s: s.url_path)
def test_every_pages_link_values_are_written_so_that_they_read_back(spec):
    carried = {c.param for c in state.carried()}
    params = [(name, _a_value(c)) for name, c in link_controls(spec.path).items() if name not in carried]
    assert all(text is not None for _, text in params), params
    lesson = L.parse(to_toml(draft(DraftStep(spec.url_path, params, "Look.")), "test"), "test")
    assert lesson.steps[0].params == tuple(params)


def test_link_values_are_written_as_the_toml_a_person_would_write():
    text = to_toml(draft(DraftStep("routing", [("layer", "12"), ("bias", "off"), ("ko", "3,7"), ("scope", "from")],
                                   "Look."),
                         DraftStep("balance", [("gamma", "0.01")], "Look.")), "test")
    assert 'params = { layer = 12, bias = false, ko = [3, 7], scope = "from" }' in text
    assert "params = { gamma = 0.01 }" in text


def test_a_bad_param_value_names_its_line_and_its_step():
    d = draft(DraftStep("balance", [("gamma", "0.01")], "Fine."),
              DraftStep("routing", [("layer", "93"), ("k", "8")], "Too deep."))
    result = check(d, "test")
    assert isinstance(result, L.LessonError)
    text = to_toml(d, "test")
    [problem] = result.problems
    assert problem.line == line_of(text, "params = { layer = 93")
    assert "step 2: layer = 93: layer 93 is outside 0–92" in problem.message
    assert by_step(d, "test", result.problems) == {1: [problem]}


def test_a_draft_without_its_texts_names_each_missing_one():
    d = Draft("", "", [DraftStep("routing", [], "", {"kind": "number", "ask": "How many?", "answer": "twelve",
                                                     "explanation": "Because."})])
    result = check(d, "test")
    text = to_toml(d, "test")
    said = {(p.line, p.message) for p in result.problems}
    assert (line_of(text, "title ="), "title is empty") in said
    assert (line_of(text, "summary ="), "summary is empty") in said
    assert (line_of(text, "note ="), "step 1: note is empty") in said
    assert (line_of(text, "answer ="), "step 1, question: answer must be a number (or from_view names the view's "
                                       "value)") in said
    found = by_step(d, "test", result.problems)
    assert len(found[None]) == 2 and len(found[0]) == 2


@pytest.mark.parametrize("where,text,words", [
    ("note", "<script>alert(1)</script>", "note holds HTML, a picture or a script link"),
    ("note", "![x](https://example.org/pixel.png)", "note holds HTML, a picture or a script link"),
    ("note", "a bell\x07 rings", "note holds control characters"),
    ("note", "a delete\x7f key", "note holds control characters"),      # DEL: an escape in TOML, not a broken file
    ("note", "two lines,\nthe second with a bell\x07 and a delete\x7f", "note holds control characters"),
    ("note", "x" * 10_000, "note is 10,000 characters long; at most 1,200 fit"),
    ("note", " \n\t", "note is empty"),
    ("title", "two\nlines", "title must be one line"),
    ("ask", "<img src=x onerror=alert(1)>", "ask holds HTML"),
    ("option", "one\ntwo", "option 0 must be one line"),
])
def test_hostile_text_is_refused_with_the_lessons_own_message(where, text, words):
    q = {"kind": "choice", "ask": text if where == "ask" else "Which?", "answer": 0, "explanation": "So.",
         "options": [text if where == "option" else "this", "that"]}
    d = Draft(text if where == "title" else "A lesson", "About.",
              [DraftStep("routing", [], text if where == "note" else "Look.", q)])
    result = check(d, "test")
    assert isinstance(result, L.LessonError)
    assert any(words in p.message for p in result.problems), [str(p) for p in result.problems]
    assert all(p.line > 1 for p in result.problems)             # each names the line of its text, not the top


@pytest.mark.parametrize("note", [
    'Three quotes """ and \'\'\' and a "quoted" word',
    'On two lines:\nthree quotes """, four """", and \'\'\' too\n',
    "A backslash \\ at the end\\",
    "\nStarts with a blank line\n\nand ends without one",
    "Tabs\tand trailing spaces   \n  indented line\n",
    "[[steps]]\npage = \"overview\"\n",                              # looks like a key: it is the note's text
    "Ünïcödé, ∑ and 🧪 — kept as written",
    'One line with "quotes" and a \\ backslash',
])
def test_notes_read_back_exactly_as_written(note):
    d = draft(DraftStep("routing", [("k", "8")], note), DraftStep("overview", [], "The second."))
    text = to_toml(d, "test")
    lesson = L.parse(text, "test")
    assert [s.note for s in lesson.steps] == [note, "The second."]
    # the second step starts at the last [[steps]] line (a note's text that looks like one is no header)
    assert lesson.steps[1].line == max(n for n, line in enumerate(text.splitlines(), 1) if line == "[[steps]]")


def test_a_half_character_is_replaced_not_a_broken_file():
    lesson = check(draft(DraftStep("routing", [], "half \ud83e of an emoji")), "test")
    assert isinstance(lesson, L.Lesson) and lesson.steps[0].note == "half \ufffd of an emoji"


def test_a_question_read_from_the_view_round_trips():
    q = {"kind": "number", "ask": "How many layers?", "from_view": "rerouted_layers", "answer": None,
         "tolerance": 0.0, "explanation": "Your view says."}
    lesson = check(draft(DraftStep("routing", [("layer", "12")], "Re-route.", q)), "test")
    assert isinstance(lesson, L.Lesson)
    got = lesson.steps[0].question
    assert (got.kind, got.from_view, got.answer) == ("number", "rerouted_layers", None)
    wrong_page = check(draft(DraftStep("balance", [], "Here.", q)), "test")
    assert any("computed by the page routing" in p.message for p in wrong_page.problems)


def test_names():
    ok = draft(DraftStep("routing", [], "Look."))
    assert isinstance(check(ok, "my-lesson-2"), L.Lesson)
    for bad in ("My Lesson", "-lead", "x" * 41, "a/b", ""):
        result = check(ok, bad)
        assert isinstance(result, L.LessonError)
        assert any("lower-case letters, digits and hyphens" in p.message and p.line == 1 for p in result.problems)
    for name in SHIPPED:
        taken = check(ok, name)
        assert isinstance(taken, L.LessonError)
        assert any("is a lesson of lessons/ already" in p.message for p in taken.problems), name
    assert suggest_name("Sparse experts in 15 minutes") == "sparse-experts-in-15-minutes"
    assert suggest_name("Ünïcode?!") == "n-code" and suggest_name("!!!") == "my-lesson"
    assert len(suggest_name("word " * 30)) <= 40 and L.NAME.match(suggest_name("word " * 30))


def test_too_many_steps_are_the_lessons_own_problem():
    d = draft(*[DraftStep("overview", [], f"Step {i}.") for i in range(L.MAX_STEPS + 1)])
    result = check(d, "test")
    assert any(f"{L.MAX_STEPS + 1} steps; a lesson has at most {L.MAX_STEPS}" in p.message for p in result.problems)
