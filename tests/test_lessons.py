"""Lessons (app/lessons.py, app/lessons_file.py, app/page_controls.py, app/lessons_ui.py, lessons/*.toml): the
shipped lessons validate against the pages' own declarations, a malformed file names the right line, answers are
checked, the link restores the step, and the sidebar panel follows a lesson (AppTest)."""
from __future__ import annotations

import pytest

from app import lessons as L
from app import state
from app.controls import link_text
from app.lessons_file import Problem
from app.navigation import PAGES
from app.page_controls import link_controls
from tests.conftest import ROOT, open_app_page

SHIPPED = ("sparse-experts", "attention-memory", "checking-claims")


def shipped(name: str) -> L.Lesson:
    lesson = L.shipped()[name]
    assert isinstance(lesson, L.Lesson), [str(p) for p in lesson.problems]
    return lesson


# ---- the pages' declarations, read without running the pages ---------------------------------------------

@pytest.mark.parametrize("spec", [p for p in PAGES if p.url_path != "lessons"], ids=lambda s: s.url_path)
def test_every_page_declares_a_link_and_no_page_takes_an_app_parameter(spec):
    controls = link_controls(spec.path)
    assert {"preset", "text", "token"} <= set(controls)          # the shared prompt and token, as on every link
    assert not set(controls) & state.APP_PARAMS, spec.url_path    # "lesson_step", not "step": the balancing lab's


def test_the_declarations_are_the_pages_own():
    from app import routing as rt
    routing = link_controls("views/routing.py")
    assert routing["layer"].hi == 92 and routing["k"].hi == rt.MAX_TOP_K and routing["k"].default == 16
    assert "play" not in routing                                  # kept in the session only (link=False)
    balance = link_controls("views/balance.py")
    assert 0.001 in balance["gamma"].options and balance["step"].hi == 30
    assert type(link_controls("views/claims.py")["claim"]).__name__ == "ClaimNumber"   # a class the view defines


# ---- the shipped lessons ------------------------------------------------------------------------------------

def test_every_shipped_lesson_validates_and_its_steps_exist():
    found = L.shipped()
    assert set(SHIPPED) <= set(found)
    assert all(isinstance(v, L.Lesson) for v in found.values()), {k: [str(p) for p in v.problems]
                                                                   for k, v in found.items() if not isinstance(v, L.Lesson)}
    urls = {p.url_path for p in PAGES}
    for name in SHIPPED:
        lesson = shipped(name)
        assert 5 <= len(lesson.steps) <= 8, name
        assert sum(s.question is not None for s in lesson.steps) >= len(lesson.steps) - 2
        for step in lesson.steps:
            assert step.page in urls
            controls = link_controls(step.view_path)
            for param, text in step.params:
                value, note = controls[param].parse(text)
                assert value is not None and note is None, (name, param, text)


def test_a_lessons_page_order_follows_the_sidebar():
    assert list(L.shipped())[:3] == ["sparse-experts", "attention-memory", "checking-claims"]


def test_the_answers_of_the_shipped_questions_are_what_the_pages_compute():
    """Each question's answer against the function its page calls (a corrected page would fail here)."""
    from app import routing as rt
    from app.attention import metric_caption
    from app.attnres import link_series
    from app.parallel import expert_memory
    from app.routing_sparsity import sparsity
    from model import memory
    from model.attnres import vectors_alive
    from model.config import K3Config
    full, tiny = K3Config.full(), K3Config.tiny()
    ask = lambda name, n: shipped(name).steps[n - 1].question            # noqa: E731

    assert ask("sparse-experts", 1).answer == tiny.top_k == 16
    assert ask("sparse-experts", 3).answer == sparsity(rt.Rerouting(top_k=8), 46, tiny)["sparsity"]
    assert ask("sparse-experts", 4).from_view == "rerouted_layers" and ask("sparse-experts", 4).answer is None
    assert ask("sparse-experts", 7).answer == min(8, tiny.top_k)
    assert ask("attention-memory", 1).answer == tiny.layer_types.count("mla") == full.n_mla
    assert f"{ask('attention-memory', 3).answer}x" in metric_caption("all MLA", 2 ** 20, 1, full)
    assert ask("attention-memory", 5).answer == vectors_alive(full.num_layers, full.attnres_block_size)

    def ratio(bs, view):
        row = link_series(bs, view).set_index("layers").loc[full.num_layers]
        return round(row["Full"] / row["Block"], 1)
    assert ask("attention-memory", 6).answer == ratio(1, "per-layer")
    assert ask("attention-memory", 7).answer == ratio(full.attnres_block_size, "two-reads")
    assert ask("checking-claims", 5).answer == memory.mla_values_per_token(full)
    assert ask("checking-claims", 6).answer == expert_memory(full).least_devices


