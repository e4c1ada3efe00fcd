"""Figures of a class's dashboard (views/classes.py): a step's answers aggregated, as Vega-Lite specs. Nicknames
and answers are data, drawn by Vega as text (never as HTML)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from app import theme
from app.charts.vega import SCHEMA, usermeta

RIGHT, WRONG = theme.OKABE_ITO["blue"], theme.OKABE_ITO["orange"]
ROW = 22                    # px per bar or student


def _right_colour(title: str) -> dict:
    return {"field": "verdict", "type": "nominal", "title": title,
            # the legend on the right: at the bottom, Streamlit gave a bar chart's plot no height
            "scale": {"domain": ["right", "not right"], "range": [RIGHT, WRONG]}}


def counts_spec(table: pd.DataFrame, what: str) -> dict:
    """Bars: how many students gave each answer (a choice's options, or a text question's common answers), the
    right ones in blue."""
    d = table.assign(verdict=np.where(table["right"].astype(bool), "right", "not right"))
    return {
        "$schema": SCHEMA, "usermeta": usermeta(f"class-{what}"), "width": "container", "height": {"step": ROW},
        "datasets": {"answers": [{"answer": str(a), "count": int(c), "verdict": v} for a, c, v in
                                 d[["answer", "count", "verdict"]].itertuples(index=False)]},
        "data": {"name": "answers"},
        "mark": {"type": "bar", "cornerRadiusEnd": 2},
        "encoding": {
            "y": {"field": "answer", "type": "nominal", "sort": None, "title": None, "axis": {"labelLimit": 320}},
            "x": {"field": "count", "type": "quantitative", "title": "students", "axis": {"tickMinStep": 1,
                                                                                          "format": "d"}},
            "color": _right_colour("answer"),
            "tooltip": [{"field": "answer"}, {"field": "count", "title": "students"}],
        },
    }


def number_counts_spec(table: pd.DataFrame) -> dict:
    """A number question: how many students typed each value (whole numbers one bar each, others rounded to three
    significant digits), split into right and not right."""
    d = table.dropna(subset=["answer"])
    values = d["answer"].to_numpy(dtype=float)
    whole = bool(np.all(values == np.round(values)))
    shown = [f"{v:.0f}" if whole else f"{v:.3g}" for v in values]
    counts = (pd.DataFrame({"answer": shown, "value": values,
                            "verdict": np.where(d["right"].fillna(False).astype(bool), "right", "not right")})
              .groupby(["answer", "verdict"], as_index=False).agg(students=("value", "size"), value=("value", "first"))
              .sort_values("value"))
    order = list(dict.fromkeys(counts["answer"]))
    return {
        "$schema": SCHEMA, "usermeta": usermeta("class-numbers"), "width": "container", "height": 160,
        # plain ints: a numpy integer reaches the browser as text, and a bar of text has no height
        "datasets": {"answers": [{"answer": a, "verdict": v, "students": int(n)} for a, v, n in
                                 counts[["answer", "verdict", "students"]].itertuples(index=False)]},
        "data": {"name": "answers"},
        "mark": {"type": "bar"},
        "encoding": {"x": {"field": "answer", "type": "ordinal", "sort": order, "title": "answer",
                           "axis": {"labelAngle": 0}},
                     "y": {"field": "students", "type": "quantitative", "title": "students",
                           "axis": {"tickMinStep": 1, "format": "d"}},
                     "color": _right_colour("answer"),
                     "tooltip": [{"field": "answer"}, {"field": "verdict"}, {"field": "students"}]},
    }


def answer_vs_view_spec(table: pd.DataFrame) -> dict:
    """A question read from the view: one row per student, their answer (dot) beside the value their own view
    computed (ring), so every student's own right answer is in sight."""
    d = table.dropna(subset=["answer"]).assign(
        verdict=lambda f: np.where(f["right"].fillna(False).astype(bool), "right", "not right"))
    x = {"type": "quantitative", "title": "answer (dot) and the student's own view (ring)",
         "scale": {"zero": False, "nice": True}}
    return {
        "$schema": SCHEMA, "usermeta": usermeta("class-views"), "width": "container", "height": {"step": ROW},
        "datasets": {"answers": d[["nickname", "answer", "truth", "verdict"]].to_dict("records")},
        "data": {"name": "answers"},
        "encoding": {"y": {"field": "nickname", "type": "nominal", "title": None, "sort": None,
                           "axis": {"labelLimit": 200}}},
        "layer": [
            {"mark": {"type": "point", "filled": False, "size": 260, "strokeWidth": 2,
                      "color": theme.OKABE_ITO["green"]},
             "encoding": {"x": {"field": "truth", **x}}},
            {"mark": {"type": "point", "filled": True, "size": 90},
             "encoding": {"x": {"field": "answer", **x}, "color": _right_colour("answer"),
                          "tooltip": [{"field": "nickname"}, {"field": "answer"},
                                      {"field": "truth", "title": "their view"}]}},
        ],
    }
