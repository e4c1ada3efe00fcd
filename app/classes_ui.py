"""A session's place in a class: as a student (a seat) or as the teacher, kept in the session and in the link, so
a reload, or another replica after one stopped, finds it again; the class's line in the lesson's panel, which
follows the teacher's step; and the answers sent to the class's store (app/classes.py).

The link carries `class` (the code) with `seat` (a student's secret) or `teacher` (the teacher's secret). The
teacher's secret stays in the link of the Classes page only (a projected address bar elsewhere shows none); the
session keeps it for the other pages. "Link to this view" leaves all three out (app/sidebar.py)."""
from __future__ import annotations

import functools
import logging

import streamlit as st

from app import classes, lessons, state
from app.classes import ClassInfo, Seat, StoreError, Unavailable
from app.text import md_escape

CLASS_PARAM, SEAT_PARAM, TEACHER_PARAM = "class", "seat", "teacher"       # app.state.APP_PARAMS
K_MEMBER = "_k3_class"          # {"role": "student" | "teacher", "code", "secret", "nickname"}
K_SENT = "_k3_class_sent"       # {(lesson, step): True | error message} for the panel's caption
K_AT = "_k3_class_at"           # the (code, step) last written as the student's step
K_LEAD_TO = "_k3_class_lead_to" # the teacher's step the class line found the student away from
K_LESSON = "_k3_class_lesson"   # the student's class's lesson: {name: Lesson} (a lesson written in the app included)
K_AHEAD = "_k3_class_ahead"     # the (lesson, step, prompt) whose next step this session asked the server to prepare
_LOG = logging.getLogger(__name__)
FOLLOW_S = 3                    # how often a student's panel looks for the teacher's step


@functools.lru_cache(maxsize=64)
def _parsed(name: str, text: str) -> lessons.Lesson | None:
    try:
        return lessons.parse(text, name)
    except lessons.LessonError:
        return None


def class_lesson(info: ClassInfo) -> lessons.Lesson | None:
    """The class's lesson: the file of lessons/ it names, or the text it was started with when it was written in
    the app (read and checked like a file); None if it is neither any more."""
    if info.lesson_toml:
        return _parsed(info.lesson, info.lesson_toml)
    found = lessons.shipped().get(info.lesson)
    return found if isinstance(found, lessons.Lesson) else None


def session_lessons() -> dict[str, lessons.Lesson]:
    """The lesson of this session's class (for a student), by name: a lesson written in the app is no file here."""
    return st.session_state.get(K_LESSON, {})


def _remember_lesson(info: ClassInfo) -> None:
    lesson = class_lesson(info)
    st.session_state[K_LESSON] = {lesson.name: lesson} if lesson is not None else {}


def member() -> dict | None:
    return st.session_state.get(K_MEMBER)


def _drop(*params: str) -> None:
    for p in params:
        if p in st.query_params:
            del st.query_params[p]


def _write(params: dict[str, str]) -> None:
    for k, v in params.items():
        if st.query_params.get(k) != v:
            st.query_params[k] = v


def follow_link(here: str) -> None:
    """Read the link's class values this session did not write (a reload, a shared teacher link, another
    replica), with a notice for ones that open nothing, and write the session's back into the link."""
    qp = st.query_params
    code_raw, seat_raw, teacher_raw = qp.get(CLASS_PARAM), qp.get(SEAT_PARAM), qp.get(TEACHER_PARAM)
    me = member()
    if seat_raw is not None or teacher_raw is not None:
        secret_raw = seat_raw if seat_raw is not None else teacher_raw
        role = "student" if seat_raw is not None else "teacher"
        known = me is not None and (me["role"], me["code"], me["secret"]) == (role, code_raw, secret_raw)
        if not known:
            code, secret = classes.read_code(code_raw), classes.read_secret(secret_raw)
            found = None
            try:
                if code and secret:
                    found = (classes.store().seat(code, secret) if role == "student"
                             else classes.store().teacher(code, secret))
            except Unavailable as e:
                state.notice(f"{e} The link's class was not opened; the rest of the app works as before.")
                _drop(CLASS_PARAM, SEAT_PARAM, TEACHER_PARAM)
                return
            if found is None:
                state.notice("The link's class " + ("seat" if role == "student" else "teacher key") + " opens no "
                             "class (it ended, or the link was cut), so it was ignored.")
                _drop(SEAT_PARAM, TEACHER_PARAM)
                if code is None:
                    _drop(CLASS_PARAM)
            elif role == "student":
                info, seat = found
                st.session_state[K_MEMBER] = {"role": "student", "code": code, "secret": secret,
                                              "nickname": seat.nickname}
                _remember_lesson(info)
            else:
                st.session_state[K_MEMBER] = {"role": "teacher", "code": code, "secret": secret}
    me = member()
    if me is None:
        return
    if me["role"] == "student":
        _write({CLASS_PARAM: me["code"], SEAT_PARAM: me["secret"]})
    elif here == "classes":
        _write({CLASS_PARAM: me["code"], TEACHER_PARAM: me["secret"]})
    else:
        _drop(TEACHER_PARAM)
        if qp.get(CLASS_PARAM) == me["code"]:
            _drop(CLASS_PARAM)


def leave() -> None:
    for k in (K_MEMBER, K_AT, K_LESSON):
        st.session_state.pop(k, None)
    _drop(CLASS_PARAM, SEAT_PARAM, TEACHER_PARAM)


def seat_of_session() -> tuple[ClassInfo, Seat] | None:
    """The class and seat of this session's student (None if not a student, or the class ended). Raises
    Unavailable."""
    me = member()
    if me is None or me["role"] != "student":
        return None
    found = classes.store().seat(me["code"], me["secret"])
    if found is None:
        leave()
    return found