def test_what_the_lessons_cite_exists():
    import re

    from tests.test_docs import CITES, DOCS, _numbers, sections_of
    for name in SHIPPED:
        lesson = shipped(name)
        texts = [lesson.summary] + [t for s in lesson.steps for t in
                                    (s.note, *((s.question.ask, s.question.explanation) if s.question else ()))]
        text = " ".join(" ".join(texts).split())
        for doc in re.findall(r"docs/([A-Z]+\.md)", text):
            assert (DOCS / doc).is_file(), (name, doc)
        for doc, pattern in CITES.items():
            for spec in pattern.findall(text):
                assert _numbers(spec) <= sections_of(doc), (name, doc, spec)
        for n in re.findall(r"claim (\d+)", text):
            assert 1 <= int(n) <= 15, (name, n)
        for heading in re.findall(r'REFERENCES\.md, "([^"]+)"', text):
            assert f"## {heading}" in (DOCS / "REFERENCES.md").read_text(encoding="utf-8"), heading
        for step in lesson.steps:                     # a capitalised bold name is the page's section, control or title
            source = (ROOT / step.view_path).read_text(encoding="utf-8").lower()
            for bold in re.findall(r"\*\*([A-Z][^*\d]*)\*\*", step.note):
                assert bold.lower() in source, (name, step.page, bold)


def test_the_claims_lessons_verdicts_are_the_claims_pages():
    from app import live as lv_mod
    from app.claims import cached_checks
    from app.overview import headlines
    from model.config import K3Config
    lv = lv_mod.live()
    checks = {c.claim.number: c for c in
              cached_checks(tuple(lv.tokenizer.encode(lv_mod.PRESETS[lv_mod.DEFAULT_PRESET]))[: lv_mod.MAX_TOKENS])}
    lesson = shipped("checking-claims")
    assert checks[1].verdict in lesson.steps[0].question.answers
    assert lesson.steps[1].question.answer == sum("matches published" in h.verdict for h in headlines(K3Config.full())) == 8
    assert lesson.steps[2].params == (("verdict", "does-not-hold"),)
    assert lesson.steps[2].question.answer == sum(c.matches({"does not hold"}) for c in checks.values())
    six = lesson.steps[3].question                                # "the 75% as MLA's own cut" is the part that fails
    assert [p.verdict for p in checks[6].parts] == ["does not hold", "holds"] and six.answer == 0
    assert "does not hold" in [p.verdict for p in checks[14].parts]


# ---- malformed files name the right line ------------------------------------------------------------------------

BASE = '''title = "A lesson"
summary = "What it is about."

[[steps]]
page = "routing"
params = { layer = 12, k = 8 }
note = """
First line of the note.
k = 3 is text inside the note, not a key.
"""

[steps.question]
kind = "choice"
ask = "Which one?"
options = ["this", "that"]
answer = 1
explanation = "Because."

[[steps]]
page = "balance"
params = { gamma = 0.01 }
note = "The second step."
'''


def problems(text: str, name: str = "test") -> list[Problem]:
    with pytest.raises(L.LessonError) as e:
        L.parse(text, name)
    return e.value.problems


def test_the_base_file_is_valid():
    lesson = L.parse(BASE, "test")
    assert [s.page for s in lesson.steps] == ["routing", "balance"]
    assert lesson.steps[0].params == (("layer", "12"), ("k", "8")) and lesson.steps[1].params == (("gamma", "0.01"),)
    assert lesson.steps[0].question.options == ("this", "that") and lesson.steps[1].question is None


