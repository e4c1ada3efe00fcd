"""Writing a lesson in the app: the sidebar's "Add this view to a lesson" (every page but the Lessons and Classes
pages, drawn by streamlit_app.py) and the editor on the Lessons page.

The draft (app/lesson_author.py) lives in the session, so in this browser tab only: a reload or a closed tab loses
it, and the downloaded file is what keeps it; opening that file (or a copy of a lesson of lessons/) makes it the
draft again (app/lesson_draft.py). A step keeps the page and its link's values as they were when its view was
added, less the app's own parameters and the shared sentence and token (each student types their own); the editor
shows a box per link parameter of the page to change them. A draft is checked by lessons.parse on the file it
makes; one that checks can be previewed (the sidebar's lesson panel follows it, app/lessons_ui.keep_draft),
downloaded, or taught (app/classes_ui.start).

The editor's widgets are seeded from the draft when they have no state (the first draw, or after another page,
where Streamlit forgot them) and written back after each draw, so the draft always holds what is on the screen.
"""
from __future__ import annotations

import streamlit as st

from app import lessons, state
from app.lesson_author import (
    Draft,
    DraftStep,
    allowed,
    by_step,
    check,
    link_options,
    suggest_name,
    to_toml,
    view_controls,
    with_values,
)
from app.lesson_draft import K_AUTHOR, W, editing, file_name, forget_widgets, opener, plural, problem_list
from app.lessons import KINDS, VIEW_VALUES, Lesson
from app.navigation import PAGES
from app.page_controls import DeclarationError
from app.text import code_span, md_escape

K_ADDED = "_k3_author_added"        # the number of the step the sidebar's button just added
EDITOR = "views/lessons.py"
_TITLES = {p.url_path: p.title for p in PAGES if p.url_path not in ("lessons", "classes")}   # pages with a view
_KIND_NAMES = {"none": "No question", "choice": "Choice", "number": "Number", "text": "Text"}


def draft() -> Draft | None:
    found = st.session_state.get(K_AUTHOR)
    return None if found is None else found["draft"]


# ---- the sidebar's button ---------------------------------------------------------------------------------

def view_params() -> list[tuple[str, str]]:
    """The view's link values: the page's own, not the app's (lesson, presenter mode, class) nor the shared
    sentence and token, which each student types for themselves."""
    skip = state.APP_PARAMS | {c.param for c in state.carried()}
    return [(k, st.query_params[k]) for k in st.query_params.keys() if k not in skip]


def _add(here: str) -> None:
    author = editing()
    steps = author["draft"].steps
    if len(steps) >= lessons.MAX_STEPS:
        return
    steps.append(DraftStep(here, view_params(), key=author["next"]))
    author["next"] += 1
    st.session_state[K_ADDED] = len(steps)


def add_view_button(here: str) -> None:
    """The button that adds this page's view to the session's draft, and a link to the editor (inside `with
    st.sidebar`; nothing is read but the session and the link, so every page's run stays as fast)."""
    if here not in _TITLES:
        return
    found = draft()
    n = len(found.steps) if found else 0
    full = n >= lessons.MAX_STEPS
    st.button("Add this view to a lesson", key="k3_author_add", on_click=_add, args=(here,), type="tertiary",
              icon=":material/playlist_add:", disabled=full,
              help=f"a lesson has at most {lessons.MAX_STEPS} steps" if full else
              "a step of your lesson draft (Lessons page, Write a lesson) that opens this page with the view you "
              "set here. The sentence and token are left out: each student types their own.")
    added = st.session_state.pop(K_ADDED, None)
    if added is not None:
        st.toast(f"Step {added} added to your lesson draft", icon=":material/playlist_add_check:")
        st.caption(f"Step {added} added: {_TITLES[here]}{_params_text(found.steps[added - 1].params)}.")
    if n:
        st.page_link(EDITOR, label=f"Edit your lesson draft ({n} step{'' if n == 1 else 's'})",
                     icon=":material/edit_note:")


def _params_text(params) -> str:
    return (" with " + ", ".join(code_span(f"{k}={v}", 60) for k, v in params)) if params else ", its default view"


# ---- the editor's widgets -----------------------------------------------------------------------------------

