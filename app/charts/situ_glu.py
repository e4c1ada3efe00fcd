"""Figures of the SiTU-GLU vs SwiGLU page, and the look its other chart modules share (colours, the
limit lines at 100 and 448, legends, panel sizes): the curves of both activations against one input, their
factors and derivatives. Pure functions from data to Vega-Lite specs (their data in named datasets).
The gate x up plane is app/charts/situ_glu_plane.py; the live experts and the chain, app/charts/situ_glu_live.py."""
from __future__ import annotations

import numpy as np
import pandas as pd

from app import theme
from app.charts.vega import HOVER_STEPS, SCHEMA, hover_bands, hover_layer, thin, usermeta

SITU, SWIGLU = theme.K3, theme.ACCENT                       # blue, orange
CAP_COLOUR, FP8_COLOUR = theme.OKABE_ITO["green"], theme.OKABE_ITO["vermillion"]
GREY = theme.OKABE_ITO["grey"]
DOT, DASH, DASHDOT = [2, 3], [6, 4], [8, 3, 2, 3]           # Vega strokeDash patterns
X_SHAPE = "M-1,-1L1,1M-1,1L1,-1"                            # an X, where SwiGLU crosses 448
LIMITS = ((100.0, CAP_COLOUR, DOT, "SiTU-GLU cap 100"), (448.0, FP8_COLOUR, DASH, "E4M3 max 448 (no block scale)"))
LEVELS = tuple(limit[:3] for limit in LIMITS)              # (value, colour, dash) of each limit
PANEL_GAP = 28
# Charts of panels side by side have a fixed width (Vega-Lite cannot stretch a concatenation to its column):
# WIDTH px in the page's column, more in presenter mode (the view says how much).
WIDTH = 880


def panel_width(width: int, panels: int, legend: int = 0) -> int:
    """Each panel's plot width for `panels` side by side in `width` px (y axes, gaps and a legend beside)."""
    return int((width - legend - panels * 45 - (panels - 1) * PANEL_GAP) / panels)


def panel_height(width: int, height: int) -> int:
    """A panel's height at WIDTH, grown with the width (presenter mode's wider charts keep their shape)."""
    return int(height * max(1.0, width / WIDTH))


def legend_spec(**kw) -> dict:
    return {"orient": "bottom", "direction": "horizontal", "title": None, "labelLimit": 400, **kw}


def colour_scale(names: list[str], colours: list[str], **legend) -> dict:
    return {"scale": {"domain": names, "range": colours}, "legend": legend_spec(**legend)}


# samples drawn of a full-width curve, about one per 3 px: each drawn point costs the browser's reload (an
# interpreted encoder per point; 668 -> 300 cut ~0.1 s of main-thread time from the page's reload, a CPU profile)
CURVE_POINTS = 300


def hlines(rows: list[dict], label_align: str = "left", halo: str | None = None) -> list[dict]:
    """Horizontal reference lines (rows: y, colour, dash, label, and the name its tooltip gives), each
    labelled above its left (or right) end in its own colour, or below it where a row says `below`."""
    layers = []
    for r in rows:
        data = {"values": [{"y": r["y"], "label": r["label"], "line": r.get("name", r["label"])}]}
        layers.append({"data": data, "mark": {"type": "rule", "color": r["colour"], "strokeDash": r["dash"],
                                              "strokeWidth": 1.5},
                       "encoding": {"y": {"field": "y", "type": "quantitative"},
                                    "tooltip": [{"field": "line"}, {"field": "y", "type": "quantitative", "title": "at",
                                                                    "format": ",.4~g"}]}})
        if r["label"]:
            below = r.get("below", False)
            text = {"type": "text", "tooltip": None, "align": label_align, "baseline": "top" if below else "bottom",
                    "dx": 4 if label_align == "left" else -4, "dy": 3 if below else -2, "color": r["colour"]}
            where = {"x": {"value": 0} if label_align == "left" else {"value": "width"},
                     "y": {"field": "y", "type": "quantitative"}, "text": {"field": "label"}}
            if halo:        # the page's colour drawn thick under the text, so a line it crosses stays behind it
                layers.append({"data": data, "mark": text | {"stroke": halo, "strokeWidth": 4, "strokeJoin": "round"},
                               "encoding": where})
            layers.append({"data": data, "mark": text, "encoding": where})
    return layers


