"""Lessons: a title, a summary and ordered steps, each a page with its view (the link's parameters), a note and
optionally a question. Pure (no Streamlit): reading and checking a lesson file (each value's own check, with the
line it is written on, is app/lessons_file.py), the link of a step, the lesson and step a link names, and checking a
student's answer. The panel that follows a lesson is app/lessons_ui.py.

A lesson is a TOML file in lessons/ whose name (without .toml) is the lesson's name in the link:

    title = "Sparse experts in 15 minutes"
    summary = "One token through the router, then what changes when fewer experts are picked."

    [[steps]]
    page = "routing"                    # a url path of app/navigation.py
    params = { layer = 46, k = 8 }      # the page's link parameters, as its state.page(...) declares them
    note = "Markdown, shown in the sidebar while the step is open."

    [steps.question]                    # optional
    kind = "choice"                     # or "number" (answer, tolerance) or "text" (answers)
    ask = "Which ...?"
    options = ["...", "..."]
    answer = 1                          # the right option, counting from 0 as the app counts layers
    explanation = "Shown after Check, right or wrong."

A number question may be read from the student's own view: `from_view = "rerouted_layers"` instead of `answer`
names a value the step's page computes for what the student set (VIEW_VALUES), and each student's answer is
checked against their own view's value.

Every problem of a file is reported with its line; a file with any problem is shown nowhere.
"""
from __future__ import annotations

import functools
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

from app.controls import Int
from app.lessons_file import NESTED, Lines, Problem, check_params, text_problem, too_deep
from app.navigation import PAGES
from app.text import code_span

LESSONS_DIR = Path(__file__).resolve().parent.parent / "lessons"
LESSON_PARAM, STEP_PARAM = "lesson", "lesson_step"     # the link's names (app.state.APP_PARAMS)
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")         # a file name is a link value: short, plain

# Limits: the panel is a narrow sidebar, and a file is read whole by every process that lists it.
MAX_BYTES = 64_000
MAX_STEPS = 12
MAX_TITLE, MAX_SUMMARY = 80, 400
MAX_NOTE = 1_200
MAX_ASK, MAX_EXPLANATION = 300, 600
MIN_OPTIONS, MAX_OPTIONS, MAX_OPTION = 2, 6, 150
MAX_ANSWERS, MAX_ANSWER = 12, 80
MAX_TYPED = 200                                          # what a student's answer box takes

KINDS = ("choice", "number", "text")
_STEP_KEYS = ("page", "params", "note", "question")
_QUESTION_KEYS = {"choice": ("kind", "ask", "options", "answer", "explanation"),
                  "number": ("kind", "ask", "answer", "from_view", "tolerance", "explanation"),
                  "text": ("kind", "ask", "answers", "explanation")}
# a step shows a view; the Lessons and Classes pages have none
_PAGES = {p.url_path: p for p in PAGES if p.url_path not in ("lessons", "classes")}


@dataclass(frozen=True)
class ViewValue:
    page: str           # the url path of the page that computes it
    says: str           # what it counts, as the panel says it


# The values a page computes for what a student set, which a number question may be checked against
# (`from_view`). A page publishes its value on every run (app/lessons_ui.publish).
VIEW_VALUES = {
    "rerouted_layers": ViewValue("routing", "the layers, from the re-routed one on, that route the chosen token "
                                            "differently (What the re-routing changed)"),
    "prompt_tokens": ViewValue("routing", "the tokens of the sentence the Routing explorer runs"),
}


# ---- the lesson -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Question:
    kind: str                       # "choice" | "number" | "text"
    ask: str                        # Markdown
    explanation: str                # Markdown, shown after Check
    options: tuple[str, ...] = ()   # choice
    answer: float | int | None = None   # choice: the right option's index; number: the value
    tolerance: float = 0.0          # number
    from_view: str | None = None    # number: the VIEW_VALUES name each student's answer is checked against
    answers: tuple[str, ...] = ()   # text: accepted answers


@dataclass(frozen=True)
class Step:
    page: str                               # url path
    params: tuple[tuple[str, str], ...]     # the step's link, as the page writes it (defaults left out)
    note: str                               # Markdown
    question: Question | None
    line: int                               # of the step's [[steps]] header

    @property
    def view_path(self) -> str:
        return _PAGES[self.page].path

    @property
    def page_title(self) -> str:
        return _PAGES[self.page].title


