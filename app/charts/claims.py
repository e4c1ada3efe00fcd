"""Figures of the Claims page: pure functions from data frames to Vega-Lite specs (their data in named
datasets), drawn by the browser's Vega without plotly."""
from __future__ import annotations

import pandas as pd

from app import theme
from app.charts.vega import SCHEMA, usermeta

LEVEL_COLOURS = {"high": theme.OKABE_ITO["green"], "mixed": theme.OKABE_ITO["orange"],
                 "self-cited": theme.OKABE_ITO["vermillion"]}
VERDICT_COLOURS = {"holds": theme.OKABE_ITO["green"], "holds with a caveat": theme.OKABE_ITO["orange"],
                   "does not hold": theme.OKABE_ITO["vermillion"], "cannot be checked here": theme.OKABE_ITO["grey"]}


def evidence_spec(df: pd.DataFrame, levels: tuple[str, ...], theme_type: str | None = None) -> dict:
    """Each component placed at its evidence level, labelled with the claims on this page about it; point at
    a square for its sources."""
    # the sources split at their "; " into tooltip rows: one long row would be cut off by the tooltip's width
    parts = [str(s).split("; ", 1) + [""] for s in df["sources"]]
    marks = pd.DataFrame({
        "component": df["component"].to_numpy(), "level": df["confidence"].to_numpy(),
        "position": [levels.index(level) for level in df["confidence"]],
        "sources": [p[0] for p in parts], "more": [p[1] for p in parts],
        "claims": df["claims"].to_numpy(),
        "label": [f"claims {c}" if c else "" for c in df["claims"]]})
    x = {"field": "position", "type": "quantitative", "title": "strength of the evidence (docs/REFERENCES.md)",
         "scale": {"domain": [-0.5, len(levels) - 0.2], "nice": False, "zero": False},
         "axis": {"values": list(range(len(levels))), "labelExpr": f"{list(levels)}[datum.value]", "grid": False,
                  "ticks": False, "domain": False}}
    y = {"field": "component", "type": "nominal", "title": None, "sort": list(df["component"]),
         "axis": {"ticks": False, "domain": False, "labelPadding": 8, "labelLimit": 300}}
    present = [level for level in levels if level in set(df["confidence"])]
    square = {"type": "square", "size": 26 ** 2, "opacity": 1, "stroke": "rgba(128,128,128,0.6)", "strokeWidth": 1}
    colour = {"field": "level", "type": "nominal", "legend": None,                        # named on the axis
              "scale": {"domain": present, "range": [LEVEL_COLOURS.get(v, theme.K3) for v in present]}}
    tip = [{"field": "component"}, {"field": "level", "title": "evidence"}, {"field": "sources"}]
    claims = [{"field": "claims", "title": "claims on this page"}]
    return {
        "$schema": SCHEMA, "width": "container", "height": 290,
        "datasets": {"evidence": marks}, "data": {"name": "evidence"},
        "layer": [
            # two layers of the same squares: a tooltip row for the rest of the sources only where there is one
            {"transform": [{"filter": "datum.more == ''"}], "mark": square,
             "encoding": {"x": x, "y": y, "color": colour, "tooltip": tip + claims}},
            {"transform": [{"filter": "datum.more != ''"}], "mark": square,
             "encoding": {"x": x, "y": y, "color": colour, "tooltip": tip + [{"field": "more", "title": "and"}] + claims}},
            {"mark": {"type": "text", "align": "left", "dx": 19, "color": theme.ink(theme_type)},
             "encoding": {"x": x, "y": y, "text": {"field": "label"}, "tooltip": tip + claims}},
        ],
        "config": {"view": {"stroke": None}},
        "usermeta": usermeta("claims_evidence"),
    }


def verdict_spec(counts: pd.Series, theme_type: str | None = None) -> dict:
    """How many claims got each verdict, as horizontal bars with the count at their end."""
    verdicts = list(counts.index)
    bars = pd.DataFrame({"verdict": verdicts, "claims": counts.to_numpy().astype(int)})
    top = max(int(counts.max()), 1) * 1.2
    x = {"field": "claims", "type": "quantitative", "title": "claims", "scale": {"domain": [0, top], "nice": False},
         "axis": {"values": list(range(0, int(top) + 1)), "format": "d"}}
    tip = [{"field": "verdict"}, {"field": "claims", "type": "quantitative"}]
    y = {"field": "verdict", "type": "nominal", "title": None, "sort": verdicts, "axis": {"ticks": False, "labelLimit": 200}}
    return {
        "$schema": SCHEMA, "width": "container", "height": 200,
        "datasets": {"verdicts": bars}, "data": {"name": "verdicts"},
        "layer": [
            {"mark": {"type": "bar"},
             "encoding": {"x": x, "y": y,
                          "color": {"field": "verdict", "type": "nominal", "legend": None,
                                    "scale": {"domain": verdicts, "range": [VERDICT_COLOURS.get(v, theme.K3) for v in verdicts]}},
                          "tooltip": tip}},
            {"mark": {"type": "text", "align": "left", "dx": 4, "color": theme.ink(theme_type)},
             "encoding": {"x": x, "y": y, "text": {"field": "claims", "type": "quantitative"}, "tooltip": tip}},
        ],
        "usermeta": usermeta("claims_verdicts"),
    }
