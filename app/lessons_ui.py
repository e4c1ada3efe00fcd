"""The lesson a student follows: its place in the session and the link, and the panel every page shows in the
sidebar while it runs (streamlit_app.py calls `sidebar_panel` before the page runs).

The link carries the lesson and the step (`lesson=sparse-experts&lesson_step=2`, app.state.APP_PARAMS), so a
reload or a shared link finds the step again; the session keeps them too, and puts them back into the link of a
page opened from the sidebar's navigation (which starts a page with an empty link). Previous, Next and "Open this
step's view" switch to the step's page with the step's link (`st.switch_page` with its query parameters; the
Lessons page's Start is a page link, as the guided tour's are), and the page's view is reset first
(`state.forget_page`), so what the step does not set is the page's default, not what the student left there. The
student's answers stay in their session. The lesson's text is the author's Markdown, drawn without HTML
(app/lessons.py refuses files that hold any); what a student types is never drawn as Markdown.
"""
from __future__ import annotations

import streamlit as st

from app import classes_ui, lessons, state
from app.lessons import LESSON_PARAM, STEP_PARAM, Lesson
from app.text import clean_text, md_escape

K_RUNNING = "_k3_lesson"                # {"name", "step" (1-based), "link": the (lesson, step) it last wrote}
K_ANSWERS = "_k3_lesson_answers"        # {(lesson, step): {"answer": ..., "checked": lessons.Checked}}
K_LAST_PAGE = "_k3_lesson_last_page"    # the page of the previous run
K_OPEN = "_k3_lesson_open"              # (lesson, step) that Previous, Next or "Open this step's view" opens next run
K_VIEW_VALUES = "_k3_view_values"       # {name: value} a page computed on its last run (lessons.VIEW_VALUES)
K_DRAFTS = "_k3_lesson_drafts"          # {name: (Lesson, its file's text)}: lessons written in the app this session
PANEL_KEY = "k3-lesson"
# Static style of ours: a long word or address in a note wraps inside the sidebar instead of widening it.
PANEL_CSS = """
<style id="k3-lesson">
[class*="st-key-k3-lesson"] [data-testid="stMarkdownContainer"] { overflow-wrap: anywhere; }
</style>
"""


def in_link() -> bool:
    """Whether this run's link names a lesson or a step."""
    return LESSON_PARAM in st.query_params or STEP_PARAM in st.query_params


def _write_link(name: str, n: int) -> None:
    qp = st.query_params
    if qp.get(LESSON_PARAM) != name:
        qp[LESSON_PARAM] = name
    if qp.get(STEP_PARAM) != str(n):
        qp[STEP_PARAM] = str(n)


def _drop_link() -> None:
    for p in (LESSON_PARAM, STEP_PARAM):
        if p in st.query_params:
            del st.query_params[p]


def drafts() -> dict[str, tuple[Lesson, str]]:
    """The lessons written in the app in this session, with their files' text."""
    return st.session_state.get(K_DRAFTS, {})


def keep_draft(lesson: Lesson, text: str) -> None:
    """Keep a lesson written in the app (checked by lessons.parse) so that it can be followed and taught."""
    st.session_state.setdefault(K_DRAFTS, {})[lesson.name] = (lesson, text)


def available() -> dict[str, Lesson | lessons.LessonError]:
    """Every lesson this session can follow: the files of lessons/, its own drafts, and its class's lesson (a
    student's class may run a lesson written in the app, which is no file here); later ones win a name."""
    return lessons.shipped() | {name: lesson for name, (lesson, _) in drafts().items()} | classes_ui.session_lessons()


def _running() -> tuple[Lesson, int] | None:
    rec = st.session_state.get(K_RUNNING)
    lesson = available().get(rec["name"]) if rec else None
    if not isinstance(lesson, Lesson):                  # its file changed under a running lesson and has problems
        st.session_state.pop(K_RUNNING, None)
        return None
    return lesson, min(rec["step"], len(lesson.steps))


