"""Figures of the Attention Residuals page: pure functions from frames / arrays to Vega-Lite specs (their
data in named datasets), drawn by the browser's Vega without plotly."""
from __future__ import annotations

import numpy as np
import pandas as pd

from app import theme
from app.charts.vega import HOVER_STEPS, SCHEMA, hover_bands, hover_layer, usermeta

FULL = theme.OKABE_ITO["vermillion"]
BLOCK = theme.OKABE_ITO["blue"]
GREY = theme.OKABE_ITO["grey"]
OUTLINE = "rgba(0,0,0,0.4)"


def _hover(name: str, x: dict, y: dict, tooltip: list, **encoding) -> dict:
    """Invisible points with a nearest-point selection: pointing anywhere near a line shows the tooltip
    of its closest point (a Voronoi cell per point), without drawing hundreds of markers."""
    return {"mark": {"type": "point", "opacity": 0, "size": 60},
            "params": [{"name": name, "select": {"type": "point", "on": "pointerover", "nearest": True,
                                                 "clear": "pointerout"}}],
            "encoding": {"x": x, "y": y, "tooltip": tooltip, **encoding}}


def links_spec(series: pd.DataFrame, mark: int, block_size: int, paper_limit: int = 100,
               theme_type: str | None = None) -> dict:
    """Links per token vs depth, Full and Block, log-log, with K3's depth marked (a dashed line, the two
    counts labelled) and the depths the K3 report calls affordable for Full shaded."""
    names = ["Full AttnRes", f"Block AttnRes (blocks of {block_size})"]
    links = pd.concat([pd.DataFrame({"layers": series["layers"].to_numpy().astype(int), "design": name,
                                     "links": series[col].to_numpy().astype(int)})
                       for name, col in zip(names, ("Full", "Block"))], ignore_index=True)
    at = series[series["layers"] == mark].iloc[0]
    k3 = pd.DataFrame({"layers": [int(mark)] * 2, "design": names, "links": [int(at["Full"]), int(at["Block"])],
                       "text": [f"{int(at['Full']):,}", f"{int(at['Block']):,}"], "label": f"K3: L = {mark}"})
    max_layers = int(series["layers"].max())
    region = pd.DataFrame({"start": [1.0], "end": [float(min(paper_limit, max_layers))],
                           "label": [f"L < {paper_limit}: Full's arithmetic 'affordable'\n(K3 report, section 2.2)"]})
    top_value = float(series[["Full", "Block"]].to_numpy().max())
    top = int(np.ceil(np.log10(top_value)))
    ink = theme.ink(theme_type)
    x_scale = {"type": "log", "domain": [1, max_layers], "nice": False}
    x = {"field": "layers", "type": "quantitative", "title": "depth L (layers, log)", "scale": x_scale,
         "axis": {"values": sorted({v for v in (1, 2, 5, 10, 20, 50, mark, 200) if v <= max_layers}),
                  "format": "d", "grid": True}}
    y = {"field": "links", "type": "quantitative",
         "title": ["links per token", "(candidates summed over every read, log)"],
         "scale": {"type": "log", "domain": [0.8, top_value * 1.3], "nice": False},
         "axis": {"values": [10 ** k for k in range(top + 1)], "format": ",d"}}
    colour = {"field": "design", "type": "nominal", "title": None, "scale": {"domain": names, "range": [FULL, BLOCK]},
              "legend": {"orient": "bottom", "direction": "horizontal", "labelLimit": 320, "symbolType": "stroke",
                         "symbolStrokeWidth": 3}}
    tooltip = [{"field": "design", "title": "design"}, {"field": "layers", "type": "quantitative", "title": "L"},
               {"field": "links", "type": "quantitative", "title": "links", "format": ","}]
    wide = pd.DataFrame({"layers": series["layers"].to_numpy().astype(int), "full": series["Full"].to_numpy().astype(int),
                         "block": series["Block"].to_numpy().astype(int)})
    return {
        "$schema": SCHEMA, "width": "container", "height": 480,
        "datasets": {"links": links, "links_hover": hover_bands(wide, "layers", HOVER_STEPS, log=True), "k3": k3,
                     "region": region},
        "layer": [
            {"data": {"name": "region"}, "mark": {"type": "rect", "color": GREY, "opacity": 0.10},
             "encoding": {"x": {"field": "start", "type": "quantitative", "scale": x_scale}, "x2": {"field": "end"}}},
            # the label in the region's empty top-left corner (the lines start at the bottom left)
            {"data": {"name": "region"}, "mark": {"type": "text", "align": "left", "baseline": "top", "dx": 6,
                                                  "y": 6, "lineBreak": "\n", "color": ink},
             "encoding": {"x": {"field": "start", "type": "quantitative", "scale": x_scale}, "text": {"field": "label"}}},
            # beneath everything but the shaded region, so that every point of the plot reads its band
            hover_layer("links_point", "links_hover", x, [
                {"field": "layers", "type": "quantitative", "title": "L"},
                {"field": "full", "type": "quantitative", "title": f"{names[0]}: links", "format": ","},
                {"field": "block", "type": "quantitative", "title": f"{names[1]}: links", "format": ","}]),
            {"data": {"name": "k3"}, "transform": [{"filter": {"field": "design", "equal": names[0]}}],
             "mark": {"type": "rule", "strokeDash": [5, 4], "strokeWidth": 1, "color": GREY},
             "encoding": {"x": {"field": "layers", "type": "quantitative", "scale": x_scale}}},
            {"data": {"name": "k3"}, "transform": [{"filter": {"field": "design", "equal": names[0]}}],
             "mark": {"type": "text", "align": "right", "baseline": "bottom", "dx": -5, "y": {"expr": "height - 4"},
                      "color": ink},
             "encoding": {"x": {"field": "layers", "type": "quantitative", "scale": x_scale},
                          "text": {"field": "label"}}},
            {"data": {"name": "links"}, "mark": {"type": "line", "strokeWidth": 2.5},
             "encoding": {"x": x, "y": y, "color": colour}},
            {"data": {"name": "k3"}, "mark": {"type": "circle", "size": 110, "opacity": 1, "stroke": OUTLINE,
                                              "strokeWidth": 1},
             "encoding": {"x": x, "y": y, "color": colour,
                          "tooltip": [{"field": "label", "title": "K3"}, *tooltip]}},
            {"data": {"name": "k3"}, "mark": {"type": "text", "align": "right", "dx": -9, "color": ink},
             "encoding": {"x": x, "y": y, "text": {"field": "text"}}},
        ],
        "usermeta": usermeta("attnres_links"),
    }