def _bound(widget, key: str, value, *args, **kwargs):
    """A widget seeded from the draft's value when it has no state of its own."""
    if key not in st.session_state:
        st.session_state[key] = value
    return widget(*args, key=key, **kwargs)


def _lines(text: str) -> list[str]:
    return [line.strip() for line in str(text).splitlines() if line.strip()]


def _number_text(v) -> str:
    return "" if v is None else v if isinstance(v, str) else repr(v) if isinstance(v, float) else str(v)


def _read_number(text: str):
    """A typed answer: the number it is (an int when whole), or the text itself, which the check then names."""
    text = text.strip()
    if not text:
        return None
    v = lessons.read_number(text)
    if v is None:
        return text
    return int(v) if v.is_integer() and abs(v) < 2 ** 53 else v


def _question(step: DraftStep) -> None:
    k = f"{W}{step.key}_"
    q = step.question or {}
    kind = _bound(st.radio, k + "kind", q.get("kind", "none"), "Question", ["none", *KINDS],
                  format_func=_KIND_NAMES.get, horizontal=True,
                  help="asked under the note; Check in the sidebar tells the student right or wrong and shows your "
                       "explanation")
    if kind == "none":
        step.question = None
        return
    new = {"kind": kind}
    new["ask"] = _bound(st.text_area, k + "ask", q.get("ask", ""), "What to ask (Markdown)",
                        max_chars=lessons.MAX_ASK, height=68)
    if kind == "choice":
        raw = _bound(st.text_area, k + "options", "\n".join(q.get("options", [])),
                     f"Options, one a line ({lessons.MIN_OPTIONS} to {lessons.MAX_OPTIONS})", height=110,
                     max_chars=lessons.MAX_OPTIONS * (lessons.MAX_OPTION + 1))
        new["options"] = options = _lines(raw)
        if options:
            right = k + "answer"
            kept = st.session_state.get(right, q.get("answer"))
            st.session_state[right] = kept if isinstance(kept, int) and 0 <= kept < len(options) else 0
            new["answer"] = st.selectbox("The right option", list(range(len(options))), key=right,
                                         format_func=lambda i: f"{i + 1}. {options[i][:60]}")
    elif kind == "number":
        here = [name for name, v in VIEW_VALUES.items() if v.page == step.page]
        mode = "given"
        if here:
            mode = _bound(st.radio, k + "mode", "view" if q.get("from_view") else "given", "The right answer",
                          ["given", "view"], horizontal=True,
                          format_func={"given": "a number I give", "view": "read from each student's view"}.get,
                          help="read from the view: each student's answer is checked against the value their own "
                               "view computes, so students who set different views each have a right answer")
        if mode == "view":
            new["from_view"] = _bound(st.selectbox, k + "from_view",
                                      q.get("from_view") if q.get("from_view") in here else here[0],
                                      "The value", here, format_func=lambda n: VIEW_VALUES[n].says)
        else:
            typed = _bound(st.text_input, k + "number", _number_text(q.get("answer")), "The answer",
                           max_chars=40, placeholder="such as 24 or 3.8")
            new["answer"] = _read_number(typed)
            new["tolerance"] = _bound(st.number_input, k + "tolerance", float(q.get("tolerance") or 0.0),
                                      "Accepted difference", min_value=0.0, step=0.01, format="%g",
                                      help="0: exactly the answer; 0.05 accepts 3.75 to 3.85 for 3.8")
    else:
        raw = _bound(st.text_area, k + "answers", "\n".join(q.get("answers", [])),
                     "Accepted answers, one a line (case and extra spaces do not matter)", height=90,
                     max_chars=lessons.MAX_ANSWERS * (lessons.MAX_ANSWER + 1))
        new["answers"] = _lines(raw)
    new["explanation"] = _bound(st.text_area, k + "explanation", q.get("explanation", ""),
                                "Explanation, shown after Check, right or wrong (Markdown)",
                                max_chars=lessons.MAX_EXPLANATION, height=68)
    step.question = new


def _move(i: int, by: int) -> None:
    steps = editing()["draft"].steps
    steps[i], steps[i + by] = steps[i + by], steps[i]


