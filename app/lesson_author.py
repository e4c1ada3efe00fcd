"""A lesson written in the app: a draft (title, summary, ordered steps) and the lesson file it makes. Pure (no
Streamlit); the editor is app/lesson_author_ui.py.

A draft is checked by writing its file and reading that back with app/lessons.py, so an author gets the same
problems, with the same lines, as a file in lessons/ would, and a draft that checks is exactly the file a
teacher downloads or starts a class with.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from app import lessons
from app.lessons import Lesson, LessonError, Problem

# The keys a question of each kind is written with, in the order a hand-written file has them.
_QUESTION_ORDER = {"choice": ("kind", "ask", "options", "answer", "explanation"),
                   "number": ("kind", "ask", "answer", "from_view", "tolerance", "explanation"),
                   "text": ("kind", "ask", "answers", "explanation")}
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_INT_TEXT = re.compile(r"^-?[1-9]\d{0,17}$|^0$")
_FLOAT_TEXT = re.compile(r"^-?\d+\.\d+$")
_INTS_TEXT = re.compile(r"^(?:0|[1-9]\d{0,8})(?:,(?:0|[1-9]\d{0,8}))+$")


@dataclass
class DraftStep:
    page: str                                           # url path (app/navigation.py)
    params: list[tuple[str, str]]                       # the page's link, as it was when the view was added
    note: str = ""                                      # Markdown
    question: dict | None = None                        # the keys of a [steps.question] table
    key: int = 0                                        # the editor's widgets follow the step when it moves


@dataclass
class Draft:
    title: str = ""
    summary: str = ""
    steps: list[DraftStep] = field(default_factory=list)


def from_lesson(lesson: Lesson) -> Draft:
    """A lesson as a draft (a copy of a shipped lesson to start from; the round trip the tests take)."""
    steps = []
    for i, s in enumerate(lesson.steps):
        q = s.question
        question = None
        if q is not None:
            question = {"kind": q.kind, "ask": q.ask, "explanation": q.explanation}
            if q.kind == "choice":
                question |= {"options": list(q.options), "answer": q.answer}
            elif q.kind == "number":
                question |= {"answer": q.answer, "from_view": q.from_view, "tolerance": q.tolerance}
            else:
                question |= {"answers": list(q.answers)}
        steps.append(DraftStep(s.page, list(s.params), s.note, question, key=i))
    return Draft(lesson.title, lesson.summary, steps)


# ---- writing TOML -----------------------------------------------------------------------------------------

def _whole(s: str) -> str:
    """Halves of a character (lone UTF-16 surrogates) as U+FFFD: no UTF-8 file can hold them."""
    return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _basic(s: str) -> str:
    """A TOML basic string ("..."): JSON's escapes are TOML's, except that TOML also wants DEL escaped."""
    out = json.dumps(_whole(str(s)), ensure_ascii=False).replace("\x7f", "\\u007f")
    # lessons._Lines takes an odd count of ''' on a key's line for the start of a multi-line string
    return out.replace("'", "\\u0027") if "'''" in out else out


def _multiline(s: str) -> str:
    """A TOML multi-line basic string, as hand-written notes are: the text on its own lines. A control character
    is written as an escape, so the file stays valid and lessons.parse names it."""
    body = []
    for ch in _whole(s):
        if ch == "\\":
            body.append("\\\\")
        elif ch in "\n\t":
            body.append(ch)
        elif ord(ch) < 0x20 or ch == "\x7f":
            body.append(f"\\u{ord(ch):04x}")
        else:
            body.append(ch)
    # two or more quotes in a row escaped: three would end the string
    text = re.sub(r'"{2,}', lambda m: '\\"' * len(m.group()), "".join(body))
    # a text without a final line break ends in a line-ending backslash, which TOML drops with the break after it
    return '"""\n' + text + ('"""' if text.endswith("\n") else '\\\n"""')


def _text(s) -> str:
    s = str(s)
    return _multiline(s) if "\n" in s else _basic(s)