@dataclass(frozen=True)
class Lesson:
    name: str
    title: str
    summary: str
    steps: tuple[Step, ...]


class LessonError(Exception):
    """A lesson file with problems; `problems` holds every one found, each with its line."""

    def __init__(self, name: str, problems: list[Problem]):
        super().__init__(f"{name}: " + "; ".join(map(str, problems)))
        self.name, self.problems = name, problems


# ---- checking a file ----------------------------------------------------------------------------------------

def _check_question(q, lines: Lines, i: int, page=None) -> tuple[Question | None, list[Problem]]:
    where = ("steps", i, "question")

    def problem(key: str | None, message: str) -> Problem:
        return Problem(lines.line(*where, *((key,) if key else ())), f"step {i + 1}, question: {message}")

    if not isinstance(q, dict):
        return None, [problem(None, "must be a table ([steps.question])")]
    kind = q.get("kind")
    if kind not in KINDS:
        return None, [problem("kind", f"kind {kind!r} is not one of {', '.join(KINDS)}")]
    problems = [problem(k, f"{k!r} does not belong to a {kind} question (it takes {', '.join(_QUESTION_KEYS[kind])})")
                for k in q if k not in _QUESTION_KEYS[kind]]
    for key, most in (("ask", MAX_ASK), ("explanation", MAX_EXPLANATION)):
        if key not in q:
            problems.append(problem(None, f"{key} is missing"))
        elif (why := text_problem(q[key], most)) is not None:
            problems.append(problem(key, f"{key} {why}"))
    fields: dict = {}
    answer = q.get("answer")
    if kind == "choice":
        options = q.get("options")
        if not isinstance(options, list) or not MIN_OPTIONS <= len(options) <= MAX_OPTIONS:
            problems.append(problem("options", f"options must be a list of {MIN_OPTIONS} to {MAX_OPTIONS} texts"))
            options = []
        for n, option in enumerate(options):
            if (why := text_problem(option, MAX_OPTION, one_line=True)) is not None:
                problems.append(problem("options", f"option {n} {why}"))
        if isinstance(answer, bool) or not isinstance(answer, int):
            problems.append(problem("answer" if "answer" in q else None,
                                    "answer must be the index of the right option (0 for the first)"))
        elif options and not 0 <= answer < len(options):
            problems.append(problem("answer", f"answer {answer} is not an option's index (0 to {len(options) - 1})"))
        fields = {"options": tuple(o for o in options if isinstance(o, str)), "answer": answer}
    elif kind == "number":
        tolerance = q.get("tolerance", 0.0)
        from_view = q.get("from_view")
        if from_view is not None:
            if "answer" in q:
                problems.append(problem("from_view", "a question read from the view has from_view or answer, not "
                                                     "both"))
            known = VIEW_VALUES.get(from_view) if isinstance(from_view, str) else None
            if known is None:
                problems.append(problem("from_view", f"from_view {from_view!r} is not a value a page computes; "
                                                     f"they are {', '.join(VIEW_VALUES)}"))
            elif page is not None and known.page != page:
                problems.append(problem("from_view", f"{from_view} is computed by the page {known.page}, not by "
                                                     f"this step's page {page}"))
        elif isinstance(answer, bool) or not isinstance(answer, (int, float)) or not math.isfinite(answer):
            problems.append(problem("answer" if "answer" in q else None, "answer must be a number (or from_view "
                                                                         "names the view's value)"))
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < math.inf:
            problems.append(problem("tolerance", "tolerance must be a number, 0 or more"))
            tolerance = 0.0
        fields = {"answer": answer, "tolerance": float(tolerance), "from_view": from_view}
    else:
        answers = q.get("answers")
        if not isinstance(answers, list) or not 1 <= len(answers) <= MAX_ANSWERS:
            problems.append(problem("answers" if "answers" in q else None,
                                    f"answers must be a list of 1 to {MAX_ANSWERS} accepted answers"))
            answers = []
        for n, text in enumerate(answers):
            if (why := text_problem(text, MAX_ANSWER, one_line=True)) is not None:
                problems.append(problem("answers", f"accepted answer {n} {why}"))
        fields = {"answers": tuple(a for a in answers if isinstance(a, str))}
    if problems:
        return None, problems
    return Question(kind, q["ask"], q["explanation"], **fields), []


