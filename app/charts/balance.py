"""Figures of the Load balancing lab: pure functions from arrays and frames to Vega-Lite specs (their data
in named datasets), drawn by the browser's Vega without plotly (plotly's drawing was most of this page's
reload: 3.6 s with its four plotly charts, 1.4 s without them, same-run reloads)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from app import theme
from app.charts.vega import SCHEMA, usermeta

COLOURS = {
    "No balancing": theme.OKABE_ITO["grey"],
    "Sign rule (DeepSeek-V3)": theme.OKABE_ITO["vermillion"],
    "Auxiliary loss": theme.OKABE_ITO["purple"],
    "Quantile Balancing, histogram": theme.OKABE_ITO["sky"],
    "Quantile Balancing, exact": theme.OKABE_ITO["blue"],
}
DASHED = ("Quantile Balancing, histogram",)
PANEL_WIDTH = 260
STEP_PANELS = (("max_mean", "max / mean load (log)"), ("cv", "coefficient of variation"),
               ("dead", "experts with no token"))
LOAD_STATUS = {"under": ("at or under the target", theme.OKABE_ITO["blue"]),
               "over": ("over the target", theme.OKABE_ITO["orange"]),
               "empty": ("no token (dead)", theme.OKABE_ITO["vermillion"])}


def steps_spec(df: pd.DataFrame, floor: float) -> dict:
    """max/mean (log), coefficient of variation and empty experts over steps, every method; the goal
    (the sampling-noise floor of this batch size, app.balance.goal_note) as a dotted line on the first."""
    data = pd.DataFrame({"method": df["method"].to_numpy(), "step": df["step"].to_numpy().astype(int),
                         "max_mean": df["max/mean"].to_numpy().astype(float), "cv": df["cv"].to_numpy().astype(float),
                         "dead": df["dead"].to_numpy().astype(float)})
    methods = [m for m in COLOURS if m in set(data["method"])]
    top = max(2.0, float(data["max_mean"].max()))
    ticks = [v for v in (1, 1.5, 2, 3, 5, 10, 20, 50, 100, 200, 500) if v <= top * 1.2]
    colour = {"field": "method", "type": "nominal", "title": None,
              "scale": {"domain": methods, "range": [COLOURS[m] for m in methods]},
              "legend": {"orient": "bottom", "direction": "horizontal", "columns": 3, "labelLimit": 260}}
    dash = {"field": "method", "type": "nominal", "legend": None,
            "scale": {"domain": methods, "range": [[5, 3] if m in DASHED else [1, 0] for m in methods]}}
    x = {"field": "step", "type": "quantitative", "title": "step (one fresh batch each)",
         "scale": {"zero": False, "nice": False}, "axis": {"tickMinStep": 1, "format": "d"}}
    panels = []
    for key, title in STEP_PANELS:
        y = {"field": key, "type": "quantitative", "title": None}
        if key == "max_mean":
            y["scale"] = {"type": "log", "domain": [min(1.0, float(data["max_mean"].min())) * 0.97, top * 1.2], "nice": False}
            y["axis"] = {"values": ticks, "format": "~g"}
        layers = [{"mark": {"type": "line", "point": {"size": 25}, "strokeWidth": 2.5},
                   "encoding": {"x": x, "y": y, "color": colour, "strokeDash": dash,
                                "tooltip": [{"field": "method"}, {"field": "step"},
                                            {"field": key, "type": "quantitative", "title": title, "format": ".4~g"}]}}]
        if key == "max_mean":
            green = theme.OKABE_ITO["green"]
            layers += [
                {"data": {"name": "goal"}, "mark": {"type": "rule", "strokeDash": [2, 2], "color": green, "strokeWidth": 1.5},
                 "encoding": {"y": {"field": "floor", "type": "quantitative"}}},
                {"data": {"name": "goal"}, "mark": {"type": "text", "align": "right", "baseline": "top", "dy": 4,
                                                     "color": green},
                 "encoding": {"x": {"value": PANEL_WIDTH - 2}, "y": {"field": "floor", "type": "quantitative"},
                              "text": {"field": "label"}}},
            ]
        panels.append({"title": title, "width": PANEL_WIDTH, "height": 230, "layer": layers})
    return {"$schema": SCHEMA, "datasets": {"steps": data, "goal": pd.DataFrame(
                {"floor": [float(floor)], "label": [f"goal: noise floor {floor:.2f}"]})},
            "data": {"name": "steps"}, "hconcat": panels,
            "resolve": {"scale": {"y": "independent"}}, "usermeta": usermeta("balance_steps")}


def load_spec(load: np.ndarray, target: float, title: str, sort: bool = False) -> dict:
    """One bar per expert at the chosen step, the target q = m k / n as a dashed line, empty experts in red."""
    n = len(load)
    order = np.argsort(-load, kind="stable") if sort else np.arange(n)
    y = np.asarray(load)[order]
    status = np.where(y == 0, "empty", np.where(y > target, "over", "under"))
    bars = pd.DataFrame({"position": np.arange(n), "start": np.arange(n) - 0.5, "end": np.arange(n) + 0.5,
                         "expert": order.astype(int), "load": y.astype(float),
                         "status": [LOAD_STATUS[s][0] for s in status]})
    labels = [v[0] for v in LOAD_STATUS.values()]
    x = {"field": "start", "type": "quantitative", "title": "experts, sorted by load" if sort else "expert id",
         "scale": {"domain": [-0.5, n - 0.5], "nice": False, "zero": False},
         "axis": {"labels": not sort, "ticks": not sort, "format": "d"}}
    return {
        "$schema": SCHEMA, "width": "container", "height": 360,
        "title": {"text": f"{title}; dashed: target q = m·k/n = {target:,.1f}", "fontWeight": "normal"},
        "datasets": {"loads": bars, "target": pd.DataFrame({"target": [float(target)]})},
        "layer": [
            {"data": {"name": "loads"}, "mark": {"type": "rect"},
             "encoding": {"x": x, "x2": {"field": "end"},
                          "y": {"field": "load", "type": "quantitative", "title": "tokens routed to the expert"},
                          "y2": {"datum": 0},
                          "color": {"field": "status", "type": "nominal", "title": None,
                                    "scale": {"domain": labels, "range": [v[1] for v in LOAD_STATUS.values()]},
                                    "legend": {"orient": "top", "direction": "horizontal"}},
                          "tooltip": [{"field": "expert"}, {"field": "load", "type": "quantitative", "title": "tokens"}]}},
            {"data": {"name": "target"}, "mark": {"type": "rule", "strokeDash": [6, 4], "strokeWidth": 2,
                                                  "color": theme.OKABE_ITO["green"]},
             "encoding": {"y": {"field": "target", "type": "quantitative"},
                          "tooltip": [{"field": "target", "type": "quantitative", "title": "target q = m·k/n",
                                       "format": ",.1f"}]}},
        ],
        "usermeta": usermeta("balance_load"),
    }


def hist_error_spec(exact: np.ndarray, hist: np.ndarray, bin_width: float) -> dict:
    """Left: histogram estimate against the exact quantile, one point per expert. Right: the error in
    bin widths (the estimator promises at most one), bins of 0.05."""
    exact, hist = np.asarray(exact, dtype=float), np.asarray(hist, dtype=float)
    err = np.abs(hist - exact) / bin_width
    lo, hi = float(min(exact.min(), hist.min())), float(max(exact.max(), hist.max()))
    points = pd.DataFrame({"expert": np.arange(len(exact)), "exact": exact, "hist": hist, "error": err})
    top = max(1.05, float(err.max()) * 1.05)
    left = {"title": "bias from the histogram vs exact quantile", "width": 380, "height": 260, "layer": [
        {"data": {"name": "diagonal"}, "mark": {"type": "line", "strokeDash": [2, 2], "color": theme.OKABE_ITO["grey"]},
         "encoding": {"x": {"field": "v", "type": "quantitative"}, "y": {"field": "v", "type": "quantitative"}}},
        {"data": {"name": "experts"}, "mark": {"type": "circle", "size": 22, "color": theme.OKABE_ITO["sky"], "opacity": 0.9},
         "encoding": {"x": {"field": "exact", "type": "quantitative", "title": "exact b̂ (uncentred)", "scale": {"zero": False}},
                      "y": {"field": "hist", "type": "quantitative", "title": "histogram b̂", "scale": {"zero": False}},
                      "tooltip": [{"field": "expert"}, {"field": "exact", "type": "quantitative", "format": ".5f"},
                                  {"field": "hist", "type": "quantitative", "title": "histogram", "format": ".5f"}]}}]}
    vermillion = theme.OKABE_ITO["vermillion"]
    right = {"title": "error per expert, in bin widths", "width": 380, "height": 260, "layer": [
        {"data": {"name": "experts"}, "mark": {"type": "bar", "color": theme.OKABE_ITO["blue"]},
         "encoding": {"x": {"field": "error", "type": "quantitative", "bin": {"step": 0.05, "extent": [0, top]},
                            "title": "|histogram - exact| / bin width"},
                      "y": {"aggregate": "count", "type": "quantitative", "title": "experts"},
                      "tooltip": [{"field": "error", "bin": {"step": 0.05, "extent": [0, top]}, "title": "error (bins)"},
                                  {"aggregate": "count", "type": "quantitative", "title": "experts"}]}},
        {"data": {"name": "one_bin"}, "mark": {"type": "rule", "strokeDash": [5, 3], "color": vermillion},
         "encoding": {"x": {"field": "x", "type": "quantitative"}}},
        {"data": {"name": "one_bin"}, "mark": {"type": "text", "align": "left", "dx": 4, "y": 8, "color": vermillion},
         "encoding": {"x": {"field": "x", "type": "quantitative"}, "text": {"value": "one bin"}}}]}
    return {"$schema": SCHEMA,
            "datasets": {"experts": points, "diagonal": pd.DataFrame({"v": [lo, hi]}), "one_bin": pd.DataFrame({"x": [1.0]})},
            "hconcat": [left, right], "usermeta": usermeta("balance_hist")}


WEIGHT_METHODS = (("Auxiliary-loss offsets", theme.OKABE_ITO["purple"]),
                  ("Quantile Balancing bias", theme.OKABE_ITO["blue"]))


def weights_spec(pairs: pd.DataFrame) -> dict:
    """For experts chosen both with and without the bias (weights renormalised over them): the weight with
    it minus the weight without. Quantile Balancing: exactly 0 up to rounding."""
    data = pd.DataFrame({"method": pairs["method"].to_numpy(), "without": pairs["without"].to_numpy().astype(float),
                         "with": pairs["with"].to_numpy().astype(float)})
    data["difference"] = data["with"] - data["without"]
    names = [m for m, _ in WEIGHT_METHODS]
    return {
        "$schema": SCHEMA, "width": "container", "height": 300,
        "datasets": {"pairs": data, "zero": pd.DataFrame({"y": [0.0]})},
        "layer": [
            {"data": {"name": "zero"}, "mark": {"type": "rule", "strokeDash": [2, 2], "color": theme.OKABE_ITO["grey"]},
             "encoding": {"y": {"field": "y", "type": "quantitative"}}},
            {"data": {"name": "pairs"}, "mark": {"type": "circle", "opacity": 0.7},
             "encoding": {"x": {"field": "without", "type": "quantitative",
                                "title": "output weight without the bias / offsets (renormalised over the common experts)"},
                          "y": {"field": "difference", "type": "quantitative", "title": "weight with − weight without",
                                "axis": {"format": ".1e"}},
                          "color": {"field": "method", "type": "nominal", "title": None,
                                    "scale": {"domain": names, "range": [c for _, c in WEIGHT_METHODS]},
                                    "legend": {"orient": "bottom", "direction": "horizontal"}},
                          "size": {"field": "method", "type": "nominal", "legend": None,
                                   "scale": {"domain": names, "range": [36, 25]}},
                          "tooltip": [{"field": "method"}, {"field": "without", "type": "quantitative", "format": ".5f"},
                                      {"field": "with", "type": "quantitative", "format": ".5f"},
                                      {"field": "difference", "type": "quantitative", "format": ".2e"}]}},
        ],
        "usermeta": usermeta("balance_weights"),
    }