@pytest.mark.parametrize("old,new,line,words", [
    ("answer = 1", "answer = = 1", 16, "not valid TOML"),
    ('page = "balance"', 'page = "balancing"', 20, "no page 'balancing'"),
    ("gamma = 0.01", "gama = 0.01", 21, "no link parameter 'gama'"),
    ("layer = 12", "layer = 93", 6, "outside 0–92"),
    ("k = 8", "k = 99", 6, "top-k 99 is outside 1–64"),            # not line 9, where the note's text says k = 3
    ("gamma = 0.01", "gamma = 0.02", 21, "it takes 0.0001"),
    ("layer = 12", "layer = true", 6, "not a whole number"),
    ('note = "The second step."', "", 19, "note is missing"),
    ('note = "The second step."', f'note = "{"x" * (L.MAX_NOTE + 1)}"', 22, "at most 1,200 fit"),
    ('note = "The second step."', 'note = "<img src=x onerror=alert(1)>"', 22, "holds HTML"),
    ('note = "The second step."', 'note = "![pixel](https://example.org/p.png)"', 22, "picture"),
    ('note = """', 'notes = """', 7, "unknown key 'notes'"),
    ("answer = 1", "answer = 2", 16, "not an option's index (0 to 1)"),
    ('kind = "choice"', 'kind = "essay"', 13, "kind 'essay' is not one of"),
    ('kind = "choice"', 'kind = "number"', 15, "'options' does not belong to a number question"),
    ('kind = "choice"', 'kind = "text"', 12, "answers must be a list"),
    ('options = ["this", "that"]', 'options = ["this"]', 15, "options must be a list of 2 to 6"),
    ('explanation = "Because."', "", 12, "explanation is missing"),
    ('title = "A lesson"', 'title = ""', 1, "title is empty"),
    ('summary = "What it is about."', 'summary = "x"\nteacher = "me"', 3, "unknown key 'teacher'"),
    ('page = "balance"', 'page = ["balance"]', 20, "no page \"['balance']\""),     # a list: no page, no TypeError
    ('page = "balance"', 'page = { name = "balance" }', 20, "no page"),
    ('kind = "choice"', 'kind = ["choice"]', 13, "is not one of"),
    ("gamma = 0.01", "gamma = [0.01]", 21, "gamma"),
    ("answer = 1", "answer = { i = 1 }", 16, "answer must be the index"),
    ('title = "A lesson"', "title = " + "[" * 5000 + "]" * 5000, 1, "nested more than 50 deep"),
])
def test_a_malformed_file_names_its_line(old, new, line, words):
    assert old in BASE
    found = problems(BASE.replace(old, new, 1))
    assert any(p.line == line and words in p.message for p in found), [str(p) for p in found]


def test_text_inside_a_note_is_not_taken_for_a_key():
    note_first = BASE.replace('page = "balance"\nparams = { gamma = 0.01 }\nnote = "The second step."',
                              'note = """\npage = "balance" is where this step goes\n"""\npage = "nope"')
    found = problems(note_first)
    assert [(p.line, "no page 'nope'" in p.message) for p in found] == [(23, True)], [str(p) for p in found]


def test_every_problem_of_a_file_is_reported():
    bad = BASE.replace("layer = 12", "layer = 93").replace('page = "balance"', 'page = "nope"')
    assert {p.line for p in problems(bad)} == {6, 20}


def test_too_many_steps_too_large_a_file_and_a_bad_name(tmp_path):
    step = '\n[[steps]]\npage = "overview"\nnote = "n"\n'
    many = BASE + step * (L.MAX_STEPS - 1)
    step_13 = BASE.count("\n") + 2 + 4 * (L.MAX_STEPS - 2)          # the header of the step one too many
    assert any(p.line == step_13 and f"at most {L.MAX_STEPS}" in p.message for p in problems(many))
    big = tmp_path / "big.toml"
    big.write_text(BASE + "#" * L.MAX_BYTES)
    with pytest.raises(L.LessonError) as e:
        L.load(big)
    assert e.value.problems[0].line == 1 and "bytes" in e.value.problems[0].message
    assert "file name" in problems(BASE, name="Bad Name")[0].message
    latin = tmp_path / "latin.toml"
    latin.write_bytes(BASE.encode() + "note2 = 'caf\xe9'".encode("latin-1"))
    with pytest.raises(L.LessonError) as e:
        L.load(latin)
    assert e.value.problems[0].line == BASE.count("\n") + 1 and "UTF-8" in e.value.problems[0].message


