"""Figures of the Expert parallelism page: pure functions from arrays and frames to Vega-Lite specs (their
data in named datasets), drawn by the browser's Vega without plotly."""
from __future__ import annotations

import numpy as np
import pandas as pd

from app import theme
from app.charts.vega import SCHEMA, usermeta

# diverging around an even share (1): under-loaded blue, even light grey, over-loaded vermillion
LOAD_RANGE = [theme.OKABE_ITO["blue"], "#dddddd", theme.OKABE_ITO["vermillion"]]
# sequential, colour-blind safe, legible on both themes: light sky -> Okabe-Ito blue
COUNT_RANGE = ["#d8ecf7", theme.OKABE_ITO["blue"]]
CELL_TEXT = ("#31333f", "#ffffff")      # the count inside a traffic cell: on a light cell, on a dark one
ALL_CELLS = 64 * 64            # up to this many, every traffic cell is drawn; above, only those with traffic
RANK_PARTS = (("dispatch", "bytes sent: dispatch", theme.OKABE_ITO["blue"]),
              ("combine", "bytes sent: combine", theme.OKABE_ITO["orange"]))


def _device_axis(G: int, title: str, field: str = "lo", reverse: bool = False) -> dict:
    """A quantitative device axis whose cells span d - 0.5 .. d + 0.5, ticks every G // 16 devices."""
    step = max(1, G // 16)
    return {"field": field, "type": "quantitative", "title": title,
            "scale": {"domain": [-0.5, G - 0.5], "nice": False, "zero": False, "reverse": reverse},
            "axis": {"values": list(range(0, G, step)), "format": "d", "grid": False}}


def shard_load_spec(pairs: np.ndarray, layers: list[int], tokens: np.ndarray) -> dict:
    """Pairs per shard per layer, coloured relative to an even share (1 = even), first layer at the top."""
    L, G = pairs.shape
    even = pairs.sum(1, keepdims=True) / G
    ratio = pairs / np.maximum(even, 1e-12)
    device = np.tile(np.arange(G), L)
    cells = pd.DataFrame({"layer": np.repeat(np.asarray(layers, dtype=int), G), "device": device,
                          "pairs": pairs.reshape(-1).astype(int),
                          "tokens": np.asarray(tokens).reshape(-1).astype(int), "ratio": ratio.reshape(-1)})
    return {
        "$schema": SCHEMA, "width": "container", "height": 460,
        "datasets": {"loads": cells}, "data": {"name": "loads"},
        "transform": [{"calculate": "datum.device - 0.5", "as": "lo"}, {"calculate": "datum.device + 0.5", "as": "hi"},
                      {"calculate": "datum.layer - 0.5", "as": "top"}, {"calculate": "datum.layer + 0.5", "as": "bottom"}],
        # each cell one pixel wider and taller than its slot, under the next: edge to edge, the page background
        # shows through the anti-aliased seams (dark lines on the dark theme)
        "mark": {"type": "rect", "x2Offset": 1, "y2Offset": 1},
        "encoding": {
            "x": _device_axis(G, f"device (shard of {896 // G} experts)"), "x2": {"field": "hi"},
            "y": {"field": "top", "type": "quantitative", "title": "MoE layer",
                  "scale": {"domain": [min(layers) - 0.5, max(layers) + 0.5], "nice": False, "zero": False,
                            "reverse": True},
                  "axis": {"values": [v for v in layers if v % 10 == 0], "format": "d", "grid": False}},
            "y2": {"field": "bottom"},
            "color": {"field": "ratio", "type": "quantitative", "title": "load / even share",
                      "scale": {"domain": [0, 1, 2], "range": LOAD_RANGE, "clamp": True},
                      "legend": {"values": [0, 0.5, 1, 1.5, 2], "gradientLength": 300}},
            "tooltip": [{"field": "layer", "title": "MoE layer"}, {"field": "device"},
                        {"field": "pairs", "title": "(token, expert) pairs"}, {"field": "tokens", "title": "from tokens"},
                        {"field": "ratio", "type": "quantitative", "title": "× an even share", "format": ".2f"}]},
        "usermeta": usermeta("parallel_loads"),
    }


def fanout_spec(fan: np.ndarray, G: int, k: int, expected: float) -> dict:
    """How many distinct devices each token's k experts sit on (every token, every layer); the live mean
    as a solid line, the expectation under uniform routing dashed."""
    top = min(G, k)
    counts = np.bincount(np.asarray(fan).reshape(-1), minlength=top + 1)[1:top + 1]
    x = np.arange(1, top + 1)
    share = counts / max(1, counts.sum())
    mean = float(np.mean(fan))
    blue, vermillion = theme.OKABE_ITO["blue"], theme.OKABE_ITO["vermillion"]
    bars = pd.DataFrame({"devices": x, "token_layers": counts.astype(int), "share": share})
    lines = pd.DataFrame({"x": [mean, float(expected)], "label": [f"live mean {mean:.2f}", f"uniform routing {expected:.2f}"],
                          "what": ["live routing, mean", "uniform routing, expected"]})
    # the label of the line further right goes right of it (unless the plot ends there), the other's left, on
    # two rows, so the two never overlap
    right = int(np.argmax(lines["x"].to_numpy()))
    room = top + 0.6 - float(lines["x"].iloc[right]) > 0.25 * top       # enough plot right of the line for its label
    lines["side"] = ["right" if i == right and room else "left" for i in range(2)]
    lines["row"] = [1 if i == right else 0 for i in range(2)]
    y_top = float(share.max()) * 1.15 + 0.05                     # room above the bars for the two labels
    xs = {"type": "quantitative", "scale": {"domain": [0.4, top + 0.6], "nice": False, "zero": False},
          "title": f"distinct devices among a token's {k} experts",
          "axis": {"format": "d", "grid": False} | ({"values": list(range(1, top + 1))} if top <= 20 else {})}
    line_colour = {"field": "what", "type": "nominal", "legend": None,
                   "scale": {"domain": list(lines["what"]), "range": [blue, vermillion]}}
    text = lambda side: {
        "data": {"name": "lines"}, "transform": [{"filter": f"datum.side == '{side}'"}],
        "mark": {"type": "text", "align": "left" if side == "right" else "right", "dx": 5 if side == "right" else -5,
                 "baseline": "top", "y": {"expr": "4 + 18 * datum.row"}, "fontWeight": "bold"},
        "encoding": {"x": {"field": "x", **xs}, "text": {"field": "label"}, "color": line_colour}}
    return {
        "$schema": SCHEMA, "width": "container", "height": 340,
        "datasets": {"fanout": bars, "lines": lines},
        "layer": [
            {"data": {"name": "fanout"}, "mark": {"type": "rect", "color": theme.MOE},
             "transform": [{"calculate": "datum.devices - 0.4", "as": "lo"}, {"calculate": "datum.devices + 0.4", "as": "hi"}],
             "encoding": {"x": {"field": "lo", **xs}, "x2": {"field": "hi"},
                          "y": {"field": "share", "type": "quantitative", "title": "share of (token, layer)",
                                "axis": {"format": ".0%", "values": [v / 10 for v in range(11) if v / 10 <= y_top]},
                                "scale": {"domain": [0, y_top], "nice": False}},
                          "y2": {"datum": 0},
                          "tooltip": [{"field": "devices", "title": "distinct devices"},
                                      {"field": "token_layers", "title": "(token, layer)s", "format": ","},
                                      {"field": "share", "type": "quantitative", "format": ".1%"}]}},
            {"data": {"name": "lines"}, "mark": {"type": "rule", "strokeWidth": 2},
             "encoding": {"x": {"field": "x", **xs}, "color": line_colour,
                          "strokeDash": {"field": "what", "type": "nominal", "legend": None,
                                         "scale": {"domain": list(lines["what"]), "range": [[1, 0], [6, 4]]}},
                          "tooltip": [{"field": "what", "title": "line"},
                                      {"field": "x", "type": "quantitative", "title": "devices per token", "format": ".2f"}]}},
            text("left"), text("right"),
        ],
        "usermeta": usermeta("parallel_fanout"),
    }


def traffic_spec(M: np.ndarray, unit: str) -> dict:
    """All-to-all matrix: rows are source devices of the tokens (0 at the top), columns the experts'
    devices; the count written in every cell up to 16 devices. Above 64 devices only the cells with
    traffic are drawn, on a background of the colour of 0 (at 896 devices the matrix has 802,816 cells)."""
    G = M.shape[0]
    src, dst = np.divmod(np.arange(G * G), G)
    values = np.asarray(M).reshape(-1).astype(int)
    keep = np.ones(G * G, dtype=bool) if G * G <= ALL_CELLS else values > 0
    top = max(1, int(values.max()))
    cells = pd.DataFrame({"source": src[keep], "destination": dst[keep], "count": values[keep]})
    edges = [{"calculate": "datum.destination - 0.5", "as": "x0"}, {"calculate": "datum.destination + 0.5", "as": "x1"},
             {"calculate": "datum.source - 0.5", "as": "y0"}, {"calculate": "datum.source + 0.5", "as": "y1"}]
    x = _device_axis(G, "destination device (where the expert lives)", "x0")
    y = _device_axis(G, "source device (where the token is)", "y0", reverse=True)
    colour = {"field": "count", "type": "quantitative", "title": unit,
              "scale": {"domain": [0, top], "range": COUNT_RANGE},
              "legend": {"gradientLength": 300, "format": "d", "tickMinStep": 1}}
    layers = []
    if not keep.all():
        whole = lambda axis: {**{k: v for k, v in axis.items() if k != "field"}, "datum": -0.5}
        layers.append({"data": {"values": [{}]}, "mark": {"type": "rect", "color": COUNT_RANGE[0]},
                       "encoding": {"x": whole(x), "x2": {"datum": G - 0.5}, "y": whole(y), "y2": {"datum": G - 0.5}}})
    layers.append({"data": {"name": "traffic"}, "transform": edges, "mark": {"type": "rect"},
                   "encoding": {"x": x, "x2": {"field": "x1"}, "y": y, "y2": {"field": "y1"}, "color": colour,
                                "tooltip": [{"field": "source", "title": "from device"},
                                            {"field": "destination", "title": "to device"},
                                            {"field": "count", "title": unit, "format": ","}]}})
    if G <= 16:
        light_text = f"datum.count <= {top / 2}"
        layers.append({"data": {"name": "traffic"}, "mark": {"type": "text"},
                       "encoding": {"x": {**x, "field": "destination"}, "y": {**y, "field": "source"},
                                    "text": {"field": "count"},
                                    "color": {"condition": {"test": light_text, "value": CELL_TEXT[0]},
                                              "value": CELL_TEXT[1]}}})
    spec = {"$schema": SCHEMA, "width": "container", "height": 420,
            "datasets": {"traffic": cells}, "layer": layers, "usermeta": usermeta("parallel_traffic")}
    return spec


def bytes_spec(df: pd.DataFrame, theme_type: str | None = None) -> dict:
    """KB one token sends per MoE layer under each scheme, K2 grey, K3's latent blue, full width orange,
    each bar labelled with its values and KB."""
    d = df.reset_index(drop=True)
    kinds = ["Kimi K2", "K3 latent", "K3 at full width"]
    bars = pd.DataFrame({
        "what": d["what is sent"].to_numpy(), "values": d["values per token"].to_numpy().astype(float),
        "kb": d["KB per token (BF16)"].to_numpy().astype(float), "how": d["how"].to_numpy(),
        "kind": [kinds[0] if "K2" in w else kinds[1] if "latent" in w else kinds[2] for w in d["what is sent"]]})
    bars["label"] = [f"{v:,.0f} values = {b:,.1f} KB" for v, b in zip(bars["values"], bars["kb"])]
    x = {"field": "kb", "type": "quantitative", "title": "KB one token sends to its experts (BF16), per MoE layer",
         "scale": {"domain": [0, float(bars["kb"].max()) * 1.45], "nice": False}, "axis": {"tickCount": 8}}
    y = {"field": "what", "type": "nominal", "title": None, "sort": None, "axis": {"ticks": False, "labelLimit": 400}}
    return {
        "$schema": SCHEMA, "width": "container", "height": 300,
        "datasets": {"bytes": bars}, "data": {"name": "bytes"},
        "layer": [
            {"mark": {"type": "bar", "height": {"band": 0.8}},
             "encoding": {"x": x, "y": y,
                          "color": {"field": "kind", "type": "nominal", "legend": None,
                                    "scale": {"domain": kinds, "range": [theme.K2, theme.K3, theme.ACCENT]}},
                          "tooltip": [{"field": "what", "title": "what is sent"},
                                      {"field": "values", "type": "quantitative", "title": "values per token", "format": ",.0f"},
                                      {"field": "kb", "type": "quantitative", "title": "KB per token (BF16)", "format": ",.1f"},
                                      {"field": "how"}]}},
            {"mark": {"type": "text", "align": "left", "dx": 4, "color": theme.ink(theme_type)},
             "encoding": {"x": x, "y": y, "text": {"field": "label"}}},
        ],
        "usermeta": usermeta("parallel_bytes"),
    }


def rank_bytes_spec(ranks: pd.DataFrame) -> dict:
    """Measured bytes each rank sent to the others, dispatch and combine stacked."""
    rows = [{"rank": int(r), "part": part, "bytes": int(b), "order": i}
            for i, (part, col, _) in enumerate(RANK_PARTS) for r, b in zip(ranks["rank"], ranks[col])]
    parts = [p for p, _, _ in RANK_PARTS]
    return {
        "$schema": SCHEMA, "width": "container", "height": 300,
        "datasets": {"ranks": pd.DataFrame(rows)}, "data": {"name": "ranks"},
        "mark": {"type": "bar"},
        "encoding": {
            "x": {"field": "rank", "type": "ordinal", "title": "rank (process)", "axis": {"labelAngle": 0}},
            "y": {"field": "bytes", "type": "quantitative", "title": "bytes sent to other ranks", "stack": "zero",
                  "axis": {"format": ",d"}},
            "color": {"field": "part", "type": "nominal", "title": None,
                      "scale": {"domain": parts, "range": [c for _, _, c in RANK_PARTS]},
                      "legend": {"orient": "top", "direction": "horizontal"}},
            "order": {"field": "order"},
            "tooltip": [{"field": "rank"}, {"field": "part", "title": "bytes sent"},
                        {"field": "bytes", "type": "quantitative", "format": ","}]},
        "usermeta": usermeta("parallel_rank_bytes"),
    }