def parse(text: str, name: str) -> Lesson:
    """A lesson from its file's text; raises LessonError with every problem, each with its line."""
    if not NAME.match(name):
        raise LessonError(name, [Problem(1, f"the file name {name!r}.toml must be lower-case letters, digits and "
                                            "hyphens (at most 40): it is the lesson's name in the link")])
    try:
        data = tomllib.loads(text)
    except RecursionError:                  # tomllib reads nested arrays and tables by recursion
        raise LessonError(name, [Problem(too_deep(text), f"values nested more than {NESTED} deep: no lesson's value "
                                                         "is")]) from None
    except tomllib.TOMLDecodeError as e:
        at = re.search(r"line (\d+)", str(e))
        line = int(at.group(1)) if at else max(1, text.count("\n") + 1)
        raise LessonError(name, [Problem(line, f"not valid TOML: {re.sub(r' [(]at .*[)]$', '', str(e))}")]) from None
    lines, problems = Lines(text), []
    for key in data:
        if key not in ("title", "summary", "steps"):
            problems.append(Problem(lines.line(key), f"unknown key {key!r} (a lesson has title, summary and steps)"))
    for key, most in (("title", MAX_TITLE), ("summary", MAX_SUMMARY)):
        if key not in data:
            problems.append(Problem(1, f"{key} is missing"))
        elif (why := text_problem(data[key], most, one_line=key == "title")) is not None:
            problems.append(Problem(lines.line(key), f"{key} {why}"))
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        problems.append(Problem(lines.line("steps"), "a lesson needs steps ([[steps]] tables)"))
        raw_steps = []
    elif len(raw_steps) > MAX_STEPS:
        problems.append(Problem(lines.line("steps", MAX_STEPS), f"{len(raw_steps)} steps; a lesson has at most "
                                                                  f"{MAX_STEPS}"))
    steps = []
    for i, raw in enumerate(raw_steps[:MAX_STEPS]):
        head = lines.line("steps", i)
        if not isinstance(raw, dict):
            problems.append(Problem(head, f"step {i + 1} must be a table ([[steps]])"))
            continue
        found = [Problem(lines.line("steps", i, k), f"step {i + 1}: unknown key {k!r} (a step has "
                                                    f"{', '.join(_STEP_KEYS)})") for k in raw if k not in _STEP_KEYS]
        page = raw.get("page")
        page = page if isinstance(page, str) else repr(page)      # a list or a table is no page (and not hashable)
        if "page" not in raw:
            found.append(Problem(head, f"step {i + 1}: page is missing"))
        elif page not in _PAGES:
            found.append(Problem(lines.line("steps", i, "page"), f"step {i + 1}: there is no page {page!r}; the pages "
                                                                  f"are {', '.join(_PAGES)}"))
        if "note" not in raw:
            found.append(Problem(head, f"step {i + 1}: note is missing"))
        elif (why := text_problem(raw["note"], MAX_NOTE)) is not None:
            found.append(Problem(lines.line("steps", i, "note"), f"step {i + 1}: note {why}"))
        link: tuple = ()
        if page in _PAGES and "params" in raw:
            link, bad = check_params(_PAGES[page], raw["params"], lines, i)
            found += bad
        question = None
        if "question" in raw:
            question, bad = _check_question(raw["question"], lines, i, page if page in _PAGES else None)
            found += bad
        problems += found
        if not found:
            steps.append(Step(page, link, raw["note"], question, head))
    if problems:
        raise LessonError(name, sorted(problems, key=lambda p: p.line))
    return Lesson(name, data["title"].strip(), data["summary"].strip(), tuple(steps))


def load(path: Path) -> Lesson:
    """A lesson from its file (size checked before reading); raises LessonError."""
    name = path.stem
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise LessonError(name, [Problem(1, f"the file is {size:,} bytes; a lesson file holds at most {MAX_BYTES:,}")])
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LessonError(name, [Problem(data[:e.start].count(b"\n") + 1, "not UTF-8 text")]) from None
    return parse(text, name)


@functools.lru_cache(maxsize=64)
def _load_cached(path: str, mtime_ns: int, size: int) -> Lesson | LessonError:
    try:
        return load(Path(path))
    except LessonError as e:
        return e


