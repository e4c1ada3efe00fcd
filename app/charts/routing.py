"""Figures of the Routing explorer: pure functions from the data of app/routing.py to Vega-Lite specs whose
shape never changes (the browser keeps each chart and swaps its named datasets)."""
from __future__ import annotations

import base64
import io
import json
from functools import lru_cache

import numpy as np
import pandas as pd
from PIL import Image

from app import theme
from app.routing import GRID_COLS, N_SHARDS
from model.config import K3Config

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


def cell_centre(expert: int, n_experts: int = K3Config.full().n_routed_experts) -> tuple[float, float]:
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
    # small column types: the frame travels to the browser (as Arrow) on every layer key
    experts = pd.DataFrame({
        "expert": grid["expert"].astype(np.int16), "col": grid["col"].astype(np.int8),
        "row": grid["row"].astype(np.int8), "shard": grid["shard"].astype(np.int8),
        "prob": grid["prob"].astype(np.float32), "bias": grid["bias"].astype(np.float32),
        "biased": grid["biased"].astype(np.float32), "rank": grid["rank"].astype(np.int16),
        "load": grid["load"].astype(np.int16), "load_class": grid["load_class"], "line": lines,
        "chosen": grid["chosen"].astype(bool), "knocked": (grid["status"] == "knocked out").to_numpy(),
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


CHANGED_SERIES = ("no longer chosen", "newly chosen")     # of the token's experts before the change


@lru_cache(maxsize=1)
def _changed_template() -> str:
    tooltip = [{"field": "layer", "type": "ordinal"}, {"field": "series", "type": "nominal", "title": "experts"},
               {"field": "experts", "type": "quantitative", "title": "how many"}]
    bars = {"data": {"name": "changed"}, "mark": {"type": "bar"},
            "encoding": {
                "x": {"field": "layer", "type": "ordinal", "title": "layer",
                      "axis": {"labelAngle": 0, "labelExpr": "datum.value % 10 == 0 ? datum.label : ''"}},
                "xOffset": {"field": "series", "type": "nominal", "sort": list(CHANGED_SERIES)},
                # at least 0..16 (a token's experts), so the empty plot has a sensible axis
                "y": {"field": "experts", "type": "quantitative", "title": "experts",
                      "scale": {"domain": {"unionWith": [0, 16]}}, "axis": {"format": "d", "tickMinStep": 1}},
                "color": {"field": "series", "type": "nominal", "title": None,
                          "scale": {"domain": list(CHANGED_SERIES), "range": [CHOSEN, OI["blue"]]},
                          "legend": {"orient": "bottom", "direction": "horizontal"}},
                "tooltip": tooltip}}
    # a line in the middle of the plot while nothing is re-routed (its dataset is then one row, else none)
    note = {"data": {"name": "note"}, "mark": {"type": "text", "fontSize": 14, "color": "#888888"},
            "encoding": {"text": {"field": "text", "type": "nominal"}, "x": {"value": {"expr": "width / 2"}},
                         "y": {"value": {"expr": "height / 2"}}}}
    spec = {"$schema": "https://vega.github.io/schema/vega-lite/v5.json", "width": "container", "height": 230,
            "layer": [bars, note],
            "usermeta": {"chart": "routing_changed", "embedOptions": {"renderer": "canvas"}}}
    return json.dumps(spec)


def changed_spec(df: pd.DataFrame, note: str | None = None) -> dict:
    """Per later layer: how many of the token's original experts were dropped and how many are new, as
    grouped bars (a Vega-Lite spec whose data is its named datasets "changed" and "note"; the spec never
    changes, so the chart stays in the browser while the routing goes back and forth). `note`: a line shown
    in the plot, for when nothing is re-routed (`df` then has no rows)."""
    spec = json.loads(_changed_template())
    layers = df["layer"].astype(int).to_numpy()
    spec["datasets"] = {
        "changed": pd.DataFrame({
            "layer": np.repeat(layers, 2), "series": np.tile(CHANGED_SERIES, len(layers)),
            "experts": np.column_stack([df["dropped"], df["added"]]).reshape(-1).astype(int)}),
        "note": pd.DataFrame({"text": [note] if note else []}, dtype=str),
    }
    return spec


PREDICTION_PANELS = ("model's own routing", "your re-routing")


@lru_cache(maxsize=3)
def _predictions_template(theme_type: str | None) -> str:
    x = {"field": "prob", "type": "quantitative", "title": None,
         "axis": {"format": ".2~%", "tickCount": 4, "grid": True}}
    y = {"field": "label", "type": "nominal", "title": None, "sort": {"field": "rank", "op": "min"},
         "axis": {"labelLimit": 130, "ticks": False}}
    layer = [
        {"mark": {"type": "bar"},
         "encoding": {"x": x, "y": y,
                      "color": {"field": "panel", "type": "nominal", "legend": None,
                                "scale": {"domain": list(PREDICTION_PANELS), "range": [theme.K2, theme.ACCENT]}},
                      "tooltip": [{"field": "token", "type": "nominal"},
                                  {"field": "prob", "type": "quantitative", "title": "probability", "format": ".2%"}]}},
        {"mark": {"type": "text", "align": "left", "dx": 3, "color": theme.ink(theme_type)},
         "encoding": {"x": x, "y": y, "text": {"field": "prob", "type": "quantitative", "format": ".1%"}}},
        # an invisible tick at 1.35x the largest probability on both panels: room for the labels
        {"mark": {"type": "tick", "opacity": 0}, "encoding": {"x": {"field": "room", "type": "quantitative"}, "y": y}},
    ]
    spec = {"$schema": "https://vega.github.io/schema/vega-lite/v5.json",
            "data": {"name": "predictions"},
            "facet": {"column": {"field": "panel", "type": "nominal", "sort": list(PREDICTION_PANELS), "title": None}},
            "spec": {"width": 170, "height": 150, "layer": layer},
            "resolve": {"scale": {"y": "independent"}},
            "config": {"header": {"labelFontSize": 12}},              # in the config: presenter mode enlarges it
            "usermeta": {"chart": "routing_predictions", "embedOptions": {"renderer": "canvas"}}}
    return json.dumps(spec)


def predictions_spec(before: pd.DataFrame, after: pd.DataFrame, labels_before: list[str],
                     labels_after: list[str], theme_type: str | None = None) -> dict:
    """Top-5 next tokens with the model's own routing and with the re-routing, side by side on one
    probability scale (a Vega-Lite spec with its data in the named dataset "predictions"). The
    percentages are text in the page's text colour for `theme_type` ("light", "dark")."""
    spec = json.loads(_predictions_template(theme_type))
    room = 1.35 * float(max(before["prob"].max(), after["prob"].max()))
    parts = []
    for panel, df, labels in zip(PREDICTION_PANELS, (before, after), (labels_before, labels_after)):
        seen: dict[str, int] = {}
        axis = []
        for label in labels:                       # two tokens can look alike (e.g. two kinds of space)
            seen[label] = seen.get(label, 0) + 1
            axis.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
        parts.append(pd.DataFrame({"panel": panel, "rank": df["rank"].astype(int).to_numpy(), "label": axis,
                                   "token": list(labels), "prob": df["prob"].astype(float).to_numpy(),
                                   "room": room}))
    spec["datasets"] = {"predictions": pd.concat(parts, ignore_index=True)}
    return spec


FINGERPRINT_ALPHA = 0.9            # a probability of 1 is grey at this opacity


FINGERPRINT_MARK = 1                # a chosen expert is drawn this many columns to each side too (3 wide)


def fingerprint_image(probs: np.ndarray, mask: np.ndarray) -> str:
    """The fingerprint as a PNG data URL, one pixel per (layer, expert): grey whose opacity is the router
    probability (so it reads on the light and the dark page), the chosen experts in the outline colour, each
    drawn FINGERPRINT_MARK columns wider on both sides so that it shows at about one pixel per expert.
    A palette image: the opacities 0..230 (0.9 x 255) are palette entries 0..230 of one grey, the chosen colour
    is entry 255, so a pixel is one byte where RGBA took four (the live instance's fingerprint: 126 -> 74 KB,
    sent on every change of the routing, and ~3 ms to write instead of ~19 ms)."""
    alpha = np.rint(np.clip(probs, 0, 1) * FINGERPRINT_ALPHA * 255).astype(np.uint8)
    marked = mask.copy()
    for d in range(1, FINGERPRINT_MARK + 1):
        marked[:, d:] |= mask[:, :-d]
        marked[:, :-d] |= mask[:, d:]
    index = np.where(marked, np.uint8(255), alpha)
    image = Image.fromarray(index, "P")
    r, g, b = (int(CHOSEN[i:i + 2], 16) for i in (1, 3, 5))
    image.putpalette([128, 128, 128] * 255 + [r, g, b])
    buf = io.BytesIO()
    image.save(buf, "PNG", transparency=bytes(range(255)) + b"\xff", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


FINGERPRINT_HEIGHT = 460
FINGERPRINT_LISTED = 16            # chosen experts a layer's tooltip names (five lines at most; dense has 896)


@lru_cache(maxsize=2)
def _fingerprint_template(n_experts: int, n_layers: int) -> str:
    size = n_experts // N_SHARDS
    x = {"field": "expert", "type": "quantitative", "title": "expert (ticks at the 8 shard boundaries)",
         "scale": {"domain": [-0.5, n_experts - 0.5], "nice": False, "zero": False},
         "axis": {"values": list(range(0, n_experts + 1, size)), "grid": False}}
    y = {"field": "layer", "type": "quantitative", "title": "layer",
         "scale": {"nice": False, "zero": False, "reverse": True, "padding": 0},
         "axis": {"grid": False, "tickMinStep": 1}}
    tooltip = [{"field": "layer", "type": "quantitative"},
               {"field": "chosen", "type": "quantitative", "title": "experts chosen"},
               {"field": "experts", "type": "nominal", "title": "which (most probable first)"},
               {"field": "probs", "type": "nominal", "title": "their router probability"}]
    layers = [
        # two corners half a cell outside the first and last layer: they set the y scale, the gradient legend
        {"data": {"name": "frame"}, "mark": {"type": "point", "opacity": 0},
         "encoding": {"x": x, "y": y,
                      "color": {"field": "pct", "type": "quantitative", "title": ["router", "probability %"],
                                "scale": {"domain": [0, 100], "range": ["rgba(128,128,128,0)",
                                                                         "rgba(128,128,128,0.9)"]},
                                "legend": {"orient": "right", "gradientLength": 160}}}},
        # the chosen experts' colour, as a key under the chart (its one mark is never seen)
        {"data": {"values": [{}]}, "mark": {"type": "point", "filled": True, "opacity": 0},
         "encoding": {"fill": {"datum": "chosen by the token", "type": "nominal", "title": None,
                               "scale": {"range": [CHOSEN]},
                               "legend": {"orient": "bottom", "symbolType": "square", "symbolOpacity": 1}}}},
        # every cell at once, as one image (82,432 marks would take the browser far longer to draw); the chosen
        # experts are its coloured pixels
        {"data": {"name": "image"}, "mark": {"type": "image", "aspect": False, "smooth": False,
                                               "align": "left", "baseline": "top",
                                               "width": {"expr": "width"}, "height": {"expr": "height"}},
         "encoding": {"url": {"field": "url", "type": "nominal"}, "x": {"value": 0}, "y": {"value": 0}}},
        # one band per layer over the image, to point at: its tooltip lists the layer's chosen experts (a mark per
        # chosen cell, 1,472 of them, was ~150 ms of the page's load in the browser, against ~10 ms for these 92)
        {"data": {"name": "rows"}, "mark": {"type": "rect", "x": 0, "x2": {"expr": "width"},
                                              "height": {"expr": f"height / {n_layers}"}, "fill": "#808080",
                                              "fillOpacity": 0.001, "cursor": "crosshair"},
         "encoding": {"y": y, "tooltip": tooltip}},
    ]
    spec = {"$schema": "https://vega.github.io/schema/vega-lite/v5.json",
            "width": "container", "height": FINGERPRINT_HEIGHT, "layer": layers,
            "resolve": {"scale": {"color": "independent", "fill": "independent"}},
            "config": {"view": {"stroke": None}},
            "usermeta": {"chart": "routing_fingerprint", "embedOptions": {"renderer": "canvas"}}}
    return json.dumps(spec)


def fingerprint_spec(layers: list[int], probs: np.ndarray, mask: np.ndarray) -> dict:
    """Router probability of one token for every expert (columns) in every MoE layer (rows), the chosen
    experts coloured: an image of all cells (app.charts.routing.fingerprint_image) under one band per layer to
    point at, whose tooltip lists that layer's chosen experts, most probable first, and their probabilities; in
    a Vega-Lite spec that never changes (its data: named datasets)."""
    E = probs.shape[1]
    spec = json.loads(_fingerprint_template(E, len(layers)))
    lay = np.asarray(layers)
    experts, chances = [], []
    for row, chosen in zip(probs, mask):
        ids = np.flatnonzero(chosen)
        ids = ids[np.argsort(-row[ids], kind="stable")]
        shown = ", ".join(map(str, ids[:FINGERPRINT_LISTED]))
        experts.append(shown + (f" and {len(ids) - FINGERPRINT_LISTED} more (all in the CSV)"
                                if len(ids) > FINGERPRINT_LISTED else ""))
        chances.append(f"{row[ids[0]]:.3f} – {row[ids[-1]]:.3f}" if len(ids) > 1 else
                       f"{row[ids[0]]:.3f}" if len(ids) else "–")
    spec["datasets"] = {
        "frame": pd.DataFrame({"expert": [-0.5, E - 0.5], "layer": [lay[0] - 0.5, lay[-1] + 0.5], "pct": [0, 100]}),
        "image": pd.DataFrame({"url": [fingerprint_image(probs, mask)]}),
        "rows": pd.DataFrame({"layer": lay.astype(np.int16), "chosen": mask.sum(1).astype(np.int16),
                              "experts": experts, "probs": chances}),
    }
    return spec


def fingerprint_table(layers: list[int], probs: np.ndarray, mask: np.ndarray) -> pd.DataFrame:
    """Every cell of the fingerprint (its CSV): layer, expert, router probability, chosen."""
    L, E = probs.shape
    return pd.DataFrame({"layer": np.repeat(np.asarray(layers), E), "expert": np.tile(np.arange(E), L),
                         "router probability": probs.reshape(-1), "chosen": mask.reshape(-1)})