def follow_link(here: str) -> tuple[Lesson, int] | None:
    """The lesson and step (1-based) this run shows, from the link or the session; link values this session did
    not write (a shared link, a reload, Previous or Next) are read, with the app's usual notices for bad ones."""
    ss = st.session_state
    came_from, ss[K_LAST_PAGE] = ss.get(K_LAST_PAGE), here
    opening = ss.pop(K_OPEN, None)
    raw = opening or (st.query_params.get(LESSON_PARAM), st.query_params.get(STEP_PARAM))
    rec = ss.get(K_RUNNING)
    if raw == (None, None) or (rec is not None and raw == rec["link"] and came_from == here and not opening):
        running = _running()
        if running is not None:
            _write_link(running[0].name, running[1])
        return running
    lesson, n, notes = lessons.read_link(*raw, available())
    for note in notes:
        state.notice(note)
    if lesson is None:                                  # a bad link does not end the lesson the session follows
        _drop_link()
        running = _running()
        if running is not None:
            _write_link(running[0].name, running[1])
        return running
    ss[K_RUNNING] = {"name": lesson.name, "step": n, "link": (lesson.name, str(n))}
    if opening:
        # A switch to the page shown leaves the address bar as it was, although the server takes the switch's
        # values as the link's: writing them again unchanged sends nothing, so they are written anew.
        _drop_link()
    _write_link(lesson.name, n)                         # a clamped step: the address bar shows the one used
    step = lesson.steps[n - 1]
    if step.page == here:
        if not set(st.query_params.keys()) & _own_params(step):
            # a link that names the step but no value of the page's view ("routing?lesson=…&lesson_step=3"): the
            # step's view; a link with some (a reload, a view a student sent) is a view someone chose
            for name, text in step.params:
                st.query_params[name] = text
        state.forget_page(here)                         # the step's view whole, not merged into the last one
    return lesson, n


def _own_params(step: lessons.Step) -> set[str]:
    """The link parameters of the step's page, less the shared prompt and token every page carries."""
    from app.page_controls import link_controls
    return set(link_controls(step.view_path)) - {c.param for c in state.carried()}


def open_step(lesson: Lesson, n: int) -> None:
    """Open step n's page with the step's view (also when step n is the step shown: its view is put back)."""
    # The whole link goes with the switch: the step's, the class's, and the shared prompt and token as the address
    # holds them. A value the new page's run writes itself can arrive before the browser has taken the switch's
    # address, which then replaced it (the student's sentence or the step fell out of the link).
    carried = {c.param: st.query_params[c.param] for c in state.carried() if c.param in st.query_params}
    st.session_state[K_OPEN] = (lesson.name, str(n))
    st.switch_page(lesson.steps[n - 1].view_path,
                   query_params=carried | lessons.step_query(lesson, n) | classes_ui.link_params())


def publish(name: str, value: float | None) -> None:
    """A page's value that a question may be read from (lessons.VIEW_VALUES), as the page computed it this run."""
    assert name in lessons.VIEW_VALUES, name
    st.session_state.setdefault(K_VIEW_VALUES, {})[name] = None if value is None else float(value)


def view_value(name: str | None) -> float | None:
    return None if name is None else st.session_state.get(K_VIEW_VALUES, {}).get(name)


def in_lesson() -> bool:
    """Whether this run follows a lesson, or its link asks for one (cheap: nothing is read or checked)."""
    return K_RUNNING in st.session_state or LESSON_PARAM in st.query_params


def leave() -> None:
    st.session_state.pop(K_RUNNING, None)
    _drop_link()


def _answered(name: str, n: int, key: str, kind: str) -> None:
    """The answer widget changed: keep the answer (typed text cleaned as any box's is); an old verdict goes."""
    value = st.session_state.get(key)
    if kind != "choice":
        value = clean_text(value or "", lessons.MAX_TYPED)[0]
    st.session_state.setdefault(K_ANSWERS, {})[(name, n)] = {"answer": value}


def _check(lesson: Lesson, n: int, question: lessons.Question) -> None:
    mine = st.session_state.setdefault(K_ANSWERS, {}).setdefault((lesson.name, n), {})
    truth = view_value(question.from_view)
    mine["checked"] = checked = lessons.check(question, mine.get("answer"), truth)
    mine["truth"] = truth
    if checked.right is not None:
        classes_ui.send(lesson, n, mine.get("answer"), checked, truth)