def _remove(i: int) -> None:
    del editing()["draft"].steps[i]



def _discard() -> None:
    st.session_state.pop(K_AUTHOR, None)
    forget_widgets()



def _checking() -> None:
    editing()["checked"] = True          # a changed view value is checked at once, so a bad one is named on its step


def _values(step: DraftStep) -> None:
    """A box per link parameter of the step's page, seeded with the step's values; a choice from a fixed list is a
    select box, anything typed is checked by the lesson check as a file's value is (each box's help says what the
    page's declaration takes)."""
    try:
        controls = view_controls(step)
    except DeclarationError as e:
        st.caption(f":material/rule: The page's controls could not be read, so its values cannot be changed here: "
                   f"{md_escape(str(e), 200)}")
        return
    have = dict(step.params)
    names = [*controls, *(k for k in have if k not in controls)]      # one the page lacks: shown, to be emptied
    if not names:                                                     # a page whose view has no values of its own
        return
    typed = {}
    with st.expander("Change the view's values", icon=":material/tune:"):
        st.caption("Empty: the page's default. Each box's :material/help: says what the page takes; a value it does "
                   "not take is named on this step.")
        columns = st.columns(3)
        for n, name in enumerate(names):
            c, now, key = controls.get(name), have.get(name, ""), f"{W}{step.key}_v_{name}"
            options = link_options(c) if c is not None else None
            with columns[n % 3]:
                if c is None:
                    typed[name] = _bound(st.text_input, key, now, f"{md_escape(name, 40)} (not on this page)",
                                         on_change=_checking, help=f"the page {step.page} has no link parameter of "
                                                                   "this name: empty it")
                elif options is None:
                    typed[name] = _bound(st.text_input, key, now, f"{c.label} ({name})", placeholder="default",
                                         help=allowed(c), on_change=_checking)
                else:
                    default = "default" if c.default is None else f"{c.dump(c.default)} (default)"
                    typed[name] = _bound(st.selectbox, key, now, f"{c.label} ({name})",
                                         ["", *options, *([now] if now and now not in options else [])],
                                         format_func=lambda v, default=default: v or default, help=allowed(c),
                                         on_change=_checking)
    step.params = with_values(step.params, typed)


def _step(i: int, step: DraftStep, last: int):
    """Draw a step's fields; returns the place for its problems, which are known once every field is drawn."""
    with st.container(border=True, key=f"k3-author-step-{step.key}"):
        head, buttons = st.columns([3, 2], vertical_alignment="center")
        head.markdown(f"**Step {i + 1}** · {_TITLES.get(step.page, code_span(step.page))}")
        with buttons.container(horizontal=True, horizontal_alignment="right"):
            st.button("Up", key=f"{W}{step.key}_up", on_click=_move, args=(i, -1), disabled=i == 0,
                      icon=":material/arrow_upward:", type="tertiary")
            st.button("Down", key=f"{W}{step.key}_down", on_click=_move, args=(i, 1), disabled=i == last,
                      icon=":material/arrow_downward:", type="tertiary")
            st.button("Remove", key=f"{W}{step.key}_remove", on_click=_remove, args=(i,),
                      icon=":material/delete:", type="tertiary")
        opens = st.empty()                       # said once the boxes below have set the values
        _values(step)
        opens.caption("Opens the page" + _params_text(step.params) + ".")
        step.note = _bound(st.text_area, f"{W}{step.key}_note", step.note, "Note, shown in the sidebar (Markdown)",
                           max_chars=lessons.MAX_NOTE, height=110,
                           placeholder="what to look at on this view, and why",
                           help="Markdown: **bold**, *italic*, lists, `code`, [links](https://…). No HTML or "
                                "pictures.")
        _question(step)
        return st.empty()


def _go(lesson: Lesson, text: str, teach: bool) -> None:
    from app import classes_ui, lessons_ui
    from app.classes import StoreError
    lessons_ui.keep_draft(lesson, text)
    if not teach:
        lessons_ui.open_step(lesson, 1)
    try:
        classes_ui.start(lesson, text)
    except StoreError as e:
        st.warning(str(e), icon=":material/rule:")
    else:
        st.switch_page("views/classes.py")



