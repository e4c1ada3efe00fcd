"""Figures of the Overview page: pure functions from data frames to Vega-Lite specs (their data in named
datasets), drawn by the browser's Vega without plotly (the page's reload: ~2.2 s with four plotly charts,
~1.4 s with four Vega-Lite charts on this machine)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from app import theme
from app.charts.vega import SCHEMA, usermeta

ATTENTION_NAMES = {"KDA": "Kimi Delta Attention", "MLA": "gated MLA"}
FFN_NAMES = {"dense": "dense FFN", "MoE": "LatentMoE FFN"}
ROWS = ("attention", "FFN")
# A five-pointed star (Vega has no star symbol): K3's point on the frontier chart, as on the plotly original.
STAR = ("M0,-1L0.2245,-0.309L0.9511,-0.309L0.3633,0.118L0.5878,0.809L0,0.382L-0.5878,0.809L-0.3633,0.118"
        "L-0.9511,-0.309L-0.2245,-0.309Z")


def stack_spec(stack: pd.DataFrame, n_blocks: int, theme_type: str | None = None) -> dict:
    """The layer stack as two rows of squares (attention above, FFN below), AttnRes blocks shaded and
    labelled; point at a square for what its layer is made of. Drawn as SVG, one element per square."""
    kinds = []
    for kind in ("KDA", "MLA"):
        kinds.append(f"{ATTENTION_NAMES[kind]} ({int((stack['attention'] == kind).sum())})")
    for kind in ("dense", "MoE"):
        kinds.append(f"{FFN_NAMES[kind]} ({int((stack['ffn'] == kind).sum())})")
    colours = [theme.KDA, theme.MLA, theme.DENSE, theme.MOE]
    label = {"KDA": kinds[0], "MLA": kinds[1], "dense": kinds[2], "MoE": kinds[3]}
    common = stack[["layer", "where", "attention_detail", "ffn_detail", "block_detail"]]
    squares = pd.concat([
        common.assign(row=ROWS[0], kind=stack["attention"].map(label)),
        common.assign(row=ROWS[1], kind=stack["ffn"].map(label)),
    ], ignore_index=True)
    blocks = (stack[stack["block"] >= 0].groupby("block")["layer"].agg(["min", "max"]).reset_index())
    blocks = pd.DataFrame({"start": blocks["min"] - 0.5, "end": blocks["max"] + 0.5,
                           "middle": (blocks["min"] + blocks["max"]) / 2, "label": [f"block {b + 1}" for b in blocks["block"]],
                           "fill": [theme.SEQUENCE[7] if b % 2 else theme.SEQUENCE[5] for b in blocks["block"]]})
    x = {"field": "layer", "type": "quantitative", "title": "layer (0-based)",
         "scale": {"domain": [-1, len(stack)], "nice": False, "zero": False},
         "axis": {"values": list(range(0, len(stack), 4)), "grid": False}}
    y = {"field": "row", "type": "nominal", "title": None, "sort": list(ROWS),
         "scale": {"domain": list(ROWS), "paddingOuter": 0.6}, "axis": {"ticks": False, "domain": False}}
    return {
        "$schema": SCHEMA, "width": "container", "height": 215,
        "datasets": {"squares": squares, "blocks": blocks},
        # text marks take their size from the config's "text" (presenter mode enlarges it)
        "layer": [
            {"data": {"name": "blocks"}, "mark": {"type": "rect", "opacity": 0.12},
             "encoding": {"x": {"field": "start", "type": "quantitative", "scale": x["scale"], "axis": x["axis"],
                                "title": x["title"]},
                          "x2": {"field": "end"},
                          "fill": {"field": "fill", "type": "nominal", "legend": None, "scale": None}}},
            {"data": {"name": "blocks"}, "mark": {"type": "text", "baseline": "bottom", "dy": -4,
                                                  "color": theme.ink(theme_type), "y": 0},
             "encoding": {"x": {"field": "middle", "type": "quantitative", "scale": x["scale"]},
                          "text": {"field": "label"}}},
            {"data": {"name": "squares"}, "mark": {"type": "square", "size": 56, "opacity": 1},
             "encoding": {"x": x, "y": y,
                          "color": {"field": "kind", "type": "nominal", "title": None,
                                    "scale": {"domain": kinds, "range": colours},
                                    "legend": {"orient": "bottom", "direction": "horizontal", "symbolType": "square"}},
                          "tooltip": [{"field": "where", "title": "layer"},
                                      {"field": "attention_detail", "title": "attention"},
                                      {"field": "ffn_detail", "title": "FFN"},
                                      {"field": "block_detail", "title": "AttnRes block"}]}},
        ],
        "config": {"view": {"stroke": None}},
        "usermeta": usermeta("overview_stack", "svg"),
    }


def breakdown_spec(df: pd.DataFrame, which: str = "total", theme_type: str | None = None) -> dict:
    """Share of the parameters by component ('total' = stored weights, 'active' = used per token), as
    horizontal bars labelled with the share and the count."""
    share = f"share of {which}"
    d = df[df[which] > 0].sort_values(which, ascending=False)
    bars = pd.DataFrame({
        "component": d["component"].to_numpy(), "percent": (d[share] * 100).to_numpy(),
        "params": d[which].to_numpy().astype(float),
        "label": [f"{s * 100:.2f}%  ({v / 1e9:,.1f}B)" for s, v in zip(d[share], d[which])],
        "kind": ["routed experts" if c == "routed experts" else "other" for c in d["component"]]})
    x = {"field": "percent", "type": "quantitative", "scale": {"domain": [0, 118], "nice": False},
         "title": f"% of {'all stored' if which == 'total' else 'per-token active'} parameters",
         "axis": {"values": [0, 20, 40, 60, 80, 100], "labelExpr": "datum.value + '%'"}}
    y = {"field": "component", "type": "nominal", "title": None, "sort": None, "axis": {"ticks": False, "labelLimit": 320}}
    return {
        "$schema": SCHEMA, "width": "container", "height": 320,
        "datasets": {"breakdown": bars}, "data": {"name": "breakdown"},
        "layer": [
            {"mark": {"type": "bar"},
             "encoding": {"x": x, "y": y,
                          "color": {"field": "kind", "type": "nominal", "legend": None,
                                    "scale": {"domain": ["routed experts", "other"], "range": [theme.ACCENT, theme.K3]}},
                          "tooltip": [{"field": "component"},
                                      {"field": "percent", "type": "quantitative", "title": "%", "format": ".3f"},
                                      {"field": "params", "type": "quantitative", "title": "parameters", "format": ",.0f"}]}},
            {"mark": {"type": "text", "align": "left", "dx": 4, "color": theme.ink(theme_type)},
             "encoding": {"x": x, "y": y, "text": {"field": "label"}}},
        ],
        "usermeta": usermeta("overview_breakdown"),
    }


SHARES = (0.01, 0.03, 0.1, 0.3)


def frontier_spec(df: pd.DataFrame, theme_type: str | None = None) -> dict:
    """Total vs active parameters on log axes, with dotted lines of constant active share; K3 (computed
    by the accounting) a star, the published models circles."""
    x_lo, x_max, y_lo, y_max = 30, 5000, 2, 200
    lines, labels = [], []
    for share in SHARES:
        name = f"{share:.0%} active"
        lines += [{"share": name, "total": float(x_lo), "active": x_lo * share},
                  {"share": name, "total": float(x_max), "active": x_max * share}]
        x_end = min(x_max, y_max / share) * 0.8                    # where the line leaves the plot, inside it
        labels.append({"share": name, "total": x_end, "active": x_end * share})
    points = pd.DataFrame({
        "model": df["model"].to_numpy(), "total": df["total_b"].to_numpy().astype(float),
        "active": df["active_b"].to_numpy().astype(float), "share": (df["active share"] * 100).to_numpy().astype(float),
        "source": df["source"].to_numpy(),
        "origin": np.where(df["origin"] == "computed", "Kimi K3, computed by our accounting", "published figures")})
    origins = ["published figures", "Kimi K3, computed by our accounting"]
    x = {"field": "total", "type": "quantitative", "title": "total parameters (billions, log)",
         "scale": {"type": "log", "domain": [x_lo, x_max], "nice": False},
         "axis": {"values": [30, 50, 100, 200, 500, 1000, 2000, 5000], "format": "~s"}}
    y = {"field": "active", "type": "quantitative", "title": "active parameters per token (billions, log)",
         "scale": {"type": "log", "domain": [y_lo, y_max], "nice": False},
         "axis": {"values": [2, 5, 10, 20, 50, 100, 200]}}
    grey, ink = theme.OKABE_ITO["grey"], theme.ink(theme_type)
    return {
        "$schema": SCHEMA, "width": "container", "height": 480,
        "datasets": {"lines": pd.DataFrame(lines), "line_labels": pd.DataFrame(labels), "models": points},
        "layer": [
            {"data": {"name": "lines"}, "mark": {"type": "line", "strokeDash": [2, 3], "strokeWidth": 1,
                                                 "color": grey, "clip": True},
             "encoding": {"x": x, "y": y, "detail": {"field": "share"}}},
            {"data": {"name": "line_labels"}, "mark": {"type": "text", "align": "right", "dy": -8, "fontSize": 10,
                                                       "color": grey},
             "encoding": {"x": x, "y": y, "text": {"field": "share"}}},
            {"data": {"name": "models"},
             "mark": {"type": "point", "filled": True, "opacity": 1, "stroke": "rgba(0,0,0,0.4)", "strokeWidth": 1},
             "encoding": {"x": x, "y": y,
                          "color": {"field": "origin", "type": "nominal", "title": None,
                                    "scale": {"domain": origins, "range": [theme.K2, theme.ACCENT]},
                                    "legend": {"orient": "bottom", "direction": "horizontal", "labelLimit": 320}},
                          "shape": {"field": "origin", "type": "nominal",
                                    "scale": {"domain": origins, "range": ["circle", STAR]}},
                          "size": {"field": "origin", "type": "nominal", "legend": None,
                                   "scale": {"domain": origins, "range": [110, 420]}},
                          "tooltip": [{"field": "model"},
                                      {"field": "total", "type": "quantitative", "title": "total (B)", "format": ",.1f"},
                                      {"field": "active", "type": "quantitative", "title": "active (B)", "format": ",.1f"},
                                      {"field": "share", "type": "quantitative", "title": "active share (%)", "format": ".1f"},
                                      {"field": "source"}]}},
            {"data": {"name": "models"}, "transform": [{"filter": f"datum.origin == '{origins[0]}'"}],
             "mark": {"type": "text", "dy": -12, "color": ink},
             "encoding": {"x": x, "y": y, "text": {"field": "model"}}},
            {"data": {"name": "models"}, "transform": [{"filter": f"datum.origin == '{origins[1]}'"}],
             "mark": {"type": "text", "align": "right", "dx": -14, "fontWeight": "bold", "color": ink},
             "encoding": {"x": x, "y": y, "text": {"field": "model"}}},
        ],
        "usermeta": usermeta("overview_frontier"),
    }


def growth_spec(df: pd.DataFrame, theme_type: str | None = None, columns: int = 5) -> dict:
    """K2 -> K3, one small bar chart per metric, each on its own scale, titled with the ratio."""
    rows = []
    for order, r in enumerate(df.itertuples()):
        title = f"{r.metric}|×{r.ratio:.2f}"
        for model, value in (("K2", r.K2), ("K3", r.K3)):
            rows.append({"panel": title, "order": order, "model": model, "value": float(value),
                         "text": _short(value), "metric": r.metric, "origin": r.origin})
    return {
        "$schema": SCHEMA,
        "datasets": {"growth": pd.DataFrame(rows)}, "data": {"name": "growth"},
        "facet": {"field": "panel", "type": "nominal", "sort": {"field": "order", "op": "min"}, "title": None,
                  "header": {"labelExpr": "split(datum.value, '|')", "labelFontWeight": "bold"}},
        "columns": columns,
        "spec": {"width": 150, "height": 110, "layer": [
            {"mark": {"type": "bar"},
             "encoding": {"x": {"field": "model", "type": "nominal", "title": None, "axis": {"labelAngle": 0, "ticks": False}},
                          "y": {"field": "value", "type": "quantitative", "title": None, "axis": None},
                          "color": {"field": "model", "type": "nominal", "legend": None,
                                    "scale": {"domain": ["K2", "K3"], "range": [theme.K2, theme.K3]}},
                          "tooltip": [{"field": "metric"}, {"field": "model"},
                                      {"field": "value", "type": "quantitative", "format": ",.4~g"},
                                      {"field": "origin"}]}},
            {"mark": {"type": "text", "baseline": "bottom", "dy": -2, "color": theme.ink(theme_type)},
             "encoding": {"x": {"field": "model", "type": "nominal"},
                          "y": {"field": "value", "type": "quantitative"}, "text": {"field": "text"}}},
        ]},
        "resolve": {"scale": {"y": "independent"}},
        "config": {"view": {"stroke": None}, "header": {"labelFontSize": 11}},   # presenter mode enlarges it
        "usermeta": usermeta("overview_growth"),
    }


def _short(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:.2f}M" if v % 1e6 else f"{v / 1e6:.0f}M"
    if v >= 1e4:
        return f"{v / 1e3:.0f}K"
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"
