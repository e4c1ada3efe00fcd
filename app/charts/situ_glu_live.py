"""The SiTU-GLU vs SwiGLU page's charts of the live model: the routed experts' hidden activations
(a histogram) and the routed-path chain experiment. Pure functions from data to Vega-Lite specs."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from app import theme
from app.charts.situ_glu import (
    DASH,
    DASHDOT,
    GREY,
    LEVELS,
    LIMITS,
    SITU,
    SWIGLU,
    colour_scale,
    hlines,
    legend_spec,
)
from app.charts.vega import SCHEMA, hover_layer, usermeta

HIST_BINS = 80


def histogram_bins(values: dict[str, np.ndarray], names: dict[str, str]) -> tuple[pd.DataFrame, float, float]:
    """Both activations counted on the same HIST_BINS + 1 bins of width (max - min) / HIST_BINS from the
    smallest value (the largest value opens the last bin); empty bins left out (log counts). Returns the
    bins and the smallest and largest value."""
    allv = np.concatenate(list(values.values()))
    lo, hi = float(allv.min()), float(allv.max())
    if hi - lo < 1e-12:
        lo, hi = lo - 1, hi + 1
    size = (hi - lo) / HIST_BINS
    frames = []
    for key in ("swiglu", "situ_glu"):
        v = np.asarray(values[key], dtype=float)
        index = np.clip(np.floor((v - lo) / size).astype(int), 0, HIST_BINS)
        count = np.bincount(index, minlength=HIST_BINS + 1)
        nz = np.flatnonzero(count)
        frames.append(pd.DataFrame({"activation": names[key], "start": lo + nz * size, "end": lo + (nz + 1) * size,
                                    "count": count[nz].astype(int)}))
    return pd.concat(frames, ignore_index=True), lo, hi


def histogram_spec(values: dict[str, np.ndarray], names: dict[str, str], theme_type: str | None = None) -> dict:
    """Hidden activations of the routed experts, both functions on the same bins, overlaid, log counts;
    lines at +-100 and +-448 where the values reach them."""
    bins, lo, hi = histogram_bins(values, names)
    top = float(bins["count"].max())
    floor = 0.6                                                   # the bars' foot, below a count of 1 on the log axis
    marks = [{"x": sign * value, "label": f"{'-' if sign < 0 else ''}{value:g}", "colour": colour, "dash": dash}
             for value, colour, dash in LEVELS for sign in (1, -1) if lo <= sign * value <= hi]
    legend = [names["swiglu"], names["situ_glu"]]
    x = {"field": "start", "type": "quantitative", "title": "hidden activation value h = act(g, u)",
         "scale": {"domain": [lo, hi + (hi - lo) / HIST_BINS], "nice": False, "zero": False}}
    layers = [{"data": {"name": "bins"}, "mark": {"type": "rect", "opacity": 0.6},
               "encoding": {"x": x, "x2": {"field": "end"},
                            "y": {"field": "count", "type": "quantitative", "title": "count (log)",
                                  "scale": {"type": "log", "domain": [floor, top * 1.6], "nice": False},
                                  "axis": {"values": [10.0 ** k for k in range(int(math.log10(top * 1.6)) + 1)],
                                           "format": ",.0f"}},
                            "y2": {"datum": floor},
                            "color": {"field": "activation", "type": "nominal",
                                      **colour_scale(legend, [SWIGLU, SITU], symbolType="square", symbolOpacity=0.6)},
                            "tooltip": [{"field": "activation"},
                                        {"field": "start", "type": "quantitative", "title": "from", "format": ".4g"},
                                        {"field": "end", "type": "quantitative", "title": "to", "format": ".4g"},
                                        {"field": "count", "type": "quantitative", "title": "values"}]}}]
    for m in marks:
        data = {"values": [{"x": m["x"], "label": m["label"]}]}
        layers += [{"data": data, "mark": {"type": "rule", "color": m["colour"], "strokeDash": m["dash"], "strokeWidth": 1.5},
                    "encoding": {"x": {"field": "x", "type": "quantitative"},
                                 "tooltip": [{"field": "label", "title": "|h| limit"}]}},
                   {"data": data, "mark": {"type": "text", "tooltip": None, "align": "left", "baseline": "top",
                                           "dx": 4, "y": 2,
                                           "color": m["colour"]},
                    "encoding": {"x": {"field": "x", "type": "quantitative"}, "text": {"field": "label"}}}]
    return {"$schema": SCHEMA, "width": "container", "height": 360, "datasets": {"bins": bins}, "layer": layers,
            "usermeta": usermeta("situ_hist")}


# ---- the chain experiment ------------------------------------------------------------------------

CHAIN_STYLE = {   # (activation, norm) -> colour, dash
    ("swiglu", False): (theme.OKABE_ITO["vermillion"], DASH),
    ("swiglu", True): (theme.OKABE_ITO["orange"], None),
    ("situ_glu", False): (theme.OKABE_ITO["sky"], DASH),
    ("situ_glu", True): (theme.OKABE_ITO["blue"], None),
}

SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _power_labels(k_lo: int, k_hi: int) -> tuple[list[float], str]:
    """Axis values at every power of ten from 10^k_lo to 10^k_hi, labelled 10ⁿ (plotly's "power" format)."""
    ks = list(range(k_lo, k_hi + 1))
    labels = ", ".join(f"'10{str(k).translate(SUPERSCRIPT)}'" for k in ks)
    return [float(f"1e{k}") for k in ks], f"[{labels}][round(log(datum.value) / LN10) - ({k_lo})]"


def _short_variant(name: str) -> str:
    """A variant's name short enough for a tooltip's key column (which cuts long ones off)."""
    return name.replace(", with RMSNorm before W_up", " with norm").replace(", no RMSNorm before W_up", ", no norm")


def runs_along(values, level: float, within: float = 0.05, share: float = 0.5) -> bool:
    """Whether a line lies on a horizontal line at `level`: at least `share` of its values within
    `within` (relative) of it, so that on a log chart the two are drawn one over the other."""
    v = np.asarray(values, dtype=float)
    return bool(len(v)) and float(np.mean(np.abs(v / level - 1) <= within)) >= share


def chain_spec(table: pd.DataFrame, metric: str = "max_h", ceiling: float = 1e6,
               theme_type: str | None = None) -> dict:
    """Activation magnitude per layer of the routed-path chain, log y, one line per variant. Values
    past `ceiling` leave the chart, marked where they do (the table beside it says where they pass the
    float32 maximum or overflow float64), so the bounded variants stay readable. A value that underflows
    to exactly 0 (a log axis has no place for it) is marked at the foot of the chart instead."""
    label = {"max_h": "largest |hidden activation|", "rms_out": "RMS of the routed output"}[metric]
    lo_val, hi_val = math.inf, 1.0
    names, colours, dashes, lines, gone_rows, zero_rows = [], [], [], [], [], []
    for (activation, norm), part in table.groupby(["activation", "norm"], sort=False):
        colour, dash = CHAIN_STYLE[(activation, norm)]
        name = part["variant"].iloc[0]
        names.append(name), colours.append(colour), dashes.append(dash or [1, 0])
        ok = part[np.isfinite(part[metric]) & (part[metric] > 0)]
        lines.append(pd.DataFrame({"variant": name, "layer": ok["layer"].astype(int).to_numpy(),
                                   "value": ok[metric].astype(float).to_numpy(), "colour": colour}))
        shown = ok[ok[metric] <= ceiling]
        if len(shown):
            lo_val, hi_val = min(lo_val, float(shown[metric].min())), max(hi_val, float(shown[metric].max()))
        gone = part[~np.isfinite(part[metric]) | (part[metric] > ceiling)]
        zero = part[np.isfinite(part[metric]) & (part[metric] <= 0)]
        if len(zero):
            first = int(zero["layer"].iloc[0])
            zero_rows.append({"variant": name, "layer": first, "colour": colour, "label": f"exactly 0 from layer {first}",
                              "hover": f"{name}: exactly 0 from layer {first}"})
        if len(gone):
            first = gone.iloc[0]
            inf = not np.isfinite(first[metric])
            where = f"{'overflow (inf)' if inf else f'past {ceiling:.0e}'} from layer {int(first['layer'])}"
            gone_rows.append({"variant": name, "layer": int(first["layer"]), "value": float(ceiling), "colour": colour,
                              "label": where,
                              "hover": f"{name}: past {ceiling:.0e} from layer {int(first['layer'])}"})
            hi_val = ceiling
    refs = []
    if metric == "max_h":
        for value, colour, dash, text in (*LIMITS, (3.4e38, GREY, DASHDOT, "FP32 / BF16 max 3.4e38")):
            if value <= hi_val * 10:
                # a variant drawn on top of the line would hide in it: the line's label names it
                riding = [_short_variant(line["variant"].iloc[0]) for line in lines if runs_along(line["value"], value)]
                shown_as = text + (f" ({' and '.join(riding)} run{'s' if len(riding) == 1 else ''} along it)"
                                   if riding else "")
                # under the line when something runs on it (its label above would sit on that line too)
                refs.append({"y": value, "colour": colour, "dash": dash, "label": shown_as, "name": text,
                             "below": bool(riding)})
                hi_val = max(hi_val, value)
    lo_val = lo_val if np.isfinite(lo_val) else 1e-3
    y_lo, y_hi = math.log10(lo_val) - 0.5, math.log10(hi_val) + 0.8
    values, label_expr = _power_labels(math.ceil(y_lo), math.floor(y_hi))
    for r in zero_rows:
        r["value"] = 10 ** y_lo
    x = {"field": "layer", "type": "quantitative", "title": "MoE layer", "scale": {"domain": [0, 93], "nice": False},
         "axis": {"tickCount": 10}}
    y = {"field": "value", "type": "quantitative", "title": f"{label} (log)",
         "scale": {"type": "log", "domain": [10 ** y_lo, 10 ** y_hi], "nice": False},
         "axis": {"values": values, "labelExpr": label_expr, "labelOverlap": "parity"}}
    style = {"color": {"field": "variant", "type": "nominal", **colour_scale(names, colours, columns=2)},
             "strokeDash": {"field": "variant", "type": "nominal", "scale": {"domain": names, "range": dashes},
                            "legend": legend_spec(columns=2)}}
    fill = {"field": "colour", "type": "nominal", "scale": None}          # the markers stay out of the legend
    # one pointable band per layer, its tooltip every variant's value there (written out: inf, or not run)
    by_layer = table.pivot_table(index="layer", columns="variant", values=metric, aggfunc="first", dropna=False)
    hover = pd.DataFrame({"layer": by_layer.index.astype(int), "x0": by_layer.index - 0.5, "x1": by_layer.index + 0.5})
    for i, name in enumerate(names):
        col = by_layer[name] if name in by_layer else pd.Series(np.nan, index=by_layer.index)
        hover[f"v{i}"] = [("overflow (inf)" if np.isinf(v) else "not run (overflowed)" if np.isnan(v) else f"{v:.3g}")
                          for v in col.to_numpy(dtype=float)]
    tooltip = [{"field": "layer", "type": "quantitative", "title": "MoE layer"}] + \
        [{"field": f"v{i}", "title": _short_variant(name)} for i, name in enumerate(names)]
    # reference lines under the variants' lines, their labels over them (they sit among the lines), each
    # label with a halo of the page's colour
    refs_drawn = hlines(refs, label_align="right", halo=theme.paper(theme_type))
    layers = [hover_layer("hover_chain", "layers_hover", x, tooltip)] + [
        part for part in refs_drawn if part["mark"]["type"] == "rule"] + [
        {"data": {"name": "layers"}, "mark": {"type": "line", "strokeWidth": 2.5, "clip": True},
         "encoding": {"x": x, "y": y, **style}}] + [part for part in refs_drawn if part["mark"]["type"] == "text"]
    for data, shape, baseline, rows in (("gone", "triangle-up", "middle", gone_rows),
                                        ("zero", "triangle-down", "bottom", zero_rows)):
        if rows:
            layers += [{"data": {"name": data}, "mark": {"type": "point", "shape": shape, "filled": True, "size": 150,
                                                         "opacity": 1},
                        "encoding": {"x": x, "y": y, "fill": fill,
                                     "tooltip": [{"field": "hover", "title": "off the chart"}]}},
                       {"data": {"name": data}, "mark": {"type": "text", "tooltip": None, "align": "left",
                                                         "baseline": baseline, "dx": 10,
                                                         "color": theme.ink(theme_type)},
                        "encoding": {"x": x, "y": y, "text": {"field": "label"}}}]
    columns = ["variant", "layer", "value", "colour", "label", "hover"]
    return {"$schema": SCHEMA, "width": "container", "height": 440,
            "datasets": {"layers": pd.concat(lines, ignore_index=True), "layers_hover": hover,
                         "gone": pd.DataFrame(gone_rows, columns=columns), "zero": pd.DataFrame(zero_rows, columns=columns)},
            "layer": layers, "usermeta": usermeta("situ_chain")}
