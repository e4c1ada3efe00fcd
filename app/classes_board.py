"""The teacher's dashboard of a class, as data: per step, who is there and the answers aggregated (counts for a
choice, a histogram beside each student's own truth for a number, the common answers for a text), and the CSV of
every answer. Pure (no Streamlit); views/classes.py draws it, app/charts/classes.py builds its charts."""
from __future__ import annotations

import csv
import io
from collections import Counter
from dataclasses import dataclass

import pandas as pd

from app import lessons
from app.classes import Answer

ACTIVE_S = 120.0        # a student seen within this many seconds counts as here


@dataclass(frozen=True)
class StepBoard:
    n: int                              # 1-based
    page_title: str
    question: lessons.Question | None
    here: tuple[str, ...]               # nicknames of the students on this step now
    answered: int
    right: int
    table: pd.DataFrame                 # what the chart draws: choice/text: answer, count, right; number: see below


def _choice_table(q: lessons.Question, rows: list[Answer]) -> pd.DataFrame:
    counts = Counter(r.answer for r in rows)
    return pd.DataFrame({"answer": list(q.options),
                         "count": [counts.get(str(i), 0) for i in range(len(q.options))],
                         "right": [i == q.answer for i in range(len(q.options))]})


def _number_table(rows: list[Answer]) -> pd.DataFrame:
    """One row per student: the typed answer read as a number (NaN if it is none), the student's truth (the value
    their own view computed, or the lesson's answer) and right or wrong."""
    return pd.DataFrame({"nickname": [r.nickname for r in rows],
                         "answer": [lessons.read_number(r.answer) for r in rows],
                         "typed": [r.answer for r in rows],
                         "truth": [r.truth for r in rows],
                         "right": [r.right for r in rows]}, columns=["nickname", "answer", "typed", "truth", "right"])


def _text_table(q: lessons.Question, rows: list[Answer]) -> pd.DataFrame:
    counts = Counter(lessons.normal_text(r.answer) for r in rows if r.answer.strip())
    accepted = {lessons.normal_text(a) for a in q.answers}
    common = counts.most_common(12)
    return pd.DataFrame({"answer": [a for a, _ in common], "count": [c for _, c in common],
                         "right": [a in accepted for a, _ in common]}, columns=["answer", "count", "right"])


def board(lesson: lessons.Lesson, roster: list[tuple[str, int, float]], answers: list[Answer],
          now: float) -> list[StepBoard]:
    """Every step of the lesson with who is on it (seen within ACTIVE_S) and its answers aggregated."""
    by_step: dict[int, list[Answer]] = {}
    for a in answers:
        by_step.setdefault(a.step, []).append(a)
    out = []
    for n, step in enumerate(lesson.steps, 1):
        rows = by_step.get(n, [])
        q = step.question
        if q is None:
            table = pd.DataFrame()
        elif q.kind == "choice":
            table = _choice_table(q, rows)
        elif q.kind == "number":
            table = _number_table(rows)
        else:
            table = _text_table(q, rows)
        here = tuple(name for name, at, seen in roster if at == n and now - seen <= ACTIVE_S)
        out.append(StepBoard(n, step.page_title, q, here, len(rows), sum(r.right is True for r in rows), table))
    return out


def shown_answer(q: lessons.Question | None, a: Answer) -> str:
    """An answer as the teacher reads it: a choice's option text, else what was typed."""
    if q is not None and q.kind == "choice" and a.answer.isdigit() and int(a.answer) < len(q.options):
        return q.options[int(a.answer)]
    return a.answer


def _cell(value) -> str:
    """A CSV cell a spreadsheet shows as text: one that starts with = + - @ (or a tab or CR) would be read as a
    formula, so it gets a leading apostrophe."""
    s = "" if value is None else str(value)
    return "'" + s if s[:1] in ("=", "+", "-", "@", "\t", "\r") else s


def answers_csv(lesson: lessons.Lesson, answers: list[Answer]) -> str:
    """Every answer of the class: step, page, nickname, answer, right, the student's own truth, when (UTC)."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["step", "page", "nickname", "answer", "right", "truth_from_view", "answered_utc"])
    for a in sorted(answers, key=lambda a: (a.step, a.nickname)):
        step = lesson.steps[a.step - 1] if 0 < a.step <= len(lesson.steps) else None
        q = step.question if step else None
        w.writerow([a.step, step.page_title if step else "", _cell(a.nickname), _cell(shown_answer(q, a)),
                    "" if a.right is None else ("yes" if a.right else "no"),
                    "" if a.truth is None else f"{a.truth:g}",
                    pd.Timestamp(a.at, unit="s").strftime("%Y-%m-%d %H:%M:%S")])
    return buf.getvalue()