# ---- answers -------------------------------------------------------------------------------------------------

def test_checking_a_choice():
    q = L.Question("choice", "?", "because", options=("a", "b", "c"), answer=2)
    assert L.check(q, 2).right is True and L.check(q, 0).right is False
    assert L.check(q, None).right is None and L.check(q, 7).right is None and L.check(q, True).right is None


def test_checking_a_number():
    q = L.Question("number", "?", "because", answer=17.5, tolerance=0.05)
    for typed in ("17.5", " 17.5x", "17.55", "17.45", "1.75e1"):
        assert L.check(q, typed).right is True, typed
    for typed in ("17.6", "-17.5", "175"):
        assert L.check(q, typed).right is False, typed
    for typed in ("", "abc", "nan", "inf", "17.5.1"):
        assert L.check(q, typed).right is None, typed
    exact = L.Question("number", "?", "because", answer=1003)
    assert L.check(exact, "1,003").right is True and L.check(exact, "1004").right is False
    assert L.check(L.Question("number", "?", "b", answer=74.2, tolerance=0.1), "74.2 %").right is True


def test_checking_a_text():
    q = L.Question("text", "?", "because", answers=("does not hold", "fails"))
    assert L.check(q, "  Does   NOT hold ").right is True and L.check(q, "FAILS").right is True
    assert L.check(q, "holds").right is False and L.check(q, "   ").right is None


# ---- the link ------------------------------------------------------------------------------------------------

def test_the_link_of_every_step_reads_back_to_that_step_and_its_view():
    found = L.shipped()
    for name in SHIPPED:
        lesson = shipped(name)
        for n, step in enumerate(lesson.steps, 1):
            query = L.step_query(lesson, n)
            assert L.read_link(query[L.LESSON_PARAM], query[L.STEP_PARAM], found) == (lesson, n, [])
            controls = link_controls(step.view_path)
            for param, text in step.params:
                value, _ = controls[param].parse(query[param])
                assert link_text(controls[param], controls[param].normal(value)) == text
    assert L.step_url(shipped("sparse-experts"), 3) == "routing?k=8&lesson=sparse-experts&lesson_step=3"


def test_bad_lesson_links_get_notices():
    found = L.shipped()
    lesson, n, notes = L.read_link("<b>nope</b>", "2", found)
    assert lesson is None and "`<b>nope</b>`" in notes[0] and "sparse-experts" in notes[0]
    lesson, n, notes = L.read_link("Sparse-Experts", "99", found)
    assert lesson.name == "sparse-experts" and n == len(lesson.steps) and f"outside 1–{len(lesson.steps)}" in notes[0]
    lesson, n, notes = L.read_link("sparse-experts", "two", found)
    assert n == 1 and "not a whole number" in notes[0]
    assert L.read_link(None, "3", found)[0] is None


# ---- the panel (AppTest) -----------------------------------------------------------------------------------

def params(at) -> dict:
    return {k: at.query_params[k][0] if isinstance(at.query_params[k], list) else at.query_params[k]
            for k in at.query_params}


def panel_text(at) -> str:
    progress = " ".join(p.proto.text for p in at.sidebar.get("progress"))
    return progress + " " + " ".join(m.value for m in at.sidebar.markdown)


def test_a_link_opens_the_step_with_its_panel_and_its_view():
    lesson = shipped("sparse-experts")
    at = open_app_page("views/routing.py", L.step_query(lesson, 3), allow_errors=False)
    assert f"Step 3 of {len(lesson.steps)}" in panel_text(at)
    assert lesson.title in panel_text(at) and "This step sets **top-k to 8**" in panel_text(at)
    assert at.slider(key="routing_k").value == 8                  # the step's view
    assert params(at)["lesson"] == "sparse-experts" and params(at)["lesson_step"] == "3"
    # the lesson and step alone in a link: the step's view; a value of the view in the link: that value
    short = open_app_page("views/routing.py", {"lesson": "sparse-experts", "lesson_step": "3"})
    assert short.slider(key="routing_k").value == 8 and params(short)["k"] == "8"
    chosen = open_app_page("views/routing.py", {"lesson": "sparse-experts", "lesson_step": "3", "k": "4"})
    assert chosen.slider(key="routing_k").value == 4 and "Step 3 of" in panel_text(chosen)


