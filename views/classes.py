"""Classes: a teacher starts a class with a lesson and leads it from a live dashboard; students join with the class
code and a nickname and follow the lesson in the sidebar. The store is app/classes.py, the session's place in a
class app/classes_ui.py, the dashboard's data app/classes_board.py."""
import time

import streamlit as st

from app import classes, classes_board, classes_ui, lessons, lessons_ui, state, ui
from app.charts import classes as charts
from app.classes import StoreError, Unavailable
from app.lessons import Lesson
from app.text import code_span, md_escape

view = state.page()
ui.page_header(
    "Classes",
    "Run a lesson with a class: you start a class and get a code; your students join with the code and a nickname "
    "(nothing else about them is asked or kept), follow the lesson's steps in the sidebar, and their answers "
    "appear here as they check them. Each student types their own sentence, so a question read from their view "
    "has a right answer of their own.",
    "start a class from a lesson, open the join link in a second browser window, join with a nickname, answer "
    "the first question, and watch the answer arrive here.",
)
REFRESH_S = 1.0          # an answer reaches the dashboard within about a second (bench/class_capacity.py)


def _lesson_of(info) -> Lesson | None:
    return classes_ui.class_lesson(info)


def join_and_start() -> None:
    ready = {name: v for name, v in lessons_ui.available().items() if isinstance(v, Lesson)}
    texts = {name: text for name, (_, text) in lessons_ui.drafts().items()}
    c_join, c_start = st.columns(2, gap="large")
    with c_join, st.container(border=True):
        st.subheader("Join a class")
        typed = classes.read_code(st.query_params.get(classes_ui.CLASS_PARAM)) or ""
        with st.form("k3_class_join", border=False):
            code = st.text_input("Class code", value=typed, max_chars=12, placeholder="six letters and digits")
            nickname = st.text_input("Your nickname", max_chars=classes.MAX_NICKNAME,
                                     help="what your teacher sees beside your answers; not your real name if you "
                                          "prefer")
            joined = st.form_submit_button("Join", type="primary", icon=":material/login:")
        if joined:
            try:
                info, _ = classes_ui.join(code, nickname)
            except StoreError as e:                         # Unavailable too: said the same way
                st.warning(str(e), icon=":material/rule:")
            else:
                lesson = _lesson_of(info)
                if lesson is None:
                    st.warning("The class's lesson is not on this server any more.", icon=":material/rule:")
                else:
                    lessons_ui.open_step(lesson, info.step)
    with c_start, st.container(border=True):
        st.subheader("Start a class")
        if not ready:
            st.info("There are no lessons to run (lessons/ holds none without problems).")
            return
        with st.form("k3_class_start", border=False):
            name = st.selectbox("Lesson", list(ready), format_func=lambda n: ready[n].title
                                + (" (written here)" if n in texts else ""))
            st.caption(f"A class's code works for {classes.CLASS_HOURS} hours. You get a teacher link that opens "
                       "this dashboard again; keep it to yourself.")
            started = st.form_submit_button("Start a class", icon=":material/play_arrow:")
        if started:
            try:
                classes_ui.start(ready[name], texts.get(name))
            except StoreError as e:
                st.warning(str(e), icon=":material/rule:")
            else:
                st.rerun()


def student_box(info, seat) -> None:
    lesson = _lesson_of(info)
    with st.container(border=True):
        st.subheader(f"You are in class {info.code}")
        st.markdown(f"Nickname: **{md_escape(seat.nickname, classes.MAX_NICKNAME)}**"
                    + (f" · lesson: {md_escape(lesson.title, lessons.MAX_TITLE)}" if lesson else ""))
        if lesson is not None:
            n = info.step if info.lead else min(max(seat.step, 1), len(lesson.steps))
            if st.button(f"Go to step {n}" + (" (your teacher leads there)" if info.lead else ""),
                         type="primary", icon=":material/arrow_forward:"):
                lessons_ui.open_step(lesson, n)
        mine = classes.store().my_answers(seat)
        if mine:
            st.markdown("**Your answers** (only you and your teacher see them)")
            ui.table(_mine_table(lesson, mine))
        st.button("Leave the class", on_click=classes_ui.leave, type="tertiary", icon=":material/logout:",
                  help="your answers stay with the class; this browser tab stops sending them")


def _mine_table(lesson, mine):
    import pandas as pd
    rows = []
    for a in mine:
        q = lesson.steps[a.step - 1].question if lesson and 0 < a.step <= len(lesson.steps) else None
        rows.append({"step": a.step, "answer": classes_board.shown_answer(q, a),
                     "right": "" if a.right is None else ("yes" if a.right else "no")})
    return pd.DataFrame(rows)


def _lead(info, step: int | None = None, on: bool | None = None) -> None:
    try:
        classes.store().lead(info.id, step=step, on=on)
    except Unavailable as e:
        st.session_state["_k3_class_error"] = str(e)


