"""The teacher's dashboard as data (app/classes_board.py) and its charts (app/charts/classes.py): counts per option,
numbers beside each student's own truth, common text answers, who is on a step, and the CSV a spreadsheet reads
as text."""
from __future__ import annotations

import csv
import io
import json

from app import classes_board as B
from app import lessons as L
from app.charts import classes as charts
from app.classes import Answer

LESSON = L.parse('''title = "Board"
summary = "s"

[[steps]]
page = "routing"
note = "one"

[steps.question]
kind = "choice"
ask = "?"
options = ["a", "b", "c"]
answer = 2
explanation = "e"

[[steps]]
page = "routing"
note = "two"

[steps.question]
kind = "number"
ask = "?"
from_view = "rerouted_layers"
explanation = "e"

[[steps]]
page = "glossary"
note = "three"

[steps.question]
kind = "text"
ask = "?"
answers = ["router"]
explanation = "e"
''', "board")


def a(nick, step, answer, right, truth=None):
    return Answer(nick, step, answer, right, truth, 1_000.0)


ANSWERS = [a("Ana", 1, "2", True), a("Bo", 1, "0", False), a("Cy", 1, "2", True),
           a("Ana", 2, "7", True, 7.0), a("Bo", 2, "9", False, 5.0), a("Cy", 2, "five", None, 3.0),
           a("Ana", 3, " Router ", True), a("Bo", 3, "router", True), a("Cy", 3, "gate", False)]


def test_the_board_counts_each_step():
    roster = [("Ana", 1, 990.0), ("Bo", 2, 999.0), ("Cy", 2, 500.0)]       # Cy last seen 500 s ago
    one, two, three = B.board(LESSON, roster, ANSWERS, now=1_000.0)
    assert one.here == ("Ana",) and two.here == ("Bo",) and three.here == ()
    assert one.table.to_dict("list") == {"answer": ["a", "b", "c"], "count": [1, 0, 2], "right": [False, False, True]}
    assert (one.answered, one.right) == (3, 2)
    rows = two.table.set_index("nickname")
    assert rows.loc["Bo", "answer"] == 9 and rows.loc["Bo", "truth"] == 5.0 and rows.loc["Ana", "truth"] == 7.0
    assert rows["answer"].isna().sum() == 1                          # "five" is not a number
    assert three.table.to_dict("list") == {"answer": ["router", "gate"], "count": [2, 1], "right": [True, False]}


def test_the_csv_names_options_and_keeps_formulas_as_text():
    hostile = ANSWERS + [a("=cmd|' /C calc'!A0", 3, "+SUM(A1)", False), a("@x", 3, "-1", False)]
    rows = list(csv.reader(io.StringIO(B.answers_csv(LESSON, hostile))))
    assert rows[0] == ["step", "page", "nickname", "answer", "right", "truth_from_view", "answered_utc"]
    ana_1 = next(r for r in rows if r[0] == "1" and r[2] == "Ana")
    assert ana_1[3] == "c" and ana_1[4] == "yes"                      # the option's text, not its index
    bo_2 = next(r for r in rows if r[0] == "2" and r[2] == "Bo")
    assert bo_2[5] == "5" and bo_2[4] == "no"
    assert all(not r[2].startswith(("=", "+", "-", "@")) and not r[3].startswith(("=", "+", "-", "@"))
               for r in rows[1:])
    assert any(r[2] == "'=cmd|' /C calc'!A0" and r[3] == "'+SUM(A1)" for r in rows)


def test_the_charts_carry_plain_numbers():
    _, two, _ = B.board(LESSON, [], ANSWERS, now=1_000.0)
    counts = charts.number_counts_spec(two.table)
    data = counts["datasets"]["answers"]
    assert {(d["answer"], d["verdict"], d["students"]) for d in data} == {("7", "right", 1), ("9", "not right", 1)}
    assert all(type(d["students"]) is int for d in data)              # a numpy integer reaches the browser as text
    json.dumps(counts)
    views = charts.answer_vs_view_spec(two.table)
    assert [(d["nickname"], d["answer"], d["truth"]) for d in views["datasets"]["answers"]] == [
        ("Ana", 7.0, 7.0), ("Bo", 9.0, 5.0)]
    one, _, _ = B.board(LESSON, [], ANSWERS, now=1_000.0)
    bars = charts.counts_spec(one.table, "choice")["datasets"]["answers"]
    assert [(d["answer"], d["count"], d["verdict"]) for d in bars] == [
        ("a", 1, "not right"), ("b", 0, "not right"), ("c", 2, "right")]
    assert all(type(d["count"]) is int for d in bars)