def _limit_rows(y_lo: float, y_hi: float) -> list[dict]:
    """Lines at +-100 and +-448 where they fall inside [y_lo, y_hi]; the negative one labelled only
    when the positive one is outside."""
    rows = []
    for value, colour, dash, name in LIMITS:
        for sign in (1, -1):
            y = sign * value
            if y_lo <= y <= y_hi:
                rows.append({"y": y, "colour": colour, "dash": dash, "name": name,
                             "label": name if sign > 0 or not y_lo <= value <= y_hi else ""})
    return rows


def output_window(df: pd.DataFrame, full_range: bool = False) -> tuple[float, float]:
    """The y range of the output chart: SwiGLU's whole range, or a window that always shows both limits
    (SwiGLU leaving it is the point)."""
    y_all = np.concatenate([df["swiglu"].to_numpy(), df["situ"].to_numpy()])
    if full_range:
        lo, hi = float(y_all.min()), float(y_all.max())
        pad = 0.08 * max(hi - lo, 1e-9)
        return lo - pad, hi + pad
    top = max(1.25 * 448, 1.1 * float(np.abs(df["situ"]).max()))
    return (max(-top, min(-0.12 * top, 1.3 * float(y_all.min()))),
            min(top, max(0.12 * top, 1.3 * float(y_all.max()))))


OUTPUT_NAMES = ("SwiGLU  g·σ(g)·u", "SiTU-GLU  4tanh(g/4)σ(g)·25tanh(u/25)")
CROSS_NAME = "where SwiGLU crosses 448"


CURVE_COLUMNS = {   # the CSV of each curve chart: every sample, not only those drawn
    "output": {"x": "g", "swiglu": "SwiGLU", "situ": "SiTU-GLU"},
    "factors": {"x": "g or u", "swiglu_gate": "swish gate g·σ(g)", "situ_gate": "SiTU-GLU gate 4·tanh(g/4)·σ(g)",
                "swiglu_up": "identity up u", "situ_up": "SiTU-GLU up 25·tanh(u/25)"},
    "derivatives": {"x": "g or u", "swiglu_gate_d": "SwiGLU d(gate)/dg", "situ_gate_d": "SiTU-GLU d(gate)/dg",
                    "swiglu_up_d": "SwiGLU d(up)/du", "situ_up_d": "SiTU-GLU d(up)/du",
                    "swiglu_dg": "SwiGLU ∂output/∂g", "situ_dg": "SiTU-GLU ∂output/∂g"},
}


def curve_table(df: pd.DataFrame, chart: str) -> pd.DataFrame:
    """The numbers behind a curve chart (its CSV): every sample of app.situ_glu.curves."""
    return df[list(CURVE_COLUMNS[chart])].rename(columns=CURVE_COLUMNS[chart])