def test_next_opens_the_next_steps_page_and_view_and_leave_ends_the_lesson():
    lesson = shipped("checking-claims")
    at = open_app_page("views/claims.py", L.step_query(lesson, 3))
    assert "does not hold" in " ".join(c.value for c in at.caption)       # the step's verdict filter
    at.sidebar.button(key="k3_lesson_next").click().run()
    assert not at.exception
    link = params(at)
    assert (link["claim"], link["lesson"], link["lesson_step"]) == ("6", "checking-claims", "4") and "verdict" not in link
    assert "Step 4 of 8" in panel_text(at) and any("claim 6 only" in i.value for i in at.info)
    at.sidebar.button(key="k3_lesson_next").click().run()
    assert [t.value for t in at.title] == ["Hybrid attention & memory"] and "Step 5 of 8" in panel_text(at)
    at.sidebar.button(key="k3_lesson_prev").click().run()
    assert "Step 4 of 8" in panel_text(at) and params(at)["claim"] == "6"
    at.sidebar.button(key="k3_lesson_leave").click().run()
    assert "lesson" not in params(at) and "lesson_step" not in params(at)
    assert not at.sidebar.get("progress")
    at.run()
    assert not at.sidebar.get("progress")


def test_a_step_opens_its_view_whole_not_merged_into_the_last_one():
    lesson = shipped("sparse-experts")
    at = open_app_page("views/routing.py", L.step_query(lesson, 3))
    at.slider(key="routing_layer").set_value(20).run()           # a fragment's rerun: AppTest holds only what it drew
    at.run()
    assert params(at)["layer"] == "20" and params(at)["k"] == "8"
    at.sidebar.button(key="k3_lesson_prev").click().run()         # step 2: the same page, no parameters
    assert at.slider(key="routing_layer").value == 46 and at.slider(key="routing_k").value == 16
    assert "layer" not in params(at) and "k" not in params(at) and params(at)["lesson_step"] == "2"
    at.slider(key="routing_layer").set_value(30).run()
    at.run()
    assert params(at)["layer"] == "30"
    at.sidebar.button(key="k3_lesson_open").click().run()         # "Open this step's view" puts it back
    assert at.slider(key="routing_layer").value == 46 and "layer" not in params(at)


def test_the_panel_checks_a_choice_and_a_number():
    lesson = shipped("sparse-experts")
    at = open_app_page("views/routing.py", L.step_query(lesson, 2))
    key = "k3_lesson_answer_sparse-experts_2"
    assert at.sidebar.radio(key=key).value is None
    at.sidebar.button(key=key + "_check").click().run()
    assert any("Pick one" in i.value for i in at.sidebar.info)
    at.sidebar.radio(key=key).set_value(0).run()
    at.sidebar.button(key=key + "_check").click().run()
    assert any(w.value.startswith("**Not quite.**") for w in at.sidebar.warning) and not at.sidebar.success
    at.sidebar.radio(key=key).set_value(lesson.steps[1].question.answer).run()
    assert not at.sidebar.warning                                  # a changed answer drops the old verdict
    at.sidebar.button(key=key + "_check").click().run()
    assert any(s.value.startswith("**Right.**") for s in at.sidebar.success)
    at.run()                                                       # the answer and verdict stay in the session
    assert at.sidebar.radio(key=key).value == lesson.steps[1].question.answer and at.sidebar.success

    at = open_app_page("views/routing.py", L.step_query(lesson, 3))
    key = "k3_lesson_answer_sparse-experts_3"
    at.sidebar.text_input(key=key).input("<b>112</b>").run()
    at.sidebar.button(key=key + "_check").click().run()
    assert any("not a number" in i.value for i in at.sidebar.info)
    assert "<b>" not in " ".join(m.value for m in at.sidebar.markdown)   # a typed answer is never drawn as Markdown
    at.sidebar.text_input(key=key).input("112x").run()
    at.sidebar.button(key=key + "_check").click().run()
    assert any(s.value.startswith("**Right.**") for s in at.sidebar.success)