def _value(v) -> str:
    """An author's value as written: numbers and true/false as TOML's own, anything else as a string (which
    lessons.parse then names when it must be a number)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("nan" if math.isnan(v) else "inf" if v > 0 else "-inf")
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return _text(v)


def _link_value(text: str) -> str:
    """A link value as the page's link text suggests (layer = 12, gamma = 0.01, bias = false, knock = [3, 7]),
    written only where lessons.parse reads it back as the same text; a string otherwise."""
    if _INT_TEXT.match(text) or (_FLOAT_TEXT.match(text) and repr(float(text)) == text):
        return text
    if text in ("on", "off"):
        return "true" if text == "on" else "false"
    if _INTS_TEXT.match(text):
        return "[" + ", ".join(text.split(",")) + "]"
    return _basic(text)


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else _basic(name)


def _render(draft: Draft, name: str) -> tuple[str, list[int]]:
    """The file's text and the line of each step's [[steps]] header."""
    lines = [f"# lessons/{name}.toml, written in K3 Explorer (docs/APP.md, \"Lessons\", describes the format)."
             if lessons.NAME.match(name) else "# A lesson written in K3 Explorer (docs/APP.md, \"Lessons\")."]
    lines += [f"title = {_basic(draft.title)}", f"summary = {_text(draft.summary)}"]
    starts = []

    def add(chunk: str) -> None:
        lines.extend(chunk.split("\n"))

    for step in draft.steps:
        lines.append("")
        starts.append(len(lines) + 1)
        lines += ["[[steps]]", f"page = {_basic(step.page)}"]
        if step.params:
            lines.append("params = { " + ", ".join(f"{_key(k)} = {_link_value(v)}" for k, v in step.params) + " }")
        add(f"note = {_text(step.note)}")
        q = step.question
        if q is None:
            continue
        lines += ["", "[steps.question]"]
        order = _QUESTION_ORDER.get(q.get("kind"), ("kind", "ask", "explanation"))
        for k in order:
            v = q.get(k)
            if v is None or (k == "tolerance" and v == 0) or (k == "answer" and q.get("from_view") is not None):
                continue
            add(f"{k} = {_value(v)}")
    return "\n".join(lines) + "\n", starts


def to_toml(draft: Draft, name: str) -> str:
    """The lesson file of the draft, in the format app/lessons.py reads."""
    return _render(draft, name)[0]


# ---- checking ---------------------------------------------------------------------------------------------

def shipped_names() -> set[str]:
    """The names of the files in lessons/ (a file with problems holds its name too)."""
    return {p.stem for p in lessons.LESSONS_DIR.glob("*.toml")}


def check(draft: Draft, name: str, taken: set[str] | None = None) -> Lesson | LessonError:
    """The draft's lesson, or every problem of its file with its line (lessons.parse's own); `taken`: names the
    draft may not have (the files of lessons/ when None), since a link to the lesson names it."""
    text = to_toml(draft, name)
    problems = []
    if name in (shipped_names() if taken is None else taken):
        problems.append(Problem(1, f"the name {name!r} is a lesson of lessons/ already; choose another name, so that "
                                   "a link names one lesson"))
    size = len(text.encode("utf-8"))
    if size > lessons.MAX_BYTES:
        problems.append(Problem(1, f"the file is {size:,} bytes; a lesson file holds at most {lessons.MAX_BYTES:,}"))
    try:
        lesson = lessons.parse(text, name)
    except LessonError as e:
        problems += e.problems
    if problems:
        return LessonError(name, sorted(problems, key=lambda p: p.line))
    return lesson


def by_step(draft: Draft, name: str, problems: list[Problem]) -> dict[int | None, list[Problem]]:
    """Problems by the step (0-based) whose lines they name; None: the lesson's own (title, summary, name)."""
    starts = _render(draft, name)[1]
    found: dict[int | None, list[Problem]] = {}
    for p in problems:
        i = max((n for n, at in enumerate(starts) if at <= p.line), default=None)
        found.setdefault(i, []).append(p)
    return found


def suggest_name(title: str) -> str:
    """A file name from a title ("Sparse experts in 15 minutes" -> "sparse-experts-in-15-minutes")."""
    words = re.findall(r"[a-z0-9]+", title.lower())
    name = ""
    for w in words:
        if len(name) + len(w) + 1 > 40:
            break
        name = f"{name}-{w}" if name else w
    return name or "my-lesson"
