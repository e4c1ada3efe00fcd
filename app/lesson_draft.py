"""The editor's draft in the session, and opening a lesson as the draft: a lesson file the teacher downloaded or
wrote (read and checked as a file of lessons/ is, app/lesson_author.read_file), or a copy of a lesson of lessons/.
A file with problems is not opened; a draft with steps no file holds is replaced only after the teacher says so.
app/lesson_author_ui.py draws the editor around it."""
from __future__ import annotations

import streamlit as st

from app import lessons
from app.lesson_author import Draft, free_name, from_lesson, read_file, shipped_names, suggest_name, to_toml
from app.lessons import Lesson, LessonError
from app.text import code_span, md_escape

# {"draft": Draft, "next": the next step's key, "checked": show the problems, "name": the file name typed,
#  "opened": the file of the draft as opened, "pending": (Draft, name, where from) waiting for Replace,
#  "problems": (file name, problems) of a file that was not opened, "said": what the last opening did}
K_AUTHOR = "_k3_author"
W = "k3_author_"                    # the prefix of the editor's widget keys (all dropped when the draft is)
_OPEN = f"{W}open_"                 # the opener's widgets, kept when the draft's are dropped
K_UPLOADS = "_k3_author_uploads"    # files read so far, in the file box's key: a new box, empty, after each


def editing() -> dict:
    return st.session_state.setdefault(K_AUTHOR, {"draft": Draft(), "next": 0, "checked": False})


def forget_widgets() -> None:
    """Drop the editor's widget state, so that the next draw seeds every widget from the draft held then."""
    for key in [k for k in st.session_state if str(k).startswith(W) and not str(k).startswith(_OPEN)]:
        del st.session_state[key]


def problem_list(problems) -> str:
    return "\n".join(f"- {md_escape(str(p), 300)}" for p in problems)


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# ---- opening a lesson as the draft ----------------------------------------------------------------------------

def file_name(author: dict) -> str:
    return author.get("name", "").strip() or suggest_name(author["draft"].title)


def _unsaved(author: dict) -> bool:
    """Whether the draft has steps that the file it was opened from does not hold (added or changed since; a
    download is not seen, as its button does not rerun the page)."""
    d = author["draft"]
    return bool(d.steps) and to_toml(d, file_name(author)) != author.get("opened")


def _replace(d: Draft, name: str, source: str) -> None:
    forget_widgets()
    st.session_state[K_AUTHOR] = {
        "draft": d, "next": len(d.steps), "checked": False, "name": name, "opened": to_toml(d, name),
        "said": f"Opened {source}: {plural(len(d.steps), 'step')}, as the lesson file {code_span(name + '.toml')}."}


def _offer(lesson: Lesson, source: str) -> None:
    """The lesson as the draft, or asked first (Replace) when the draft has steps no file holds."""
    author = editing()
    d, name = from_lesson(lesson), free_name(lesson.name, shipped_names())
    if _unsaved(author):
        author["pending"] = (d, name, source)
    else:
        _replace(d, name, source)


def _uploaded(key: str) -> None:
    author = editing()
    author.pop("problems", None)
    author.pop("pending", None)
    f = st.session_state.get(key)
    if f is None:                                   # the file taken out of the box
        return
    st.session_state[K_UPLOADS] = st.session_state.get(K_UPLOADS, 0) + 1
    result = read_file(f.getvalue(), f.name)
    if isinstance(result, LessonError):
        author["problems"] = (f.name, result.problems)
    else:
        _offer(result, f"the file {code_span(f.name, 60)}")


def _copy(ready: dict[str, Lesson]) -> None:
    author = editing()
    author.pop("problems", None)
    lesson = ready.get(st.session_state.get(_OPEN + "shipped"))
    if lesson is not None:
        _offer(lesson, f"a copy of {md_escape(lesson.title, lessons.MAX_TITLE)}")


def _confirm() -> None:
    pending = editing().pop("pending", None)
    if pending is not None:
        _replace(*pending)


def opener(author: dict, ready: dict[str, Lesson]) -> None:
    """Open a lesson file, or a copy of a lesson of lessons/, as the draft; a file with problems is not opened."""
    with st.expander("Open a lesson to edit it", expanded=not author["draft"].steps, icon=":material/folder_open:"):
        left, right = st.columns(2)
        key = f"{_OPEN}file_{st.session_state.get(K_UPLOADS, 0)}"
        left.file_uploader("A lesson file (.toml) you downloaded or wrote", type=["toml"], key=key,
                           on_change=_uploaded, args=(key,), max_upload_size=1,
                           help=f"read as a file of lessons/ is: at most {lessons.MAX_BYTES:,} bytes of UTF-8 text; a "
                                "file with a problem is not opened, and each problem names its line")
        if ready:
            right.selectbox("A lesson of this app", list(ready), key=_OPEN + "shipped",
                            format_func=lambda n: ready[n].title)
            right.button("Edit a copy", key=_OPEN + "copy", on_click=_copy, args=(ready,),
                         icon=":material/content_copy:", help="the copy gets a file name of its own, since a link "
                                                              "names one lesson")
    said = author.pop("said", None)
    if said:
        st.success(said, icon=":material/folder_open:")
    if "problems" in author:
        upload, problems = author["problems"]
        more = f"\n- … and {len(problems) - 20} more" if len(problems) > 20 else ""
        st.warning(f"{code_span(upload, 60)} was not opened ({plural(len(problems), 'problem')}, each with its line "
                   f"in the file); your draft is as it was.\n\n{problem_list(problems[:20])}{more}",
                   icon=":material/rule:")
    if "pending" in author:
        _, _, source = author["pending"]
        st.warning(f"Opening {source} replaces your draft ({plural(len(author['draft'].steps), 'step')}). To keep "
                   "it, download its file first.", icon=":material/warning:")
        with st.container(horizontal=True):
            st.button("Replace my draft", key=_OPEN + "replace", on_click=_confirm, type="primary")
            st.download_button("Download my draft", to_toml(author["draft"], file_name(author)).encode("utf-8"),
                               file_name=f"{file_name(author)}.toml", mime="application/toml",
                               key=_OPEN + "save", icon=":material/download:", on_click="ignore")
            st.button("Keep my draft", key=_OPEN + "keep", on_click=lambda: editing().pop("pending", None))