def test_bad_lesson_links_get_the_apps_notice_and_no_panel():
    at = open_app_page("views/overview.py", {"lesson": "nope", "lesson_step": "1"}, allow_errors=False)
    assert any("lesson `nope` is not one of" in i.value for i in at.info)
    assert not at.sidebar.get("progress") and "lesson" not in params(at)
    at = open_app_page("views/overview.py", {"lesson": "attention-memory", "lesson_step": "70"})
    assert any("lesson step 70 is outside 1–7" in i.value for i in at.info)
    assert "Step 7 of 7" in panel_text(at) and params(at)["lesson_step"] == "7"


def test_a_file_with_problems_is_shown_nowhere(tmp_path, monkeypatch):
    (tmp_path / "good.toml").write_text(BASE)
    (tmp_path / "broken.toml").write_text(BASE.replace('title = "A lesson"', 'title = "Secret title"')
                                          .replace("layer = 12", "layer = 93"))
    monkeypatch.setattr(L, "LESSONS_DIR", tmp_path)
    at = open_app_page("views/lessons.py")
    shown = " ".join(s.value for s in at.subheader) + " ".join(m.value for m in at.markdown)
    assert "A lesson" in shown and "Secret title" not in shown
    warning = " ".join(w.value for w in at.warning)
    assert "lessons/broken.toml" in warning and "line 6" in warning
    at = open_app_page("views/overview.py", {"lesson": "broken", "lesson_step": "1"})
    assert any("has problems in its file" in i.value for i in at.info) and not at.sidebar.get("progress")


# ---- questions read from the student's view ----------------------------------------------------------------------

FROM_VIEW = BASE.replace('kind = "choice"', 'kind = "number"', 1).replace(
    'options = ["this", "that"]\n', '', 1).replace("answer = 1", 'from_view = "rerouted_layers"', 1)


def test_a_question_read_from_the_view_is_checked_against_each_students_own_value():
    q = L.parse(FROM_VIEW, "test").steps[0].question
    assert q.kind == "number" and q.from_view == "rerouted_layers" and q.answer is None
    assert L.check(q, "12", truth=12.0).right is True
    assert L.check(q, "12", truth=30.0).right is False               # another student's view: another answer
    assert L.check(q, "30", truth=30.0).right is True
    assert L.check(q, "12", truth=None).right is None                 # the view has not been opened
    assert "Open this step's view" in L.check(q, "12", truth=None).message


@pytest.mark.parametrize("old,new,words", [
    ('from_view = "rerouted_layers"', 'from_view = "layers_changed"', "not a value a page computes"),
    ('from_view = "rerouted_layers"', 'from_view = "rerouted_layers"\nanswer = 3', "not both"),
    ('page = "routing"', 'page = "balance"', "computed by the page routing"),
])
def test_a_bad_from_view_names_its_line(old, new, words):
    text = FROM_VIEW.replace(old, new, 1)
    if old.startswith("page"):
        text = text.replace("params = { layer = 12, k = 8 }", "", 1)
    found = problems(text)
    assert any(words in p.message for p in found), [str(p) for p in found]
    assert all(p.line > 1 for p in found)


def test_a_question_read_from_the_view_is_right_for_each_students_own_sentence():
    """Step 4 of sparse-experts: two sentences, two counts of re-routed layers, each read off the page's own caption
    and each right only for its own view."""
    import re
    lesson = shipped("sparse-experts")
    key = "k3_lesson_answer_sparse-experts_4"
    counts = []
    for text in ("The cat sat on the mat and looked at the birds.", "def mean(values): return sum(values) / len(values)"):
        at = open_app_page("views/routing.py", L.step_query(lesson, 4) | {"preset": "own", "text": text})
        caption = next(c.value for c in at.caption if "layers route it differently" in c.value)
        moved = int(re.search(r"(\d+) of (\d+) layers route it differently", caption).group(1))
        assert 1 <= moved <= 47                            # layer 46 always (8 of its 16 go); at most 46..92
        at.sidebar.text_input(key=key).input(str(moved)).run()
        at.sidebar.button(key=key + "_check").click().run()
        assert any(s.value.startswith("**Right.**") for s in at.sidebar.success), [c.value for c in at.sidebar.caption]
        at.sidebar.text_input(key=key).input(str(moved + 1)).run()
        at.sidebar.button(key=key + "_check").click().run()
        assert any(w.value.startswith("**Not quite.**") for w in at.sidebar.warning)
        counts.append(moved)
    assert len(counts) == 2
