"""Figures of the MoE vs Mixture of Agents page: pure functions from data frames to Vega-Lite specs (their
data in named datasets), drawn by the browser's Vega without plotly."""
from __future__ import annotations

import numpy as np
import pandas as pd

from app import theme
from app.charts.vega import SCHEMA, usermeta
from app.moe_vs_moa import fmt_ratio

SCALE = {"FLOPs": (1e12, "TFLOP"), "bytes": (1e9, "GB"), "seconds": (1.0, "s")}
RATIO_COLOURS = [theme.OKABE_ITO["blue"], theme.OKABE_ITO["orange"], theme.OKABE_ITO["green"],
                 theme.OKABE_ITO["purple"]]
SIDES = ("K3", "MoA")
PANEL_WIDTH = 145                 # four panels with their axes in the page's ~940 px column at 1400 px
RATIO_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)


def _bar_label(y: float, unit: str) -> str:
    return f"{y:,.0f} {unit}" if y >= 100 else f"{y:,.3g} {unit}"


def costs_spec(table: pd.DataFrame, moa_label: str, theme_type: str | None = None, present: bool = False) -> dict:
    """One small bar chart per cost, K3 beside the Mixture of Agents, titled with the cost and the ratio
    (bold). Drawn as SVG: the ratios are text a reader (and a browser test) can find on the page."""
    rows = []
    for r in table.itertuples():
        div, unit = SCALE.get(r.unit, (1.0, r.unit))
        for side, name, value in (("K3", "Kimi K3", r.K3), ("MoA", moa_label, r.MoA)):
            rows.append({"cost": r.cost, "side": side, "model": name, "value": float(value) / div, "unit": unit,
                         "label": _bar_label(float(value) / div, unit), "ratio": float(r.ratio)})
    bars = pd.DataFrame(rows)
    panels = []
    for r in table.itertuples():
        d = bars[bars["cost"] == r.cost]
        unit = d["unit"].iloc[0]
        x = {"field": "side", "type": "nominal", "title": None, "sort": list(SIDES),
             "axis": {"labelAngle": 0, "ticks": False}, "scale": {"paddingInner": 0.35, "paddingOuter": 0.25}}
        y = {"field": "value", "type": "quantitative", "title": unit, "axis": {"tickCount": 4},
             "scale": {"domain": [0, float(d["value"].max()) * 1.25], "nice": False}}
        filt = [{"filter": {"field": "cost", "equal": r.cost}}]
        panels.append({
            "title": {"text": r.cost, "subtitle": f"MoA / K3 = {fmt_ratio(r.ratio)}", "fontWeight": "normal",
                      "anchor": "middle", "subtitleFontWeight": "bold", "subtitleFontSize": 18 if present else 13,
                      "subtitleColor": theme.ink(theme_type),          # the theme colours titles, not subtitles
                      "subtitlePadding": 4, "offset": 12},
            "width": PANEL_WIDTH, "height": 230, "transform": filt,
            "layer": [
                {"mark": {"type": "bar"},
                 "encoding": {"x": x, "y": y,
                              "color": {"field": "side", "type": "nominal", "legend": None,
                                        "scale": {"domain": list(SIDES), "range": [theme.K3, theme.ACCENT]}},
                              "tooltip": [{"field": "cost"}, {"field": "model"},
                                          {"field": "value", "type": "quantitative", "title": unit, "format": ",.4~g"}]}},
                {"mark": {"type": "text", "baseline": "bottom", "dy": -3, "color": theme.ink(theme_type)},
                 "encoding": {"x": x, "y": y, "text": {"field": "label"}}},
            ]})
    return {"$schema": SCHEMA, "datasets": {"costs": bars}, "data": {"name": "costs"}, "hconcat": panels,
            "spacing": 20, "resolve": {"scale": {"y": "independent"}}, "config": {"view": {"stroke": None}},
            "usermeta": usermeta("moa_costs", "svg")}