def depth_heatmap_spec(z: np.ndarray, rows: list[str], cols: list[str], row_bounds: list[int],
                       col_bounds: list[int], title: str) -> dict:
    """Every read of one token (rows) x its sources (columns); blank where a read had no such source.
    Block boundaries: dotted lines between the rows (and, in Full mode, the columns) where a block starts."""
    # Scale to the reads that choose between sources: a read with one candidate has weight 1 and would
    # otherwise push every other weight into the bottom of the colour scale (those cells are clamped).
    multi = z[np.isfinite(z).sum(1) > 1]
    zmax = float(np.nanmax(multi)) if multi.size and np.isfinite(multi).any() else 1.0
    i, j = np.nonzero(np.isfinite(z))
    rows_a, cols_a = np.asarray(rows, dtype=object), np.asarray(cols, dtype=object)
    cells = pd.DataFrame({"read": rows_a[i], "source": cols_a[j], "weight": z[i, j].astype(float)})
    x = {"field": "source", "type": "ordinal", "title": "source", "sort": list(cols),
         "scale": {"domain": list(cols), "paddingInner": 0, "paddingOuter": 0},
         "axis": {"values": [cols[k] for k in _ticks(cols)], "labelAngle": -45 if len(cols) > 12 else 0,
                  "grid": False, "labelOverlap": False, "labelFlush": False, "labelBound": False}}
    y = {"field": "read", "type": "ordinal", "title": "read (the module it feeds)", "sort": list(rows),
         "scale": {"domain": list(rows), "paddingInner": 0, "paddingOuter": 0},
         "axis": {"values": [rows[k] for k in _ticks(rows)], "grid": False, "labelOverlap": False,
                  "labelFlush": False, "labelBound": False}}
    line = {"type": "rule", "strokeDash": [2, 2], "strokeWidth": 1, "color": GREY}
    return {
        "$schema": SCHEMA, "width": "container", "height": 630,
        "title": {"text": title, "anchor": "start", "fontWeight": "bold"},
        "datasets": {"cells": cells,
                     "row_bounds": pd.DataFrame({"read": [rows[b] for b in row_bounds]}, dtype=object),
                     "col_bounds": pd.DataFrame({"source": [cols[b] for b in col_bounds]}, dtype=object)},
        "layer": [
            {"data": {"name": "cells"}, "mark": {"type": "rect"},
             "encoding": {"x": x, "y": y,
                          "color": {"field": "weight", "type": "quantitative", "title": "weight",
                                    "scale": {"scheme": "viridis", "domain": [0, zmax], "clamp": True},
                                    "legend": {"gradientLength": 300, "gradientThickness": 12}},
                          "tooltip": [{"field": "read", "title": "read"}, {"field": "source", "title": "source"},
                                      {"field": "weight", "type": "quantitative", "format": ".3f"}]}},
            # a rule at the start of the band of a block's first layer: between the blocks
            {"data": {"name": "row_bounds"}, "mark": line,
             "encoding": {"y": {"field": "read", "type": "ordinal", "bandPosition": 0}}},
            {"data": {"name": "col_bounds"}, "mark": line,
             "encoding": {"x": {"field": "source", "type": "ordinal", "bandPosition": 0}}},
        ],
        "config": {"view": {"stroke": None}},
        "usermeta": usermeta("attnres_heatmap"),
    }


