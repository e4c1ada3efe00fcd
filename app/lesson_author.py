"""A lesson written in the app: a draft (title, summary, ordered steps) and the lesson file it makes. No Streamlit
calls (the pages' declarations are read through app/page_controls.py); the editor is app/lesson_author_ui.py.

A draft is checked by writing its file and reading that back with app/lessons.py, so an author gets the same
problems, with the same lines, as a file in lessons/ would, and a draft that checks is exactly the file a
teacher downloads or starts a class with. A file a teacher opens is checked the same way before it becomes a
draft, and a step's view values are the page's own link parameters (app/page_controls.py).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from app import controls, lessons
from app.lessons import Lesson, LessonError, Problem
from app.navigation import PAGES
from app.page_controls import link_controls

# The keys a question of each kind is written with, in the order a hand-written file has them.
_QUESTION_ORDER = {"choice": ("kind", "ask", "options", "answer", "explanation"),
                   "number": ("kind", "ask", "answer", "from_view", "tolerance", "explanation"),
                   "text": ("kind", "ask", "answers", "explanation")}
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_INT_TEXT = re.compile(r"^-?[1-9]\d{0,17}$|^0$")
_FLOAT_TEXT = re.compile(r"^-?\d+\.\d+$")
_INTS_TEXT = re.compile(r"^(?:0|[1-9]\d{0,8})(?:,(?:0|[1-9]\d{0,8}))+$")
_VIEWS = {p.url_path: p.path for p in PAGES}

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
    # lessons_file.Lines takes an odd count of ''' on a key's line for the start of a multi-line string
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


# ---- opening a file -----------------------------------------------------------------------------------------

def file_name(upload: str) -> str:
    """A lesson's name from the name of a file a teacher opens ("Sparse experts (1).toml" -> "sparse-experts-1",
    as a browser names a second download)."""
    stem = re.sub(r"\.toml$", "", upload.replace("\\", "/").rsplit("/", 1)[-1], flags=re.I)
    return stem if lessons.NAME.match(stem) else suggest_name(stem)


def read_file(data: bytes, upload: str) -> Lesson | LessonError:
    """The lesson of a file a teacher opens, checked as a file of lessons/ is (lessons.load: its size, UTF-8,
    lessons.parse), so a bad one gets every problem with its line and nothing of it is used."""
    name = file_name(upload)
    if len(data) > lessons.MAX_BYTES:
        return LessonError(name, [Problem(1, f"the file is {len(data):,} bytes; a lesson file holds at most "
                                             f"{lessons.MAX_BYTES:,}")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return LessonError(name, [Problem(data[:e.start].count(b"\n") + 1, "not UTF-8 text (save the file as "
                                                                           "UTF-8)")])
    text = text.removeprefix("\ufeff")          # the byte-order mark some Windows editors write first
    try:
        return lessons.parse(text, name)
    except LessonError as e:
        return e
    except Exception as e:                      # noqa: BLE001 - a file lessons.parse did not foresee: said, not raised
        return LessonError(name, [Problem(1, f"the file could not be checked ({type(e).__name__}: "
                                             f"{str(e)[:120]}); compare it with a lesson of lessons/")])


def free_name(name: str, taken: set[str]) -> str:
    """`name`, or `<name>-copy` (then -copy-2, …) when a lesson of lessons/ has it: a link names one lesson."""
    if name not in taken:
        return name
    stem = name[:30].rstrip("-")
    return next(n for n in (f"{stem}-copy", *(f"{stem}-copy-{i}" for i in range(2, 1000))) if n not in taken)


# ---- a step's view values -------------------------------------------------------------------------------------

def view_controls(step: DraftStep) -> dict[str, controls.Control]:
    """The link parameters a step may set: its page's controls (app/page_controls.py) in the order the page declares
    them, the shared sentence and token only where the step sets them (each student types their own). Raises
    page_controls.DeclarationError when the page's declaration cannot be read."""
    if step.page not in _VIEWS:
        return {}
    have = {k for k, _ in step.params}
    return {k: c for k, c in link_controls(_VIEWS[step.page]).items() if not c.shared or k in have}


def link_options(c: controls.Control) -> list[str] | None:
    """The link texts a control with a fixed list of values takes, its default left out (an empty value is the
    default); None for one whose value is typed (a number, a list, a text)."""
    if isinstance(c, controls.Flag):
        return [c.dump(not c.default)]
    if isinstance(c, controls.Choice):
        return [c.dump(o) for o in c.options if o != c.default]
    return None


def allowed(c: controls.Control) -> str:
    """What a control takes and what an empty value means, read from the page's declaration."""
    if isinstance(c, controls.Int):
        takes = f"a whole number from {c.lo} to {c.hi}"
    elif isinstance(c, controls.Index):
        takes = "a position: 0 for the first, then 1, 2 …"
    elif isinstance(c, controls.Flag):
        takes = "on or off"
    elif isinstance(c, controls.Choice):
        shown = [c.dump(o) for o in c.options]
        takes = "one of " + ", ".join(shown[:24]) + (f" … ({len(shown)} in all)" if len(shown) > 24 else "")
    elif isinstance(c, controls.Ints):
        takes = f"whole numbers from {c.lo} to {c.hi}, separated by commas (at most {c.most})"
    elif isinstance(c, controls.Choices):
        takes = "any of " + ", ".join(c.options) + ", separated by commas"
    elif isinstance(c, controls.Text):
        takes = f"a text of at most {c.most} characters"
    else:
        takes = "a value the page's link takes"
    default = None if c.default is None else c.dump(c.default)
    return f"{c.label}: {takes}. Empty: the page's default" + (f" ({default})." if default else ".")


def with_values(params: list[tuple[str, str]], typed: dict[str, str]) -> list[tuple[str, str]]:
    """A step's link values after the teacher set `typed` (parameter -> text; empty: the page's default): a value
    keeps its place, a new one follows in `typed`'s order (the page's). Text is trimmed, never corrected: the
    check names a value the page would not take, with its line."""
    have = {k for k, _ in params}
    out = [(k, typed[k].strip() if k in typed else v) for k, v in params]
    out += [(k, v.strip()) for k, v in typed.items() if k not in have]
    return [(k, v) for k, v in out if v]


def suggest_name(title: str) -> str:
    """A file name from a title ("Sparse experts in 15 minutes" -> "sparse-experts-in-15-minutes")."""
    words = re.findall(r"[a-z0-9]+", title.lower())
    name = ""
    for w in words:
        if len(name) + len(w) + 1 > 40:
            break
        name = f"{name}-{w}" if name else w
    return name or "my-lesson"