def sweep_spec(sweep: pd.DataFrame, context: int) -> dict:
    """MoA / K3 ratios against the prompt length (log axes), the chosen context dotted, equal cost (1x)
    dashed."""
    cols = [c for c in sweep.columns if c != "context"]
    long = sweep.melt(id_vars="context", value_vars=cols, var_name="ratio of", value_name="ratio")
    long["context"] = long["context"].astype(int)
    values = sweep[cols].to_numpy(dtype=float)
    lo = max(min(0.5, float(np.nanmin(values)) * 0.8), 1e-3)
    hi = float(np.nanmax(values)) * 1.5
    ticks = [2 ** k for k in range(10, 21, 2)]
    x = {"field": "context", "type": "quantitative", "title": "prompt length (tokens, log)",
         "scale": {"type": "log", "base": 2, "domain": [min(sweep["context"]) / 1.25, max(sweep["context"]) * 1.25],
                   "nice": False},
         "axis": {"values": ticks, "labelExpr": "datum.value >= 1048576 ? '1M' : (datum.value / 1024) + 'K'",
                  "grid": False}}
    y = {"field": "ratio", "type": "quantitative", "title": "MoA / K3 (log)",
         "scale": {"type": "log", "domain": [lo, hi], "nice": False},
         "axis": {"values": [v for v in RATIO_TICKS if lo <= v <= hi], "labelExpr": "datum.label + 'x'"}}
    grey, vermillion = theme.OKABE_ITO["grey"], theme.OKABE_ITO["vermillion"]
    return {
        "$schema": SCHEMA, "width": "container", "height": 340,
        "datasets": {"ratios": long, "chosen": pd.DataFrame({"context": [int(context)]})},
        "layer": [
            {"data": {"values": [{"y": 1}]}, "mark": {"type": "rule", "strokeDash": [6, 4], "strokeWidth": 1,
                                                      "color": vermillion},
             "encoding": {"y": {"field": "y", "type": "quantitative"}}},
            {"data": {"values": [{"y": 1}]},
             "mark": {"type": "text", "align": "right", "baseline": "bottom", "dy": -3, "color": vermillion,
                      "x": {"expr": "width"}},
             "encoding": {"y": {"field": "y", "type": "quantitative"}, "text": {"value": "equal cost"}}},
            {"data": {"name": "chosen"}, "mark": {"type": "rule", "strokeDash": [2, 3], "strokeWidth": 1, "color": grey},
             "encoding": {"x": {"field": "context", "type": "quantitative"},
                          "tooltip": [{"field": "context", "type": "quantitative", "title": "chosen prompt length",
                                       "format": ","}]}},
            {"data": {"name": "ratios"}, "mark": {"type": "line", "point": {"size": 36}, "strokeWidth": 2},
             "encoding": {"x": x, "y": y,
                          "color": {"field": "ratio of", "type": "nominal", "title": None,
                                    "scale": {"domain": cols, "range": RATIO_COLOURS[:len(cols)]},
                                    "legend": {"orient": "top", "direction": "horizontal", "labelLimit": 260}},
                          "tooltip": [{"field": "ratio of"},
                                      {"field": "context", "type": "quantitative", "title": "context (tokens)", "format": ","},
                                      {"field": "ratio", "type": "quantitative", "title": "MoA / K3", "format": ",.2f"}]}},
        ],
        "usermeta": usermeta("moa_sweep"),
    }


def step_spec(df: pd.DataFrame, theme_type: str | None = None) -> dict:
    """What one decode step reads: active weights and cache, for K3 and for one agent, stacked, each bar's
    total and its time at the bandwidth written at its end."""
    parts = list(df["part"].unique())
    models = list(df["model"].unique())
    bars = pd.DataFrame({"model": df["model"].to_numpy(), "part": df["part"].to_numpy(),
                         "GB": df["bytes"].to_numpy(dtype=float) / 1e9,
                         "ms": df["ms at the bandwidth"].to_numpy(dtype=float)})
    bars["order"] = [parts.index(p) for p in bars["part"]]
    totals = bars.groupby("model", sort=False)[["GB", "ms"]].sum().reset_index()
    totals["label"] = [f"{g:,.0f} GB → {m:,.1f} ms" for g, m in zip(totals["GB"], totals["ms"])]
    x_scale = {"domain": [0, float(totals["GB"].max()) * 1.45], "nice": False}
    y = {"field": "model", "type": "nominal", "title": None, "sort": models, "axis": {"ticks": False, "labelLimit": 260}}
    return {
        "$schema": SCHEMA, "width": "container", "height": 240,
        "datasets": {"step": bars, "totals": totals},
        "layer": [
            {"data": {"name": "step"}, "mark": {"type": "bar", "height": {"band": 0.75}},
             "encoding": {"x": {"field": "GB", "type": "quantitative", "title": "bytes read per decode step (GB)",
                                "stack": "zero", "scale": x_scale, "axis": {"tickCount": 6}},
                          "y": y,
                          "color": {"field": "part", "type": "nominal", "title": None,
                                    "scale": {"domain": parts, "range": [theme.K3, theme.OKABE_ITO["sky"]][:len(parts)]},
                                    "legend": {"orient": "top", "direction": "horizontal"}},
                          "order": {"field": "order"},
                          "tooltip": [{"field": "model"}, {"field": "part"},
                                      {"field": "GB", "type": "quantitative", "format": ",.1f"},
                                      {"field": "ms", "type": "quantitative", "title": "ms at the bandwidth",
                                       "format": ",.2f"}]}},
            {"data": {"name": "totals"}, "mark": {"type": "text", "align": "left", "dx": 6, "color": theme.ink(theme_type)},
             "encoding": {"x": {"field": "GB", "type": "quantitative", "scale": x_scale}, "y": y,
                          "text": {"field": "label"}}},
        ],
        "usermeta": usermeta("moa_step"),
    }