def _ticks(labels: list[str], most: int = 26) -> list[int]:
    """Every label when there are few; otherwise the attention read/source of every 4th (8th, ...) layer,
    so the ticks fall on layer numbers a reader can count with."""
    if len(labels) <= most:
        return list(range(len(labels)))
    n_layers = sum(label.endswith(".attn") for label in labels)
    step = 4
    while n_layers / step > most - 2:
        step *= 2
    keep = {f"L{i}.attn" for i in range(0, n_layers, step)}
    return [i for i, label in enumerate(labels) if label in keep]


def retrieval_spec(profiles: dict[str, pd.DataFrame], source: int, reader: int,
                   theme_type: str | None = None) -> dict:
    """Weight that each earlier layer's output gets in one read, Full vs Block (log), the asked-for layer
    marked by a dashed line and a ring on each curve. The x axis spans the layers the read sees: 0 .. reader - 1
    before attention, 0 .. reader before the FFN (the reading layer's own attention output is a source then)."""
    colours = {"Full": FULL, "Block": BLOCK}
    names = [f"{name} AttnRes" for name in profiles]
    parts = []
    for name, df in profiles.items():
        d = df[df["layer"] >= 0]
        w = d["weight"].to_numpy().astype(float)
        parts.append(pd.DataFrame({"design": f"{name} AttnRes", "layer": d["layer"].to_numpy().astype(int),
                                   "weight": np.where(w > 0, w, np.nan),        # a log axis has no 0
                                   "held in": d["source"].to_numpy(), "source weight": d["source weight"].to_numpy(),
                                   "share": d["share"].to_numpy()}))
    weights = pd.concat(parts, ignore_index=True)
    hit = weights[weights["layer"] == source]
    w = weights["weight"].dropna()
    last = int(weights["layer"].max()) if len(weights) else reader - 1
    title = f"layer whose output is read (0 .. {last})"
    if last == reader:
        title += f"; layer {reader}: its attention output only"
    x = {"field": "layer", "type": "quantitative", "title": title,
         "scale": {"domain": [-1, last + 1], "nice": False, "zero": False},
         "axis": {"tickMinStep": 1, "tickCount": 10, "format": "d"}}
    y = {"field": "weight", "type": "quantitative", "title": f"weight in layer {reader}'s read (log)",
         "scale": {"type": "log", "nice": False}}
    if len(w):
        lo, hi = float(w.min()), float(w.max())
        y["scale"]["domain"] = [lo / 1.3, hi * 1.3]
        y["axis"] = {"values": _one_two_five(lo, hi), "format": "~g"}
    colour = {"field": "design", "type": "nominal", "title": None,
              "scale": {"domain": names, "range": [colours.get(n, GREY) for n in profiles]},
              "legend": {"orient": "bottom", "direction": "horizontal"}}
    tooltip = [{"field": "design", "title": "design"}, {"field": "layer", "type": "quantitative"},
               {"field": "weight", "type": "quantitative", "format": ".4f"}, {"field": "held in"},
               {"field": "source weight", "type": "quantitative", "format": ".3f"},
               {"field": "share", "type": "quantitative", "title": "layer's share of it", "format": ".3f"}]
    return {
        "$schema": SCHEMA, "width": "container", "height": 400,
        "datasets": {"weights": weights, "hit": hit, "marker": pd.DataFrame({"layer": [int(source)],
                                                                            "label": [f"layer {source}"]})},
        "layer": [
            {"data": {"name": "marker"}, "mark": {"type": "rule", "strokeDash": [5, 4], "strokeWidth": 1, "color": GREY},
             "encoding": {"x": {"field": "layer", "type": "quantitative"}}},
            {"data": {"name": "marker"}, "mark": {"type": "text", "baseline": "bottom", "y": 0, "dy": -4,
                                                  "color": theme.ink(theme_type)},
             "encoding": {"x": {"field": "layer", "type": "quantitative"}, "text": {"field": "label"}}},
            {"data": {"name": "weights"}, "mark": {"type": "line", "strokeWidth": 2, "point": {"size": 22, "filled": True}},
             "encoding": {"x": x, "y": y, "color": colour}},
            {"data": {"name": "weights"}, **_hover("retrieval_hover", x, y, tooltip)},
            {"data": {"name": "hit"}, "mark": {"type": "point", "filled": False, "size": 200, "strokeWidth": 2.5,
                                               "opacity": 1},
             "encoding": {"x": x, "y": y, "color": colour, "tooltip": tooltip}},
        ],
        "usermeta": usermeta("attnres_retrieval"),
    }