def output_spec(df: pd.DataFrame, up: float, crossings: list[float], full_range: bool = False,
                theme_type: str | None = None) -> dict:
    """Both activations against the gate value at one up value, with the cap and FP8 limits and an X
    where SwiGLU crosses 448."""
    lo, hi = output_window(df, full_range)
    df = thin(df, CURVE_POINTS)
    curves = pd.DataFrame({"g": df["x"].to_numpy(), "swiglu": df["swiglu"].to_numpy(), "situ": df["situ"].to_numpy()})
    R = float(np.abs(curves["g"]).max())
    x = {"field": "g", "type": "quantitative", "title": "gate pre-activation g",
         "scale": {"domain": [-R, R], "nice": False, "zero": False}, "axis": {"tickCount": 10, "format": ",~f"}}
    y_title = f"output at up value u = {up:g}"
    colour = colour_scale(list(OUTPUT_NAMES), [SWIGLU, SITU])
    layers = hlines(_limit_rows(lo, hi))
    for i, (field, name) in enumerate((("swiglu", OUTPUT_NAMES[0]), ("situ", OUTPUT_NAMES[1]))):
        y = {"field": field, "type": "quantitative"}
        if i == 0:
            y |= {"title": y_title, "scale": {"domain": [lo, hi], "nice": False, "zero": False}}
        layers.append({"data": {"name": "curves"}, "mark": {"type": "line", "strokeWidth": 2.5, "clip": True},
                       "encoding": {"x": x, "y": y, "color": {"datum": name, **colour}}})
    layers.insert(0, hover_layer("hover_output", "curves_hover", x, [   # beneath the curves
        {"field": "g", "type": "quantitative", "format": ".3g"},
        {"field": "swiglu", "type": "quantitative", "title": "SwiGLU", "format": ".4g"},
        {"field": "situ", "type": "quantitative", "title": "SiTU-GLU", "format": ".4g"}]))
    cross = pd.DataFrame({
        "g": [float(g) for g in crossings],
        "value": [448.0 * float(np.sign(up)) * (1.0 if g > 0 else -1.0) for g in crossings],
        "above": [bool(up * g > 0) for g in crossings],
        "label": [f"SwiGLU hits {'' if up * g > 0 else '-'}448 at g = {g:.4g}" for g in crossings],
        "hover": [f"|SwiGLU| = 448 at g = {g:.6g}, u = {up:g}" for g in crossings]})
    if len(cross):
        cy = {"field": "value", "type": "quantitative"}
        layers.append({"data": {"name": "crossings"},
                       "mark": {"type": "point", "filled": False, "strokeWidth": 3, "size": 130, "color": FP8_COLOUR,
                                "opacity": 1},
                       "encoding": {"x": x, "y": cy,
                                    "shape": {"datum": CROSS_NAME, "scale": {"domain": [CROSS_NAME], "range": [X_SHAPE]},
                                              "legend": legend_spec()},
                                    "tooltip": [{"field": "hover", "title": "crossing"}]}})
        for above in sorted(set(cross["above"]), reverse=True):   # the label below-right at +448, above-right at -448
            layers.append({"data": {"name": "crossings"}, "transform": [{"filter": f"{'' if above else '!'}datum.above"}],
                           "mark": {"type": "text", "tooltip": None, "align": "left",
                                    "baseline": "top" if above else "bottom",
                                    "dx": 10, "dy": 6 if above else -6, "color": theme.ink(theme_type)},
                           "encoding": {"x": x, "y": cy, "text": {"field": "label"}}})
    return {"$schema": SCHEMA, "width": "container", "height": 420,
            "datasets": {"curves": curves, "curves_hover": hover_bands(curves, "g", HOVER_STEPS), "crossings": cross},
            "layer": layers,
            "usermeta": usermeta("situ_output")}


FACTOR_NAMES = ("SwiGLU: swish gate g·σ(g), identity up u", "SiTU-GLU: bounded gate and up factors")


def _curve_panel(title: str, x_title: str, data: str, fields: tuple[str, str], names: tuple[str, str],
                 hover: str, tips: tuple[str, str, str], width: int, height: int, y_domain=None,
                 extra: list | None = None) -> dict:
    """One panel: SwiGLU's curve (orange) and SiTU-GLU's (blue) over a shared x column "x" of dataset
    `data`, pointable through the bands of dataset `data`_hover."""
    x = {"field": "x", "type": "quantitative", "title": x_title, "scale": {"nice": False, "zero": False},
         "axis": {"tickCount": 5, "format": ",~f"}}
    colour = colour_scale(list(names), [SWIGLU, SITU])
    layers = []
    for i, (field, name) in enumerate(zip(fields, names)):
        y = {"field": field, "type": "quantitative"}
        if i == 0:
            fixed = {"domain": y_domain, "nice": False} if y_domain else {"padding": 8}
            y |= {"title": None, "scale": {"zero": False, **fixed}}
        layers.append({"mark": {"type": "line", "strokeWidth": 2.5, "clip": True},
                       "encoding": {"x": x, "y": y, "color": {"datum": name, **colour}}})
    layers.insert(0, hover_layer(hover, f"{data}_hover", x, [
        {"field": "x", "type": "quantitative", "title": tips[0], "format": ".3g"},
        {"field": fields[0], "type": "quantitative", "title": tips[1], "format": ".4g"},
        {"field": fields[1], "type": "quantitative", "title": tips[2], "format": ".4g"}]))
    return {"title": title, "width": width, "height": height, "data": {"name": data}, "layer": layers + (extra or [])}