def _question(lesson: Lesson, n: int, q: lessons.Question) -> None:
    key = f"k3_lesson_answer_{lesson.name}_{n}"
    mine = st.session_state.setdefault(K_ANSWERS, {}).get((lesson.name, n), {})
    st.markdown(f"**Question.** {q.ask}")
    # seeded from the session's copy before every draw: Streamlit forgets a widget's value when a run does not
    # draw it (another step), and the student's answer must outlive that
    st.session_state[key] = mine.get("answer", None if q.kind == "choice" else "")
    if q.kind == "choice":
        st.radio("Your answer", list(range(len(q.options))), format_func=q.options.__getitem__, key=key,
                 on_change=_answered, args=(lesson.name, n, key, q.kind))
    else:
        st.text_input("Your answer", key=key, max_chars=lessons.MAX_TYPED,
                      placeholder="a number" if q.kind == "number" else "a word or two",
                      on_change=_answered, args=(lesson.name, n, key, q.kind))
    st.button("Check", key=f"{key}_check", on_click=_check, args=(lesson, n, q), icon=":material/done:")
    checked = mine.get("checked")
    if checked is None:
        return
    if q.from_view is not None and checked.right is not None:
        st.caption(f"Your view computed {mine['truth']:g}: {lessons.VIEW_VALUES[q.from_view].says}.")
    classes_ui.sent_caption(lesson, n)
    if checked.right is None:
        st.info(checked.message, icon=":material/help:")
    elif checked.right:
        st.success(f"**Right.** {q.explanation}", icon=":material/check_circle:")
    else:
        st.warning(f"**Not quite.** {q.explanation}", icon=":material/cancel:")


@st.fragment
def _panel(name: str, n: int, here: str) -> None:
    """The panel; a fragment, so that answering and checking rerun it alone, not the page."""
    running = _running()
    if running is None or running[0].name != name:      # left the lesson (the button below)
        return
    lesson = running[0]
    step, last = lesson.steps[n - 1], len(lesson.steps)
    with st.container(border=True, key=PANEL_KEY):
        st.html(PANEL_CSS)
        st.markdown(f":material/school: **{md_escape(lesson.title, lessons.MAX_TITLE)}**")
        st.progress(n / last, text=f"Step {n} of {last}")
        if step.page != here:
            st.caption(f"This step is on the page {step.page_title}.")
        if st.button(f"Open this step's view{'' if step.page == here else ': ' + step.page_title}",
                     key="k3_lesson_open", type="tertiary", icon=":material/open_in_new:",
                     help="the step's page with the view the lesson set for it (what you changed there is undone)"):
            open_step(lesson, n)
        with st.container(key=f"{PANEL_KEY}-note"):
            st.markdown(step.note)
        if step.question is not None:
            _question(lesson, n, step.question)
        # buttons that switch the page, not page links: a page link to the page shown reruns it without updating
        # the address bar, which then named the step before, and a reload went back to it
        with st.container(horizontal=True):
            if st.button("Previous", key="k3_lesson_prev", icon=":material/arrow_back:", disabled=n == 1):
                open_step(lesson, n - 1)
            if st.button("Next", key="k3_lesson_next", icon=":material/arrow_forward:", disabled=n == last,
                         type="primary"):
                open_step(lesson, n + 1)
        if n == last:
            st.caption("The last step. The Lessons page lists the other lessons.")
        st.button("Leave the lesson", key="k3_lesson_leave", on_click=leave, type="tertiary",
                  icon=":material/logout:")


def sidebar_panel(here: str) -> None:
    """Follow the link's lesson and draw its panel (inside `with st.sidebar`, before the page runs, so that a step
    that opens its page resets the page's view before the page reads its link)."""
    running = follow_link(here)
    if running is not None:
        lesson, n = running
        led = classes_ui.lead_to()
        if led is not None and led != n:
            open_step(lesson, led)
        # the class's line is a fragment of its own, beside the panel's, not inside it: a timed fragment nested in
        # one that reruns (Check) stopped rerunning now and then, and the student no longer followed the teacher
        classes_ui.class_line(lesson, n)
        _panel(lesson.name, n, here)
