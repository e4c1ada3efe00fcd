"""Figures of the Routing explorer: pure functions from the data of app/routing.py to plotly figures."""
from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app import theme
from app.routing import GRID_COLS, N_SHARDS

OI = theme.OKABE_ITO
CHOSEN = OI["vermillion"]          # the token's chosen experts: outline and glow
KNOCKED = OI["purple"]             # an X over experts that may not be chosen
SELECTED = OI["sky"]               # ring around the expert shown in the expert panel
LOAD_COLOURS = {"idle": "rgba(153,153,153,0.35)", "low": OI["blue"], "mid": OI["green"], "high": OI["yellow"]}
PROB_SCALE = "Cividis"             # perceptually uniform, readable with colour-vision deficiencies
CELL = 14                          # px between cell centres
MARKER = 11                        # px side of a cell's square


# The grid's frame in grid units (one unit = one cell) and pixels: the plot area is fixed, so a cell's
# place on the canvas is known (tests click by it) and a new layer only swaps the data.
GRID_X0, GRID_Y0 = -0.8, -0.75                        # left and top edge
SHARED_X = GRID_COLS + 1.6                             # the column of the 2 shared experts
GRID_PAD = {"left": 62, "top": 6, "right": 100, "bottom": 30}
SHAPE_X = "M-1,-1L1,1M-1,1L1,-1"                       # an X over a knocked-out expert


