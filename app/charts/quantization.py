"""Figures of the Quantization lab: pure functions from data frames to Vega-Lite specs (their data in named
datasets), drawn by the browser's Vega without plotly."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from app import theme
from app.charts.vega import SCHEMA, usermeta
from app.text import SUPERSCRIPT

MATRIX_COLOURS = {"w_gate": theme.OKABE_ITO["blue"], "w_up": theme.OKABE_ITO["orange"],
                  "w_down": theme.OKABE_ITO["green"]}


def superscript(n: int) -> str:
    return str(n).translate(SUPERSCRIPT)


KIND_COLOURS = {"zero": theme.OKABE_ITO["grey"], "subnormal": theme.OKABE_ITO["purple"],
                "normal": theme.OKABE_ITO["blue"]}
TICK_SYMBOL = "M-0.25,-1H0.25V1H-0.25Z"          # the legend's symbol: a short vertical bar, like the ticks
# Text drawn on a coloured bar (not on the page's background): dark in both themes, as on the orange bars.
ON_BAR = theme.INK["light"]


def _label_expr(labels: dict[float, str]) -> str:
    """A Vega expression naming each tick value of a log axis (Vega's own format cannot write 2⁻⁹)."""
    expr = "''"
    for value, text in reversed(labels.items()):
        expr = f"abs(datum.value - {value!r}) < {value * 1e-6!r} ? '{text}' : {expr}"
    return expr


def _title(text: str) -> dict:
    # the weight in the title itself: presenter mode replaces the config's "title" (ui.PRESENTER_VEGA)
    return {"text": text, "fontWeight": "normal"}


def grids_spec(e2m1: pd.DataFrame, e4m3: pd.DataFrame, theme_type: str | None = None) -> dict:
    """Top: the 15 E2M1 values on a linear axis (both signs), each labelled. Bottom: the positive E4M3
    values on a log axis, so each power of two holds the same 8 values. One tick per value, coloured by
    kind (zero, subnormal, normal); point at a tick for its bit pattern."""
    pos = e2m1[e2m1["value"] > 0]
    signed = pd.concat([pos.assign(value=-pos["value"], bits="1" + pos["bits"].str[1:]), e2m1]).sort_values("value")
    small = pd.DataFrame({"value": signed["value"].to_numpy(dtype=float), "kind": signed["kind"].to_numpy(),
                          "bits": signed["bits"].to_numpy(), "label": [f"{v:g}" for v in signed["value"]]})
    pos8 = e4m3[e4m3["value"] > 0]
    gaps = pos8["relative gap"].to_numpy(dtype=float)
    wide = pd.DataFrame({"value": pos8["value"].to_numpy(dtype=float), "kind": pos8["kind"].to_numpy(),
                         "bits": pos8["bits"].to_numpy(),
                         "next": ["none: the largest value" if np.isnan(g) else f"{g * 100:.1f}% higher" for g in gaps]})
    kinds = list(KIND_COLOURS)
    colour = {"field": "kind", "type": "nominal", "title": None,
              "scale": {"domain": kinds, "range": [KIND_COLOURS[k] for k in kinds]},
              "legend": {"orient": "top", "direction": "horizontal", "symbolType": TICK_SYMBOL, "symbolSize": 120}}
    x_small = {"field": "value", "type": "quantitative", "title": "value",
               "scale": {"domain": [-6.8, 6.8], "nice": False}, "axis": {"values": list(range(-6, 7)), "grid": False}}
    ticks = [2.0 ** k for k in range(-9, 9, 3)] + [448.0]
    names = {t: f"2{superscript(int(math.log2(t)))}" for t in ticks[:-1]} | {448.0: "448"}
    x_wide = {"field": "value", "type": "quantitative", "title": "value (log scale)",
              "scale": {"type": "log", "domain": [2.0 ** -9.5, 600], "nice": False},
              "axis": {"values": ticks, "labelExpr": _label_expr(names), "grid": False}}
    top = {"title": _title("E2M1 (MXFP4 elements): every value, linear axis"), "height": 70, "data": {"name": "e2m1"},
           "layer": [
               {"mark": {"type": "tick", "thickness": 3, "size": 22, "opacity": 1},
                "encoding": {"x": x_small, "color": colour,
                             "tooltip": [{"field": "value", "type": "quantitative", "format": "g"},
                                         {"field": "kind"}, {"field": "bits", "title": "bits s ee m"}]}},
               {"mark": {"type": "text", "baseline": "bottom", "dy": -14, "color": theme.ink(theme_type)},
                "encoding": {"x": x_small, "text": {"field": "label"}}},
           ]}
    bottom = {"title": _title("E4M3 (MXFP8 elements): every positive value, log axis"), "height": 50,
              "data": {"name": "e4m3"},
              "mark": {"type": "tick", "thickness": 2, "size": 22, "opacity": 1},
              "encoding": {"x": x_wide, "color": colour,
                           "tooltip": [{"field": "value", "type": "quantitative", "format": ".6g"},
                                       {"field": "kind"}, {"field": "bits", "title": "bits s eeee mmm"},
                                       {"field": "next", "title": "next value"}]}}
    return {"$schema": SCHEMA, "width": "container", "datasets": {"e2m1": small, "e4m3": wide},
            "vconcat": [top, bottom], "spacing": 28,
            "config": {"view": {"stroke": None}},
            "usermeta": usermeta("quant_grids")}


BLOCK_SERIES = (("before: V", theme.OKABE_ITO["sky"], "circle", theme.OKABE_ITO["sky"], 70),
                ("after: X · P", theme.OKABE_ITO["vermillion"], "diamond", "transparent", 110))


def block_spec(table: pd.DataFrame, X: float, grid: np.ndarray | None = None) -> dict:
    """The block's values before (V, dots) and after (X·P, open diamonds) quantisation, a thin segment
    joining each pair; with a grid, the levels X·P the block can take as dotted lines."""
    n = len(table)
    element = table["element"].to_numpy().astype(int)
    v, q = table["value V"].to_numpy(dtype=float), table["X · P"].to_numpy(dtype=float)
    p = table["on the grid P"].to_numpy(dtype=float)
    common = {"element": element, "V": v, "XP": q, "P": p, "error": q - v}
    points = pd.concat([pd.DataFrame(common | {"series": BLOCK_SERIES[0][0], "value": v}),
                        pd.DataFrame(common | {"series": BLOCK_SERIES[1][0], "value": q})], ignore_index=True)
    x = {"field": "element", "type": "quantitative", "title": "element of the block",
         "scale": {"domain": [-0.8, n - 0.2], "nice": False, "zero": False},
         "axis": {"values": list(range(0, n, 4 if n > 16 else 1)), "format": "d", "grid": False}}
    y = {"field": "value", "type": "quantitative", "title": "value"}
    names = [s[0] for s in BLOCK_SERIES]
    legend = {"orient": "top", "direction": "horizontal"}
    layers = []
    datasets = {"values": points}
    if grid is not None:
        g = np.asarray(grid, dtype=float)
        codes = np.unique(np.concatenate([-g, g]))                   # -0 and 0 are one level
        datasets["levels"] = pd.DataFrame({"P": codes, "level": codes * X})
        layers.append({"data": {"name": "levels"},
                       "mark": {"type": "rule", "strokeDash": [2, 3], "strokeWidth": 1,
                                "color": theme.OKABE_ITO["grey"], "opacity": 0.6},
                       "encoding": {"y": {"field": "level", "type": "quantitative", "title": "value"},
                                    "tooltip": [{"field": "P", "type": "quantitative", "title": "grid value P",
                                                 "format": "g"},
                                                {"field": "level", "type": "quantitative", "title": "level X·P",
                                                 "format": ".6g"}]}})
    layers += [
        {"data": {"name": "values"}, "transform": [{"filter": f"datum.series == '{names[0]}'"}],
         "mark": {"type": "rule", "strokeWidth": 1, "color": theme.OKABE_ITO["grey"]},
         "encoding": {"x": x, "y": {"field": "V", "type": "quantitative", "title": "value"}, "y2": {"field": "XP"}}},
        {"data": {"name": "values"}, "mark": {"type": "point", "strokeWidth": 2, "opacity": 1},
         "encoding": {"x": x, "y": y,
                      "shape": {"field": "series", "type": "nominal", "title": None, "legend": legend,
                                "scale": {"domain": names, "range": [s[2] for s in BLOCK_SERIES]}},
                      "stroke": {"field": "series", "type": "nominal", "title": None, "legend": legend,
                                 "scale": {"domain": names, "range": [s[1] for s in BLOCK_SERIES]}},
                      "fill": {"field": "series", "type": "nominal", "title": None, "legend": legend,
                               "scale": {"domain": names, "range": [s[3] for s in BLOCK_SERIES]}},
                      "size": {"field": "series", "type": "nominal", "title": None, "legend": legend,
                               "scale": {"domain": names, "range": [s[4] for s in BLOCK_SERIES]}},
                      "tooltip": [{"field": "element"},
                                  {"field": "V", "type": "quantitative", "title": "before: V", "format": ".6g"},
                                  {"field": "XP", "type": "quantitative", "title": "after: X·P", "format": ".6g"},
                                  {"field": "P", "type": "quantitative", "title": "on the grid P", "format": "g"},
                                  {"field": "error", "type": "quantitative", "title": "error X·P − V", "format": ".3g"}]}},
    ]
    return {"$schema": SCHEMA, "width": "container", "height": 340, "datasets": datasets, "layer": layers,
            "usermeta": usermeta("quant_block")}


def scales_spec(df: pd.DataFrame, theme_type: str | None = None) -> dict:
    """Histogram of the E8M0 scale exponents E (X = 2^E) of every block, one bar per matrix in each group,
    labelled with its count (a handful of blocks makes a bar too short to see)."""
    data = pd.DataFrame({"matrix": df["matrix"].to_numpy(), "exponent": df["exponent"].to_numpy().astype(int),
                         "blocks": df["blocks"].to_numpy().astype(int)})
    data["X"] = [f"2{superscript(e)} = {2.0 ** e:g}" for e in data["exponent"]]
    matrices = list(dict.fromkeys(data["matrix"]))
    exponents = list(range(int(data["exponent"].min()), int(data["exponent"].max()) + 1)) if len(data) else []
    x = {"field": "exponent", "type": "ordinal", "title": "scale exponent E (block scale X = 2^E)",
         "scale": {"domain": exponents, "paddingInner": 0.2}, "axis": {"labelAngle": 0}}
    offset = {"field": "matrix", "type": "nominal", "scale": {"domain": matrices}}
    y = {"field": "blocks", "type": "quantitative", "title": "blocks of 32"}
    return {
        "$schema": SCHEMA, "width": "container", "height": 340,
        "datasets": {"scales": data}, "data": {"name": "scales"},
        "layer": [
            {"mark": {"type": "bar"},
             "encoding": {"x": x, "xOffset": offset, "y": y,
                          "color": {"field": "matrix", "type": "nominal", "title": None,
                                    "scale": {"domain": matrices,
                                              "range": [MATRIX_COLOURS.get(m, theme.K3) for m in matrices]},
                                    "legend": {"orient": "top", "direction": "horizontal"}},
                          "tooltip": [{"field": "matrix"}, {"field": "exponent", "title": "E"},
                                      {"field": "X", "title": "X = 2^E"},
                                      {"field": "blocks", "type": "quantitative", "format": ","}]}},
            {"mark": {"type": "text", "baseline": "bottom", "dy": -3, "color": theme.ink(theme_type)},
             "encoding": {"x": x, "xOffset": offset, "y": y,
                          "text": {"field": "blocks", "type": "quantitative", "format": ","}}},
        ],
        "usermeta": usermeta("quant_scales"),
    }


ERROR_COLOURS = (theme.OKABE_ITO["blue"], theme.OKABE_ITO["orange"], theme.OKABE_ITO["green"])


def errors_spec(df: pd.DataFrame, columns: list[str], theme_type: str | None = None) -> dict:
    """Relative RMS error per weight matrix for each format, as grouped horizontal bars labelled with the
    percentage ("0 (exact)" where rounding changes nothing: the routed experts are already MXFP4)."""
    labels = [f"{t} ({s})" for t, s in zip(df["tensor"], df["stored as"])]
    rows = []
    for label, (_, r) in zip(labels, df.iterrows()):
        for c in columns:
            e = float(r[c])
            rows.append({"matrix": label, "tensor": r["tensor"], "stored as": r["stored as"], "format": c,
                         "percent": e * 100, "text": "0 (exact)" if e == 0 else f"{e * 100:.2f}%"})
    data = pd.DataFrame(rows, columns=["matrix", "tensor", "stored as", "format", "percent", "text"])
    top = float(np.nanmax(df[columns].to_numpy())) * 100 if len(df) else 1.0
    x = {"field": "percent", "type": "quantitative", "title": "relative RMS error ‖Q(W) − W‖ / ‖W‖ (%)",
         "scale": {"domain": [0, max(top, 1e-3) * 1.3], "nice": False}, "axis": {"tickCount": 8}}
    y = {"field": "matrix", "type": "nominal", "title": None, "sort": labels,
         "scale": {"paddingInner": 0.25}, "axis": {"labelLimit": 320, "ticks": False}}
    offset = {"field": "format", "type": "nominal", "sort": list(columns)}
    return {
        "$schema": SCHEMA, "width": "container", "height": 66 * max(len(df), 1),
        "datasets": {"errors": data}, "data": {"name": "errors"},
        "layer": [
            {"mark": {"type": "bar"},
             "encoding": {"x": x, "y": y, "yOffset": offset,
                          "color": {"field": "format", "type": "nominal", "title": None,
                                    "scale": {"domain": list(columns), "range": list(ERROR_COLOURS[:len(columns)])},
                                    "legend": {"orient": "top", "direction": "horizontal"}},
                          "tooltip": [{"field": "tensor"}, {"field": "stored as"}, {"field": "format"},
                                      {"field": "percent", "type": "quantitative", "title": "error (%)", "format": ".3f"}]}},
            {"mark": {"type": "text", "align": "left", "dx": 3, "color": theme.ink(theme_type)},
             "encoding": {"x": x, "y": y, "yOffset": offset, "text": {"field": "text"}}},
        ],
        "usermeta": usermeta("quant_errors"),
    }


BEHAVIOUR_COLOURS = (theme.OKABE_ITO["blue"], theme.OKABE_ITO["orange"])


def behaviour_spec(per_layer: dict[str, pd.DataFrame], top_k: int) -> dict:
    """Share of the top-k choices that change, per MoE layer, one line per text."""
    names = list(per_layer)[:len(BEHAVIOUR_COLOURS)]
    data = pd.concat([pd.DataFrame({"text": name, "layer": per_layer[name]["layer"].to_numpy().astype(int),
                                    "changed": per_layer[name]["changed"].to_numpy(dtype=float) * 100})
                      for name in names], ignore_index=True)
    title = f"top-{top_k} choices changed (%)"
    lo, hi = (int(data["layer"].min()), int(data["layer"].max())) if len(data) else (0, 1)
    return {
        "$schema": SCHEMA, "width": "container", "height": 340,
        "datasets": {"behaviour": data}, "data": {"name": "behaviour"},
        "mark": {"type": "line", "point": {"size": 25}, "strokeWidth": 2},
        "encoding": {
            "x": {"field": "layer", "type": "quantitative", "title": "MoE layer",
                  "scale": {"domain": [lo - 1, hi + 1], "nice": False}, "axis": {"format": "d", "tickCount": 10}},
            "y": {"field": "changed", "type": "quantitative", "title": title, "scale": {"zero": True}},
            "color": {"field": "text", "type": "nominal", "title": None,
                      "scale": {"domain": names, "range": list(BEHAVIOUR_COLOURS[:len(names)])},
                      "legend": {"orient": "top", "direction": "horizontal", "labelLimit": 320}},
            "tooltip": [{"field": "text"}, {"field": "layer", "title": "MoE layer"},
                        {"field": "changed", "type": "quantitative", "title": title, "format": ".1f"}]},
        "usermeta": usermeta("quant_behaviour"),
    }


K3_BARS = ("all in bf16", "K3: routed experts MXFP4, rest bf16")
K3_PARTS = (("routed experts", theme.ACCENT), ("everything else (bf16)", theme.K3))


def k3_bytes_spec(df: pd.DataFrame, theme_type: str | None = None) -> dict:
    """Weight memory at K3 scale, everything in bf16 vs K3's precisions: one stacked bar each, the routed
    experts (labelled in TB inside) then everything else (labelled in GB after the bar)."""
    routed = df[df["component"] == "routed experts"]
    rest = df[df["component"] != "routed experts"]
    rows = []
    for bar, column in zip(K3_BARS, ("bytes, all bf16", "bytes, K3")):
        r, o = float(routed[column].sum()), float(rest[column].sum())
        rows += [{"bar": bar, "part": K3_PARTS[0][0], "start": 0.0, "end": r / 1e12, "TB": r / 1e12, "GB": r / 1e9,
                  "text": f"{r / 1e12:,.2f} TB"},
                 {"bar": bar, "part": K3_PARTS[1][0], "start": r / 1e12, "end": (r + o) / 1e12, "TB": o / 1e12,
                  "GB": o / 1e9, "text": f"{o / 1e9:,.0f} GB"}]
    data = pd.DataFrame(rows)
    x = {"field": "start", "type": "quantitative", "title": "weight memory (TB, 10^12 bytes)",
         "scale": {"domain": [0, max(float(data["end"].max()) if len(data) else 0, 1e-12) * 1.12], "nice": False},
         "axis": {"tickCount": 7}}
    y = {"field": "bar", "type": "nominal", "title": None, "sort": list(K3_BARS),
         "scale": {"paddingInner": 0.35}, "axis": {"labelLimit": 320, "ticks": False}}
    end = {"field": "end", "type": "quantitative", "title": x["title"]}
    return {
        "$schema": SCHEMA, "width": "container", "height": 220,
        "datasets": {"bytes": data}, "data": {"name": "bytes"},
        "layer": [
            {"mark": {"type": "bar"},
             "encoding": {"x": x, "x2": {"field": "end"}, "y": y,
                          "color": {"field": "part", "type": "nominal", "title": None,
                                    "scale": {"domain": [p for p, _ in K3_PARTS], "range": [c for _, c in K3_PARTS]},
                                    "legend": {"orient": "top", "direction": "horizontal"}},
                          "tooltip": [{"field": "bar", "title": "storage"}, {"field": "part"},
                                      {"field": "TB", "type": "quantitative", "format": ",.3f"},
                                      {"field": "GB", "type": "quantitative", "format": ",.1f"}]}},
            {"transform": [{"filter": f"datum.part == '{K3_PARTS[0][0]}'"}],
             "mark": {"type": "text", "align": "right", "dx": -6, "color": ON_BAR},
             "encoding": {"x": end, "y": y, "text": {"field": "text"}}},
            {"transform": [{"filter": f"datum.part == '{K3_PARTS[1][0]}'"}],
             "mark": {"type": "text", "align": "left", "dx": 4, "color": theme.ink(theme_type)},
             "encoding": {"x": end, "y": y, "text": {"field": "text"}}},
        ],
        "usermeta": usermeta("quant_k3_bytes"),
    }