def shipped(folder: Path | None = None) -> dict[str, Lesson | LessonError]:
    """Every lesson file of the folder (lessons/) -> its lesson or its problems, in the sidebar's order of each
    lesson's first page (then by name). Read again when a file changes."""
    found = {}
    for path in sorted((folder or LESSONS_DIR).glob("*.toml")):
        st_ = path.stat()
        found[path.stem] = _load_cached(str(path), st_.st_mtime_ns, st_.st_size)
    order = {p.url_path: i for i, p in enumerate(PAGES)}

    def first_page(item) -> tuple:
        lesson = item[1]
        return (order.get(lesson.steps[0].page, len(order)) if isinstance(lesson, Lesson) else len(order), item[0])
    return dict(sorted(found.items(), key=first_page))


# ---- the link ---------------------------------------------------------------------------------------------

def step_query(lesson: Lesson, n: int) -> dict[str, str]:
    """The link parameters that open step n (1-based): the step's view and the lesson's place."""
    return dict(lesson.steps[n - 1].params) | {LESSON_PARAM: lesson.name, STEP_PARAM: str(n)}


def step_url(lesson: Lesson, n: int) -> str:
    """Step n's address after the app's own ("routing?k=8&lesson=sparse-experts&lesson_step=2")."""
    return f"{lesson.steps[n - 1].page}?{urlencode(step_query(lesson, n))}"


def read_link(raw_name: str | None, raw_step: str | None,
              lessons: dict[str, Lesson | LessonError]) -> tuple[Lesson | None, int, list[str]]:
    """The lesson and step (1-based) a link names, and the notices its values get (Markdown, the values quoted
    as typed): an unknown lesson or one whose file has problems is none; a step that is not a whole number is
    the first, one out of range the nearest."""
    if raw_name is None:
        return None, 0, ([f"The link's lesson step {code_span(raw_step)} names no lesson, so it was ignored."]
                         if raw_step is not None else [])
    found = lessons.get(str(raw_name).strip().lower())
    if found is None:
        known = ", ".join(name for name, v in lessons.items() if isinstance(v, Lesson)) or "none"
        return None, 0, [f"The link's lesson {code_span(raw_name)} is not one of the lessons here ({known}), so it "
                         "was ignored."]
    if isinstance(found, LessonError):
        return None, 0, [f"The link's lesson {code_span(raw_name)} has problems in its file, so it was not started; "
                         "the Lessons page lists them."]
    step = Int(STEP_PARAM, 1, "lesson step", lo=1, hi=len(found.steps))
    n, note = step.parse("1" if raw_step is None else raw_step)
    return found, 1 if n is None else n, [note] if note else []


# ---- answers ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Checked:
    right: bool | None              # None: the answer could not be read (nothing picked, not a number)
    message: str


_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?$", re.I)


def read_number(text: str) -> float | None:
    """A typed number: thousands commas, spaces and underscores allowed, and one trailing %, x or ×
    ("1,003", "17.5x", "74.2 %"), the way the pages write numbers. None if it is not one."""
    s = re.sub(r"[\s_,]", "", str(text)).rstrip("%x×X")
    if not _NUMBER.match(s):
        return None
    v = float(s)
    return v if math.isfinite(v) else None


def normal_text(text: str) -> str:
    """A short text answer as it is compared: trimmed, case folded, inner runs of spaces as one."""
    return " ".join(str(text).split()).casefold()


def check(question: Question, answer, truth: float | None = None) -> Checked:
    """Right or wrong for a student's answer: the option's index (choice) or the typed text (number, text). A
    question read from the view is checked against `truth`, the value the student's own view computed."""
    if question.kind == "choice":
        if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(question.options):
            return Checked(None, "Pick one of the options first.")
        return Checked(answer == question.answer, "")
    typed = str(answer or "").strip()[:MAX_TYPED]
    if not typed:
        return Checked(None, "Type an answer first.")
    if question.kind == "number":
        v = read_number(typed)
        if v is None:
            return Checked(None, "That is not a number: type digits, such as 12 or 0.5.")
        if question.from_view is not None and truth is None:
            return Checked(None, "Open this step's view first: the answer is read from what your view computes.")
        target = float(truth if question.from_view is not None else question.answer)
        # a float answer written with its shown digits compares equal within rounding of the last one
        return Checked(abs(v - target) <= question.tolerance + 1e-9 * max(1.0, abs(v)), "")
    return Checked(normal_text(typed) in {normal_text(a) for a in question.answers}, "")