def _one_two_five(lo: float, hi: float) -> list[float]:
    out = []
    for k in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1):
        out += [m * 10.0 ** k for m in (1, 2, 5)]
    return [v for v in out if lo / 2 <= v <= hi * 2]


def vectors_spec(df: pd.DataFrame, full_vectors: int, block_size: int, d: int,
                 theme_type: str | None = None) -> dict:
    """[d]-vectors kept alive per token vs block size (log), Full as a flat line, Block as steps, the
    chosen block size marked and labelled with its vectors and values."""
    sizes = df["block size"].to_numpy().astype(int)
    vectors = pd.concat([
        pd.DataFrame({"design": "Full AttnRes", "block size": sizes, "blocks": "none: every output its own source",
                      "vectors": int(full_vectors)}),
        pd.DataFrame({"design": "Block AttnRes", "block size": sizes, "blocks": df["blocks"].astype(int).astype(str),
                      "vectors": df["vectors"].to_numpy().astype(int)}),
    ], ignore_index=True)
    at = df[df["block size"] == block_size]
    chosen = pd.DataFrame({"design": "chosen block size", "block size": at["block size"].to_numpy().astype(int),
                           "blocks": at["blocks"].astype(int).astype(str).to_numpy(),
                           "vectors": at["vectors"].to_numpy().astype(int),
                           "label": [f"{int(v)} vectors = {int(v) * d:,} values" for v in at["vectors"]]})
    names = ["Full AttnRes", "Block AttnRes", "chosen block size"]
    colour = {"field": "design", "type": "nominal", "title": None,
              "scale": {"domain": names, "range": [FULL, BLOCK, theme.ACCENT]},
              "legend": {"orient": "bottom", "direction": "horizontal"}}
    x = {"field": "block size", "type": "quantitative", "title": "block size (layers per block)",
         "scale": {"domain": [int(sizes.min()), int(sizes.max())], "nice": False, "zero": False},
         "axis": {"tickMinStep": 1, "tickCount": 10, "format": "d"}}
    y = {"field": "vectors", "type": "quantitative", "title": "vectors kept per token (log)",
         "scale": {"type": "log", "domain": [1.5, full_vectors * 1.6], "nice": False},
         "axis": {"values": [2, 5, 10, 20, 50, 100, 200]}}
    tooltip = [{"field": "design", "title": "design"}, {"field": "block size", "type": "quantitative"},
               {"field": "blocks"}, {"field": "vectors", "type": "quantitative"}]
    # the label on the side with room: right of the point, left of it near the right end
    right = block_size <= 0.6 * int(sizes.max())

    def design(name):
        return [{"filter": {"field": "design", "equal": name}}]

    wide = pd.DataFrame({"block size": sizes, "full": int(full_vectors), "blocks": df["blocks"].to_numpy().astype(int),
                         "block": df["vectors"].to_numpy().astype(int)})
    return {
        "$schema": SCHEMA, "width": "container", "height": 380,
        "datasets": {"vectors": vectors, "vectors_hover": hover_bands(wide, "block size", HOVER_STEPS), "chosen": chosen},
        "layer": [
            hover_layer("vectors_point", "vectors_hover", x, [
                {"field": "block size", "type": "quantitative"},
                {"field": "full", "type": "quantitative", "title": "Full AttnRes: vectors"},
                {"field": "blocks", "type": "quantitative", "title": "Block AttnRes: blocks"},
                {"field": "block", "type": "quantitative", "title": "Block AttnRes: vectors"}]),
            {"data": {"name": "vectors"}, "transform": design("Full AttnRes"),
             "mark": {"type": "line", "strokeWidth": 2.5}, "encoding": {"x": x, "y": y, "color": colour}},
            # steps: the count holds from one block size until the next one changes it
            {"data": {"name": "vectors"}, "transform": design("Block AttnRes"),
             "mark": {"type": "line", "strokeWidth": 2.5, "interpolate": "step-after"},
             "encoding": {"x": x, "y": y, "color": colour}},
            {"data": {"name": "chosen"}, "mark": {"type": "circle", "size": 150, "opacity": 1, "stroke": OUTLINE,
                                                  "strokeWidth": 1},
             "encoding": {"x": x, "y": y, "color": colour, "tooltip": tooltip}},
            {"data": {"name": "chosen"}, "mark": {"type": "text", "align": "left" if right else "right",
                                                  "baseline": "bottom", "dx": 7 if right else -7, "dy": -6,
                                                  "color": theme.ink(theme_type)},
             "encoding": {"x": x, "y": y, "text": {"field": "label"}}},
        ],
        "usermeta": usermeta("attnres_vectors"),
    }