def factors_spec(df: pd.DataFrame, theme_type: str | None = None, width: int = WIDTH) -> dict:
    """The gate factor against g and the up factor against u, each with its bound; the SiTU-GLU gate
    factor's minimum, read off the curve, marked."""
    i = int(np.argmin(df["situ_gate"].to_numpy()))                # on every sample, before thinning
    minimum = {"x": float(df["x"][i]), "y": float(df["situ_gate"][i]),
               "label": f"min {df['situ_gate'][i]:.4f} at g = {df['x'][i]:.2f}"}
    top = {key: float(df[key].max()) for key in ("swiglu_gate", "swiglu_up")}
    df = thin(df, CURVE_POINTS * width // (2 * WIDTH))
    data = pd.DataFrame({"x": df["x"].to_numpy(), "swish_gate": df["swiglu_gate"].to_numpy(),
                         "situ_gate": df["situ_gate"].to_numpy(), "identity_up": df["swiglu_up"].to_numpy(),
                         "situ_up": df["situ_up"].to_numpy()})
    panels = []
    for key, cap, title, x_title, fields, tips, widest in (
            ("gate", 4.0, "gate factor: 4·tanh(g/4)·σ(g) vs swish g·σ(g)", "g", ("swish_gate", "situ_gate"),
             ("g", "SwiGLU gate g·σ(g)", "SiTU-GLU gate 4·tanh(g/4)·σ(g)"), top["swiglu_gate"]),
            ("up", 25.0, "up factor: 25·tanh(u/25) vs u", "u", ("identity_up", "situ_up"),
             ("u", "SwiGLU up u", "SiTU-GLU up 25·tanh(u/25)"), top["swiglu_up"])):
        high = min(widest, 3 * cap)                                 # the y axes stop at three times each bound
        lo = -high if key == "up" else -0.6
        extra = hlines([{"y": cap, "colour": CAP_COLOUR, "dash": DOT, "label": f"bound {cap:g}"}])
        if key == "gate":
            pt = {"values": [minimum]}
            xy = {"x": {"field": "x", "type": "quantitative"}, "y": {"field": "y", "type": "quantitative"}}
            extra += [{"data": pt, "mark": {"type": "point", "filled": False, "size": 70, "strokeWidth": 2,
                                            "color": theme.ink(theme_type), "opacity": 1},
                       "encoding": {**xy, "tooltip": [{"field": "label", "title": "SiTU-GLU gate factor"}]}},
                      {"data": pt, "mark": {"type": "text", "tooltip": None, "align": "right", "baseline": "bottom",
                                            "dx": -6, "dy": -10,
                                            "color": theme.ink(theme_type)},
                       "encoding": {**xy, "text": {"field": "label"}}}]
        panels.append(_curve_panel(title, x_title, "factors", fields, FACTOR_NAMES, f"hover_{key}", tips,
                                   panel_width(width, 2), panel_height(width, 300), [lo, max(high, 1.3 * cap)], extra))
    hover = hover_bands(data, "x", HOVER_STEPS * width // (2 * WIDTH))
    return {"$schema": SCHEMA, "datasets": {"factors": data, "factors_hover": hover},
            "hconcat": panels, "spacing": PANEL_GAP,
            "resolve": {"scale": {"x": "independent", "y": "independent"}}, "config": {"title": {"fontWeight": "normal"}},
            "usermeta": usermeta("situ_factors")}


def derivative_spec(df: pd.DataFrame, up: float, width: int = WIDTH) -> dict:
    """Derivatives by torch.autograd: of each factor, and of the output in g at the chosen u."""
    df = thin(df, CURVE_POINTS * width // (3 * WIDTH))
    data = pd.DataFrame({"x": df["x"].to_numpy()} | {c: df[c].to_numpy() for c in (
        "swiglu_gate_d", "situ_gate_d", "swiglu_up_d", "situ_up_d", "swiglu_dg", "situ_dg")})
    panels = [_curve_panel(title, x_title, "derivatives", (f"swiglu_{key}", f"situ_{key}"), ("SwiGLU", "SiTU-GLU"),
                           f"hover_{key}", (x_title, f"SwiGLU {title}", f"SiTU-GLU {title}"), panel_width(width, 3),
                           panel_height(width, 270))
              for key, title, x_title in (("gate_d", "d(gate factor)/dg", "g"), ("up_d", "d(up factor)/du", "u"),
                                          ("dg", f"∂output/∂g at u = {up:g}", "g"))]
    return {"$schema": SCHEMA, "datasets": {"derivatives": data,
                                            "derivatives_hover": hover_bands(data, "x", HOVER_STEPS * width // (3 * WIDTH))},
            "hconcat": panels, "spacing": PANEL_GAP,
            "resolve": {"scale": {"x": "independent", "y": "independent"}}, "config": {"title": {"fontWeight": "normal"}},
            "usermeta": usermeta("situ_derivatives")}

