"""Lessons: the lessons in lessons/, each a short path of steps through the pages; a student starts one here and
follows it in the sidebar (app/lessons_ui.py)."""
import streamlit as st

from app import lesson_author_ui, lessons, state, ui
from app.lessons import Lesson
from app.text import code_span, md_escape

view = state.page()
ui.page_header(
    "Lessons",
    "A lesson is a short path through the pages, written for a class: each step opens a page with its view set, a "
    "note in the sidebar says what to look at, and most steps ask a question whose answer is on that view.",
    "start a lesson, answer the first step's question in the sidebar and press Next; the address bar keeps the "
    "lesson and the step, so a reload, or the link sent to a class, finds the same step.",
)

with st.spinner("Checking the lesson files against the pages they open…"):
    found = lessons.shipped()
ready = {name: lesson for name, lesson in found.items() if isinstance(lesson, Lesson)}
broken = {name: e for name, e in found.items() if not isinstance(e, Lesson)}

if not found:
    st.info("There are no lesson files in `lessons/`.", icon=":material/school:")
for name, lesson in ready.items():
    with st.container(border=True, key=f"lesson-{name}"):
        st.subheader(md_escape(lesson.title, lessons.MAX_TITLE), anchor=name)
        st.markdown(lesson.summary)
        asked = sum(step.question is not None for step in lesson.steps)
        st.caption(f"{len(lesson.steps)} steps, {asked} question{'' if asked == 1 else 's'}: "
                   + " → ".join(dict.fromkeys(step.page_title for step in lesson.steps)) + ".")
        st.page_link(lesson.steps[0].view_path, label="Start this lesson", icon=":material/play_arrow:",
                     query_params=lessons.step_query(lesson, 1))
        st.caption(f"To send it to a class: the app's address followed by {code_span(lessons.step_url(lesson, 1), 300)} "
                   f"(the file: {code_span(f'lessons/{name}.toml')}).")

if broken:
    st.subheader("Lesson files with problems")
    st.caption("A file with any problem is shown nowhere, neither here nor from a link: fix each line named below.")
    for name, e in broken.items():
        st.warning(f"{code_span(f'lessons/{name}.toml', 60)} is not shown:\n\n"
                   + "\n".join(f"- {md_escape(str(p), 300)}" for p in e.problems[:20])
                   + (f"\n- … and {len(e.problems) - 20} more" if len(e.problems) > 20 else ""),
                   icon=":material/rule:")

st.subheader("Write a lesson", anchor="write")
lesson_author_ui.editor(ready)

st.subheader("The lesson file format")
st.markdown(
    "A lesson is a TOML file in `lessons/`: a `title`, a `summary` and up to "
    f"{lessons.MAX_STEPS} `[[steps]]`, each with the `page` it opens (its address, such as `routing`), optional "
    "`params` (the page's link parameters, such as `{ layer = 46, k = 8 }`), a `note` in Markdown and an optional "
    "`[steps.question]` of kind `choice`, `number` or `text`. Every parameter is checked against the controls the "
    "page declares, and every problem is reported with its line. docs/APP.md describes the format.")