def grid_frame(n_experts: int) -> dict:
    """The grid's size: rows, the x and y domains (grid units) and the plot area (px)."""
    rows = -(-n_experts // GRID_COLS)
    x1, y1 = GRID_COLS + 2.8, rows - 0.35
    return {"rows": rows, "x": [GRID_X0, x1], "y": [GRID_Y0, y1],
            "width": round((x1 - GRID_X0) * CELL), "height": round((y1 - GRID_Y0) * CELL)}


def cell_centre(expert: int, n_experts: int = 896) -> tuple[float, float]:
    """Pixel centre of an expert's square, from the top-left corner of the chart's canvas."""
    return (GRID_PAD["left"] + (expert % GRID_COLS - GRID_X0) * CELL,
            GRID_PAD["top"] + (expert // GRID_COLS - GRID_Y0) * CELL)


@lru_cache(maxsize=8)
def _grid_template(colour_by: str, n_experts: int) -> str:
    """The grid's Vega-Lite spec without its data, as JSON: the same for every layer, token and
    re-routing, so the browser keeps the chart and swaps its data (a new spec would rebuild it)."""
    f = grid_frame(n_experts)
    rows_per_shard = f["rows"] / N_SHARDS
    x = {"field": "col", "type": "quantitative", "scale": {"domain": f["x"], "nice": False, "zero": False}}
    y = {"field": "row", "type": "quantitative", "scale": {"domain": f["y"], "nice": False, "zero": False,
                                                          "reverse": True}}
    centres = [(s + 0.5) * rows_per_shard - 0.5 for s in range(N_SHARDS)]
    shard_of = f"floor((datum.value + 0.5) / {rows_per_shard:g})"
    y_axis = {"values": centres, "title": None, "grid": False, "ticks": False, "domain": False,
              "labelExpr": f"'shard ' + {shard_of}"}                 # its experts: in the tooltip and the caption
    x_axis = {"values": [SHARED_X], "title": None, "grid": False, "ticks": False, "domain": False,
              "labelExpr": "'2 shared'"}
    if colour_by == "load":
        colour = {"field": "load_class", "type": "nominal", "title": ["tokens of", "the prompt"],
                  "scale": {"domain": list(LOAD_COLOURS), "range": list(LOAD_COLOURS.values())},
                  "legend": {"orient": "right", "labelExpr": "datum.label == 'idle' ? 'none' : datum.label"}}
    else:
        colour = {"field": "prob", "type": "quantitative", "title": ["router", "probability"],
                  "scale": {"scheme": PROB_SCALE.lower(), "domain": [0, 1]},
                  "legend": {"orient": "right", "gradientLength": 160, "format": ".1f"}}
    experts = {"name": "experts"}
    chosen = [{"filter": "datum.chosen"}]
    tooltip = [{"field": "expert", "type": "quantitative", "title": "expert"},
               {"field": "shard", "type": "quantitative", "title": "shard"},
               {"field": "prob", "type": "quantitative", "title": "router probability", "format": ".4f"},
               {"field": "bias", "type": "quantitative", "title": "balancing bias", "format": "+.4f"},
               {"field": "biased", "type": "quantitative", "title": "biased score", "format": ".4f"},
               {"field": "rank", "type": "quantitative", "title": f"rank of {n_experts}"},
               {"field": "line", "type": "nominal", "title": "for this token"},
               {"field": "load", "type": "quantitative", "title": "tokens of the prompt that chose it"}]
    layers = [
        # shard bands: light shading on alternate bands
        {"data": {"name": "bands"}, "mark": {"type": "rect", "fill": "rgba(128,128,128,0.16)"},
         "encoding": {"x": {"datum": -0.6, "type": "quantitative", "scale": x["scale"]},
                      "x2": {"datum": GRID_COLS - 0.4}, "y": {**y, "field": "y0"}, "y2": {"field": "y1"}}},
        # glow: a larger translucent square behind each chosen cell, showing in the gaps around it
        {"data": experts, "transform": chosen,
         "mark": {"type": "square", "size": (MARKER + 10) ** 2, "fill": CHOSEN, "opacity": 0.55},
         "encoding": {"x": x, "y": y}},
        # the experts: click one to open it in the expert panel
        {"data": experts,
         "mark": {"type": "square", "size": MARKER ** 2, "opacity": 1, "cursor": "pointer"},
         "params": [{"name": "pick", "select": {"type": "point", "fields": ["expert"], "on": "click",
                                                  "clear": "dblclick"}}],
         "encoding": {"x": {**x, "axis": x_axis}, "y": {**y, "axis": y_axis}, "color": colour,
                      "tooltip": tooltip}},
        # the outline of the chosen experts (stroke only: a click inside lands on the expert)
        {"data": experts, "transform": chosen,
         "mark": {"type": "square", "size": (MARKER + 2) ** 2, "filled": False, "stroke": CHOSEN,
                  "strokeWidth": 2.5, "opacity": 1},
         "encoding": {"x": x, "y": y}},
        {"data": experts, "transform": [{"filter": "datum.knocked"}],
         "mark": {"type": "point", "shape": SHAPE_X, "size": (MARKER - 3) ** 2, "filled": False,
                  "stroke": KNOCKED, "strokeWidth": 3, "opacity": 1},
         "encoding": {"x": x, "y": y}},
        {"data": experts, "transform": [{"filter": "datum.selected"}],
         "mark": {"type": "square", "size": (MARKER + 12) ** 2, "filled": False, "stroke": SELECTED,
                  "strokeWidth": 3, "opacity": 1},
         "encoding": {"x": x, "y": y}},
        # the shared experts, beside the grid: every token uses both, so they are always on
        {"data": {"name": "shared"},
         "mark": {"type": "square", "size": (2 * MARKER) ** 2, "fill": theme.MOE, "stroke": CHOSEN,
                  "strokeWidth": 2.5, "opacity": 1},
         "encoding": {"x": x, "y": y, "tooltip": [{"field": "name", "type": "nominal", "title": "shared expert"},
                                                   {"field": "line", "type": "nominal", "title": "used by"}]}},
    ]
    spec = {"$schema": "https://vega.github.io/schema/vega-lite/v5.json",
            "width": f["width"], "height": f["height"], "autosize": {"type": "none", "contains": "content"}, "padding": GRID_PAD,
            "layer": layers, "config": {"view": {"stroke": None}},
            # drawn on a canvas: ~4,500 marks, which as SVG would be thousands of DOM changes per redraw
            "usermeta": {"embedOptions": {"renderer": "canvas"}}}
    return json.dumps(spec)


def grid_spec(grid: pd.DataFrame, colour_by: str = "probability", selected: int | None = None) -> dict:
    """The routed experts as squares, one band of 4 rows per shard; the token's chosen experts
    outlined and glowing, knocked-out ones crossed, the expert in the panel ringed; the 2 shared experts
    beside the grid. A Vega-Lite spec for st.vega_lite_chart whose selection "pick" holds the clicked
    expert; everything that changes is in its named datasets, so the spec depends on `colour_by` only."""
    E = len(grid)
    spec = json.loads(_grid_template(colour_by, E))
    f = grid_frame(E)
    rows_per_shard = f["rows"] / N_SHARDS
    lines = [_status_line(s, w, sl) for s, w, sl in zip(grid["status"], grid["weight"], grid["slot"])]
    experts = pd.DataFrame({
        "expert": grid["expert"].astype(int), "col": grid["col"].astype(int), "row": grid["row"].astype(int),
        "shard": grid["shard"].astype(int), "prob": grid["prob"].astype(float), "bias": grid["bias"].astype(float),
        "biased": grid["biased"].astype(float), "rank": grid["rank"].astype(int), "load": grid["load"].astype(int),
        "load_class": grid["load_class"], "line": lines, "chosen": grid["chosen"].astype(bool),
        "knocked": (grid["status"] == "knocked out").to_numpy(),
        "selected": (grid["expert"] == selected).to_numpy() if selected is not None else np.zeros(E, bool)})
    sy = f["rows"] / 2 - 0.5
    spec["datasets"] = {
        "experts": experts,
        "bands": pd.DataFrame({"y0": [s * rows_per_shard - 0.5 for s in range(0, N_SHARDS, 2)],
                               "y1": [(s + 1) * rows_per_shard - 0.5 for s in range(0, N_SHARDS, 2)]}),
        "shared": pd.DataFrame({"col": [SHARED_X, SHARED_X], "row": [sy - 1.6, sy + 1.6],
                                "name": ["shared expert 1", "shared expert 2"],
                                "line": ["every token, weight 1: not routed, never knocked out"] * 2}),
    }
    return spec


def _status_line(status: str, weight: float, slot: int) -> str:
    if status in ("chosen", "forced"):
        return f"{status} (slot {slot + 1}), output weight {weight:.4f}"
    return status


def grid_chosen(spec: dict) -> list[int]:
    """The experts the grid outlines (the token's chosen experts), read back from its data."""
    df = spec["datasets"]["experts"]
    return sorted(int(e) for e in df.loc[df["chosen"], "expert"])


def changed_figure(df: pd.DataFrame, k_before: int) -> go.Figure:
    """Per later layer: how many of the token's original experts were dropped, how many are new."""
    x = df["layer"].to_numpy()
    data = [dict(type="bar", x=x, y=df["dropped"].to_numpy(), name=f"of its {k_before} original experts, no longer chosen",
                 marker=dict(color=CHOSEN), hovertemplate="layer %{x}: %{y} dropped<extra></extra>"),
            dict(type="bar", x=x, y=df["added"].to_numpy(), name="newly chosen experts",
                 marker=dict(color=OI["blue"]), hovertemplate="layer %{x}: %{y} new<extra></extra>")]
    layout = dict(xaxis=dict(title=dict(text="layer"), range=[x.min() - 0.7, x.max() + 0.7] if len(df) else None),
                  yaxis=dict(title=dict(text="experts"), rangemode="tozero"),
                  height=300, barmode="group", bargap=0.15, margin=dict(l=10, r=10, t=10, b=10),
                  legend=dict(orientation="h", y=-0.3, x=0), meta={"chart": "routing_changed"})
    return go.Figure(dict(data=data, layout=layout))


def predictions_figure(before: pd.DataFrame, after: pd.DataFrame, labels_before: list[str],
                       labels_after: list[str], changed: bool) -> go.Figure:
    """Top-5 next tokens before and after the re-routing, side by side on one probability scale."""
    titles = ("model's own routing", "your re-routing" if changed else "your re-routing (no change yet)")
    top = float(max(before["prob"].max(), after["prob"].max()))
    fmt = ".1%" if top < 0.05 else ".0%"
    gap = 0.22
    width = (1 - gap) / 2
    domains = ([0, width], [1 - width, 1])
    data, layout = [], dict(height=260, margin=dict(l=10, r=10, t=30, b=10), meta={"chart": "routing_predictions"},
                            annotations=[])
    for i, (df, labels, colour) in enumerate(((before, labels_before, theme.K2), (after, labels_after, theme.ACCENT))):
        n = "" if i == 0 else "2"
        data.append(dict(type="bar", x=df["prob"].to_numpy(), y=df["rank"].to_numpy(), orientation="h",
                         marker=dict(color=colour), showlegend=False, text=[f"{p:.1%}" for p in df["prob"]],
                         textposition="outside", cliponaxis=False, customdata=labels, xaxis=f"x{n}", yaxis=f"y{n}",
                         hovertemplate="%{customdata}: %{x:.2%}<extra></extra>"))
        layout[f"xaxis{n}"] = dict(domain=domains[i], anchor=f"y{n}", range=[0, top * 1.35], tickformat=fmt, nticks=4)
        layout[f"yaxis{n}"] = dict(anchor=f"x{n}", tickvals=list(df["rank"]), ticktext=labels, autorange="reversed")
        layout["annotations"].append(dict(text=titles[i], x=sum(domains[i]) / 2, y=1.0, xref="paper", yref="paper",
                                          xanchor="center", yanchor="bottom", showarrow=False, font=dict(size=12)))
    return go.Figure(dict(data=data, layout=layout))


def fingerprint_figure(layers: list[int], probs: np.ndarray, mask: np.ndarray) -> go.Figure:
    """Router probability of one token for every expert (columns) in every MoE layer (rows), the chosen
    experts marked. Probability is drawn as grey over the page's own background (so it reads in light
    and dark themes) and sent as whole percents (uint8) to keep the page light. The chosen experts are a
    second heatmap (one colour, gaps elsewhere), not 1,472 scatter markers: a heatmap is one image, so the
    browser redraws it at once (the markers were ~25,000 DOM changes per redraw). It does not depend on the
    layer being viewed, so moving through layers leaves it as it is."""
    E = probs.shape[1]
    pct = np.rint(np.clip(probs, 0, 1) * 100).astype(np.uint8)
    chosen = np.where(mask, 1.0, np.nan)
    y = np.asarray(layers)
    data = [dict(type="heatmap", z=pct, x=np.arange(E), y=y, zmin=0, zmax=100,
                 name="router probability", colorscale=[[0, "rgba(128,128,128,0)"], [1, "rgba(128,128,128,0.9)"]],
                 colorbar=dict(title=dict(text="router<br>probability %", side="top"), thickness=10, len=0.7),
                 hovertemplate="layer %{y}, expert %{x}<br>router probability %{z}%<extra></extra>"),
            dict(type="heatmap", z=chosen, x=np.arange(E), y=y, zmin=0, zmax=1, showscale=False,
                 name="chosen by the token", showlegend=True, hoverinfo="skip",
                 colorscale=[[0, CHOSEN], [1, CHOSEN]])]
    size = E // N_SHARDS
    layout = dict(
        xaxis=dict(title=dict(text="expert (ticks at the 8 shard boundaries)"), tickvals=list(range(0, E + 1, size)),
                   range=[-0.5, E - 0.5], showgrid=False, zeroline=False),
        yaxis=dict(title=dict(text="layer"), autorange="reversed", showgrid=False, zeroline=False),
        height=460, margin=dict(l=10, r=10, t=10, b=10), showlegend=True,
        legend=dict(orientation="h", y=-0.16, x=0), meta={"chart": "routing_fingerprint"})
    return go.Figure(dict(data=data, layout=layout))