def teacher_of_session() -> ClassInfo | None:
    me = member()
    if me is None or me["role"] != "teacher":
        return None
    return classes.store().teacher(me["code"], me["secret"])


def join(code_raw, nickname_raw) -> tuple[ClassInfo, str]:
    """Join; the session becomes the student. Raises StoreError (and Unavailable) with what to say."""
    info, seat, secret = classes.store().join(code_raw, nickname_raw)
    st.session_state[K_MEMBER] = {"role": "student", "code": info.code, "secret": secret, "nickname": seat.nickname}
    _remember_lesson(info)
    return info, secret


def start(lesson: lessons.Lesson, text: str | None = None) -> tuple[ClassInfo, str]:
    """Start a class of the lesson; `text`: the file's text of a lesson written in the app (kept with the class)."""
    info, secret = classes.store().start(lesson.name, len(lesson.steps), text)
    st.session_state[K_MEMBER] = {"role": "teacher", "code": info.code, "secret": secret}
    return info, secret


def link_params() -> dict[str, str]:
    """The class values a page switch carries (st.switch_page starts a page with only the values it is given)."""
    me = member()
    if me is None or me["role"] != "student":
        return {}
    return {CLASS_PARAM: me["code"], SEAT_PARAM: me["secret"]}


# ---- in the lesson's panel --------------------------------------------------------------------------------------

def class_line(lesson: lessons.Lesson, n: int) -> None:
    """The student's class above the lesson's panel: code and nickname, and the teacher's step looked for every
    FOLLOW_S seconds (a timed fragment; lead_to() then names the step to open)."""
    me = member()
    if me is None or me["role"] != "student":
        return
    _follow(lesson.name, n)


@st.fragment(run_every=FOLLOW_S)
def _follow(name: str, n: int) -> None:
    me = member()
    if me is None:
        return
    try:
        found = seat_of_session()
    except Unavailable as e:
        st.caption(f":material/cloud_off: {e} Your answers stay in this browser tab.")
        return
    if found is None:
        st.caption("Your class has ended.")
        return
    info, seat = found
    if info.lesson != name:
        st.caption(f"Your class ({info.code}) follows another lesson; this one's answers stay here.")
        return
    if st.session_state.get(K_AT) != (info.code, n):
        try:
            classes.store().at_step(seat, n)
            st.session_state[K_AT] = (info.code, n)
        except Unavailable:
            pass
    prepare_next(class_lesson(info), n, f"{info.code}:{seat.id}")
    lead = f" · the teacher leads: step {info.step}" if info.lead else ""
    st.caption(f":material/groups: Class **{info.code}** as **{md_escape(seat.nickname, classes.MAX_NICKNAME)}**"
               f"{lead}")
    if info.lead and info.step != n and 1 <= info.step <= info.steps:
        # the step is opened by the whole app's next run (lessons_ui.sidebar_panel), not from this timed fragment:
        # a page switched from it kept the old step in the address bar
        st.session_state[K_LEAD_TO] = info.step
        st.rerun(scope="app")


def prepare_next(lesson: lessons.Lesson | None, n: int, who: str) -> None:
    """Ask the server to compute, while it is idle, what step n + 1 will show this student (their own sentence):
    when the teacher moves the class on, ~40 pages open at once, and each finds its model run and charts ready
    instead of computing them all in the same seconds. Steps on pages without a prepared view ask for nothing.
    Asked once per step, sentence and token (this runs every FOLLOW_S s)."""
    # imported here, not at the top: app.live imports torch, which the first page must not wait for
    from app import live, ui
    prompt = st.session_state.get(ui.K_PROMPT)          # the sentence the student's page read last
    if lesson is None or prompt is None or n >= len(lesson.steps) or lesson.steps[n].page != "routing":
        return
    raw = st.query_params.get(ui.TOKEN.param)
    token = int(raw) if raw is not None and raw.isdigit() and len(raw) < 7 else None
    # the token too: the step's charts follow it, and a student often clicks another token before the Next
    asked = (lesson.name, n, prompt.ids, token)
    if st.session_state.get(K_AHEAD) == asked:
        return
    st.session_state[K_AHEAD] = asked
    from app.routing_view import step_ahead
    try:
        live.prefetch_for(who, prompt.ids, step_ahead(prompt, token, dict(lesson.steps[n].params),
                                                      st.context.theme.type))
    except Exception:       # noqa: BLE001 - a prepared view is a saving, never a reason for the student's page to fail
        _LOG.exception("preparing the next lesson step failed")


def lead_to() -> int | None:
    """The step the teacher leads to, when the class line found the student elsewhere (taken once)."""
    return st.session_state.pop(K_LEAD_TO, None)


def send(lesson: lessons.Lesson, n: int, answer, checked: lessons.Checked, truth: float | None) -> None:
    """Send the student's checked answer to the class (if the session's class runs this lesson)."""
    me = member()
    if me is None or me["role"] != "student":
        return
    try:
        found = seat_of_session()
        if found is None or found[0].lesson != lesson.name:
            return
        text = "" if answer is None else str(answer)
        classes.store().answer(found[1], n, text, checked.right, truth)
        st.session_state.setdefault(K_SENT, {})[(lesson.name, n)] = True
    except (Unavailable, StoreError) as e:
        st.session_state.setdefault(K_SENT, {})[(lesson.name, n)] = str(e)


def sent_caption(lesson: lessons.Lesson, n: int) -> None:
    sent = st.session_state.get(K_SENT, {}).get((lesson.name, n))
    if sent is True:
        st.caption(":material/cloud_done: Sent to your class.")
    elif sent:
        st.caption(f":material/cloud_off: Not sent: {sent} Your answer stays in this browser tab.")