@st.fragment(run_every=REFRESH_S)
def dashboard() -> None:
    try:
        info = classes_ui.teacher_of_session()
        if info is None:
            st.info("This class has ended.")
            return
        lesson = _lesson_of(info)
        roster = classes.store().roster(info.id)
        answers = classes.store().class_answers(info.id)
    except Unavailable as e:
        st.warning(f"{e} The dashboard tries again every {REFRESH_S} s.", icon=":material/cloud_off:")
        return
    if lesson is None:
        st.warning(f"The class's lesson {code_span(info.lesson)} is not on this server (or its file has problems).")
        return
    now = time.time()
    steps = classes_board.board(lesson, roster, answers, now)
    here = sum(len(s.here) for s in steps)
    c_code, c_students, c_step = st.columns(3, gap="medium")
    c_code.metric("Class code", info.code, help="students type it on the Classes page")
    c_students.metric("Students", f"{len(roster)}", f"{here} active in the last {classes_board.ACTIVE_S:.0f} s",
                      delta_color="off", delta_arrow="off")
    c_step.metric("Leading", f"Step {info.step} of {info.steps}",
                  "students follow" if info.lead else "students go at their own pace", delta_color="off",
                  delta_arrow="off")
    with st.container(horizontal=True, vertical_alignment="center", key="k3-class-lead"):
        st.button("Previous step", icon=":material/chevron_left:", disabled=info.step <= 1, key="k3_class_prev",
                  on_click=_lead, args=(info, info.step - 1), help="lead the class one step back")
        st.button("Next step", icon=":material/chevron_right:", disabled=info.step >= info.steps,
                  key="k3_class_next", on_click=_lead, args=(info, info.step + 1), type="primary",
                  help="lead the class to the next step")
        st.session_state["k3_class_lead"] = info.lead           # the store's value, whichever replica wrote it
        st.toggle("Students follow my step", key="k3_class_lead",
                  on_change=lambda: _lead(info, on=st.session_state["k3_class_lead"]),
                  help=f"on: every student's view moves to the step you lead to (within {classes_ui.FOLLOW_S} s)")
    if err := st.session_state.pop("_k3_class_error", None):
        st.warning(err, icon=":material/cloud_off:")
    st.caption(f"{md_escape(lesson.title, lessons.MAX_TITLE)}. Students join at the app's address followed by "
               f"{code_span(f'classes?class={info.code}', 40)}, or type the code on the Classes page. This page's "
               "own address is your teacher link: it opens this dashboard again (keep it to yourself).")

    # the step shown follows the teacher's lead; picking another one shows that until the lead moves again
    if st.session_state.get("_k3_class_shown_lead") != info.step:
        st.session_state["_k3_class_shown_lead"] = st.session_state["k3_class_step"] = info.step
    shown = st.segmented_control("Step", list(range(1, len(steps) + 1)), key="k3_class_step",
                                 format_func=lambda n: f"{n}" + (" ✓" if steps[n - 1].answered else ""))
    board = steps[(shown or info.step) - 1]
    step_board(board)

    with st.expander(f"Every student ({len(roster)})"):
        if roster:
            import pandas as pd
            ui.table(pd.DataFrame({"nickname": [r[0] for r in roster], "step": [r[1] for r in roster],
                                   "last seen": [f"{max(0, now - r[2]):.0f} s ago" for r in roster]}))
        else:
            st.caption("No one has joined yet.")
    c_csv, c_end = st.columns(2)
    c_csv.download_button("Download every answer (CSV)", classes_board.answers_csv(lesson, answers),
                          file_name=f"class-{info.code}-{lesson.name}.csv", mime="text/csv",
                          icon=":material/download:", key="k3_class_csv")
    with c_end.popover("End the class", icon=":material/delete:"):
        st.markdown("Ending deletes the class, its students and all their answers. Download the CSV first if you "
                    "want to keep them.")
        if st.button("End and delete", type="primary", key="k3_class_end"):
            try:
                classes.store().end(info.id)
            except Unavailable as e:
                st.warning(str(e))
            else:
                classes_ui.leave()
                st.rerun(scope="app")


def step_board(b: classes_board.StepBoard) -> None:
    who = ", ".join(md_escape(n, classes.MAX_NICKNAME) for n in b.here[:40]) or "no one"
    st.markdown(f"**Step {b.n}: {b.page_title}.** On it now: {who}"
                + (f" and {len(b.here) - 40} more" if len(b.here) > 40 else "") + ".")
    q = b.question
    if q is None:
        st.caption("This step asks no question.")
        return
    st.markdown(f"**Question.** {q.ask}")
    st.caption(f"{b.answered} answered, {b.right} right." + (
        f" Read from each student's view: {lessons.VIEW_VALUES[q.from_view].says}; each student's own right "
        "answer is the ring." if q.from_view else ""))
    if not b.answered:
        return
    if q.kind == "number":
        spec = charts.number_counts_spec(b.table)
        table = b.table[["nickname", "typed", "truth", "right"]]
    else:
        spec = charts.counts_spec(b.table, q.kind)
        table = b.table
    if q.kind == "number" and q.from_view:
        st.vega_lite_chart(ui.arrow_spec(charts.answer_vs_view_spec(b.table)), width="stretch",
                           key=f"k3_class_views_{b.n}")
    ui.vega_chart(spec, f"Step {b.n}'s answers, live (every {REFRESH_S:g} s).",
                  alt=f"The class's answers to step {b.n}.",
                  key=f"k3_class_chart_{b.n}", table=lambda: table)


try:
    teaching = classes_ui.teacher_of_session()
    sitting = classes_ui.seat_of_session() if teaching is None else None
except Unavailable as e:
    st.warning(f"{e} Classes are off until it is back; every other page works as before.",
               icon=":material/cloud_off:")
else:
    if teaching is not None:
        dashboard()
        st.button("Leave the dashboard (the class goes on)", on_click=classes_ui.leave, type="tertiary",
                  icon=":material/logout:", help="open it again with your teacher link")
    elif sitting is not None:
        student_box(*sitting)
    else:
        join_and_start()