def _verdict(d: Draft, name: str, result, slots) -> None:
    """The check's outcome under the buttons: every problem by the step it is in, and each step's in its box."""
    if isinstance(result, Lesson):
        asked = sum(s.question is not None for s in result.steps)
        st.success(f"The lesson checks: {plural(len(result.steps), 'step')}, {plural(asked, 'question')}. Its link: "
                   f"{code_span(lessons.step_url(result, 1), 300)} after the app's address.",
                   icon=":material/check_circle:")
        return
    problems = by_step(d, name, result.problems)
    parts = []
    for at, found in sorted(problems.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        if at is not None:
            slots[at].warning(problem_list(found), icon=":material/rule:")
        where = "The lesson" if at is None else f"Step {at + 1} ({_TITLES.get(d.steps[at].page, '?')})"
        parts.append(f"**{where}**\n\n{problem_list(found)}")
    st.warning(f"{plural(len(result.problems), 'problem')} to fix before a student can follow it; each names its "
               "line in the lesson file (Show the lesson file, below).\n\n" + "\n\n".join(parts), icon=":material/rule:")


# ---- the editor -----------------------------------------------------------------------------------------------

def editor(ready: dict[str, Lesson] | None = None) -> None:
    """The editor of the session's draft (the Lessons page's "Write a lesson"); `ready`: the lessons of lessons/
    that check, each of which can be opened as a copy."""
    author = editing()
    st.caption("Open any page, set its view, and press **Add this view to a lesson** in the sidebar: each view "
               "becomes a step here. Or open a lesson file to go on with it. The draft lives in this browser tab (a "
               "reload or a closed tab loses it); download the lesson file to keep it.")
    opener(author, ready or {})
    d: Draft = author["draft"]
    c1, c2 = st.columns([3, 2])
    d.title = _bound(c1.text_input, f"{W}title", d.title, "Title", max_chars=lessons.MAX_TITLE,
                     placeholder="such as Sparse experts in 15 minutes")
    suggested = suggest_name(d.title)
    author["name"] = _bound(c2.text_input, f"{W}name", author.get("name", ""), "File name", max_chars=40,
                            placeholder=suggested, help="lower-case letters, digits and hyphens: the lesson's name "
                                                        "in its link and its file in lessons/")
    name = file_name(author)
    d.summary = _bound(st.text_area, f"{W}summary", d.summary, "Summary (Markdown)", max_chars=lessons.MAX_SUMMARY,
                       height=68, placeholder="one or two sentences: what the class will see")
    if not d.steps:
        st.info("No steps yet: open a page, set its view, and press **Add this view to a lesson** in the sidebar.",
                icon=":material/playlist_add:")
        return

    slots = [_step(i, step, len(d.steps) - 1) for i, step in enumerate(list(d.steps))]

    text = to_toml(d, name)
    with st.container(horizontal=True):
        checking = st.button("Check", key=f"{W}check", icon=":material/rule:")
        preview = st.button("Preview as a student", key=f"{W}preview", icon=":material/visibility:", type="primary",
                            help="follow the lesson in the sidebar from its first step, as a student would")
        st.download_button("Download the lesson file", text.encode("utf-8"), file_name=f"{name}.toml",
                           mime="application/toml", key=f"{W}download", icon=":material/download:",
                           on_click="ignore", help="put it in lessons/ to ship it with the app; a file with "
                                                   "problems is shown nowhere until they are fixed")
        teach = st.button("Start a class with it", key=f"{W}teach", icon=":material/groups:",
                          help="a class code for your students, and the teacher's dashboard on the Classes page")
        with st.popover("Discard the draft", icon=":material/delete_forever:"):
            st.caption("Every step and note of this draft goes; a downloaded file stays.")
            st.button("Discard it", key=f"{W}discard", on_click=_discard, type="primary")
    if checking or preview or teach:
        author["checked"] = True
    result = check(d, name) if author["checked"] else None
    if isinstance(result, Lesson) and (preview or teach):
        _go(result, text, teach)
    if result is not None:
        _verdict(d, name, result, slots)
    with st.expander("Show the lesson file"):
        st.code(text, language="toml", line_numbers=True)
