"""Figures of the SiTU-GLU vs SwiGLU page: pure functions from data to Vega-Lite specs (their data in named
datasets), drawn by the browser's Vega without plotly."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from app import theme
from app.charts.vega import HOVER_STEPS, SCHEMA, diverging_png, hover_bands, hover_layer, thin, usermeta

SITU, SWIGLU = theme.K3, theme.ACCENT                       # blue, orange
CAP_COLOUR, FP8_COLOUR = theme.OKABE_ITO["green"], theme.OKABE_ITO["vermillion"]
GREY = theme.OKABE_ITO["grey"]
DOT, DASH, DASHDOT = [2, 3], [6, 4], [8, 3, 2, 3]           # Vega strokeDash patterns
CHAIN_STYLE = {   # (activation, norm) -> colour, dash
    ("swiglu", False): (theme.OKABE_ITO["vermillion"], DASH),
    ("swiglu", True): (theme.OKABE_ITO["orange"], None),
    ("situ_glu", False): (theme.OKABE_ITO["sky"], DASH),
    ("situ_glu", True): (theme.OKABE_ITO["blue"], None),
}
X_SHAPE = "M-1,-1L1,1M-1,1L1,-1"                            # an X, where SwiGLU crosses 448
LIMITS = ((100.0, CAP_COLOUR, DOT, "SiTU-GLU cap 100"), (448.0, FP8_COLOUR, DASH, "E4M3 max 448 (no block scale)"))
PANEL_GAP = 28
# Charts of panels side by side have a fixed width (Vega-Lite cannot stretch a concatenation to its column):
# WIDTH px in the page's column, more in presenter mode (the view says how much).
WIDTH = 880


def _panel_width(width: int, panels: int, legend: int = 0) -> int:
    """Each panel's plot width for `panels` side by side in `width` px (y axes, gaps and a legend beside)."""
    return int((width - legend - panels * 45 - (panels - 1) * PANEL_GAP) / panels)


def _panel_height(width: int, height: int) -> int:
    """A panel's height at WIDTH, grown with the width (presenter mode's wider charts keep their shape)."""
    return int(height * max(1.0, width / WIDTH))


def _legend(**kw) -> dict:
    return {"orient": "bottom", "direction": "horizontal", "title": None, "labelLimit": 400, **kw}


def _colours(names: list[str], colours: list[str], **legend) -> dict:
    return {"scale": {"domain": names, "range": colours}, "legend": _legend(**legend)}


# samples drawn of a full-width curve, about one per 3 px: each drawn point costs the browser's reload (an
# interpreted encoder per point; 668 -> 300 cut ~0.1 s of main-thread time from the page's reload, a CPU profile)
CURVE_POINTS = 300


def _hlines(rows: list[dict], label_align: str = "left", halo: str | None = None) -> list[dict]:
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
    """The numbers behind a curve chart (its CSV): every sample of app.situ.curves."""
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
    colour = _colours(list(OUTPUT_NAMES), [SWIGLU, SITU])
    layers = _hlines(_limit_rows(lo, hi))
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
                                              "legend": _legend()},
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
    colour = _colours(list(names), [SWIGLU, SITU])
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
        extra = _hlines([{"y": cap, "colour": CAP_COLOUR, "dash": DOT, "label": f"bound {cap:g}"}])
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
                                   _panel_width(width, 2), _panel_height(width, 300), [lo, max(high, 1.3 * cap)], extra))
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
                           f"hover_{key}", (x_title, f"SwiGLU {title}", f"SiTU-GLU {title}"), _panel_width(width, 3),
                           _panel_height(width, 270))
              for key, title, x_title in (("gate_d", "d(gate factor)/dg", "g"), ("up_d", "d(up factor)/du", "u"),
                                          ("dg", f"∂output/∂g at u = {up:g}", "g"))]
    return {"$schema": SCHEMA, "datasets": {"derivatives": data,
                                            "derivatives_hover": hover_bands(data, "x", HOVER_STEPS * width // (3 * WIDTH))},
            "hconcat": panels, "spacing": PANEL_GAP,
            "resolve": {"scale": {"x": "independent", "y": "independent"}}, "config": {"title": {"fontWeight": "normal"}},
            "usermeta": usermeta("situ_derivatives")}


# ---- the gate x up plane ---------------------------------------------------------------------------

GRID_CELLS = 21          # pointable cells a side at most (the image and the contours use every sample)
GRID_SCALE = [theme.OKABE_ITO["blue"], "#bbbbbb", theme.OKABE_ITO["vermillion"]]   # diverging, colour-blind safe
LEVELS = ((100.0, CAP_COLOUR, DOT), (448.0, FP8_COLOUR, DASH))
HALO = "rgba(255,255,255,0.85)"


def level_curves(axis: np.ndarray, z: np.ndarray, level: float) -> pd.DataFrame:
    """Where |z| = level on a grid z[up, gate] of a function gate(g)·up(u) with up() odd and increasing
    (both activations are): on each column |z| grows with |u| away from u = 0, so it crosses the level at
    most once above and once below, found by linear interpolation between rows. A branch is a run of
    neighbouring columns with a crossing on the same side (each one a function of g, drawn in g order);
    where it leaves through the top or bottom edge, the edge point is interpolated along that row."""
    a = np.abs(np.asarray(z, dtype=float))
    axis = np.asarray(axis, dtype=float)
    mid = int(np.searchsorted(axis, 0.0))                      # first row with u >= 0
    below = mid - 1 if mid == len(axis) or axis[mid] > 0 else mid
    rows, branch = [], 0
    for idx in (np.arange(mid, len(axis)), np.arange(below, -1, -1)):   # outwards from u = 0
        if len(idx) < 2:
            continue
        cross = []                                              # u of the crossing on each column, or None
        for j in range(len(axis)):
            col = a[idx, j]
            hit = np.flatnonzero(col >= level)
            if not len(hit) or hit[0] == 0:
                cross.append(None)
                continue
            k = hit[0]
            t = (level - col[k - 1]) / (col[k] - col[k - 1])
            cross.append(float(axis[idx[k - 1]] + t * (axis[idx[k]] - axis[idx[k - 1]])))
        edge, u_edge = a[idx[-1]], float(axis[idx[-1]])

        def at_edge(j0: int, j1: int) -> float | None:          # g where the edge row reaches the level
            if not edge[j0] < level <= edge[j1]:
                return None
            t = (level - edge[j0]) / (edge[j1] - edge[j0])
            return float(axis[j0] + t * (axis[j1] - axis[j0]))

        for j, u in enumerate(cross):
            if u is None:
                continue
            if j == 0 or cross[j - 1] is None:
                branch += 1
                g_in = at_edge(j - 1, j) if j > 0 else None
                if g_in is not None:
                    rows.append({"level": level, "branch": branch, "g": g_in, "u": u_edge})
            rows.append({"level": level, "branch": branch, "g": float(axis[j]), "u": u})
            if j + 1 < len(axis) and cross[j + 1] is None:
                g_out = at_edge(j + 1, j)
                if g_out is not None:
                    rows.append({"level": level, "branch": branch, "g": g_out, "u": u_edge})
    return pd.DataFrame(rows, columns=["level", "branch", "g", "u"])


def _slog_ticks(top: float) -> tuple[list[float], str]:
    """Colour-bar ticks on the signed log scale (log10(1 + |v|) with v's sign) and a label expression
    writing the values they stand for."""
    ones = (1,) if top < 2 else ()                             # +-1 crowds 0 once the scale passes 100
    ticks = [t for t in (0, *ones, 10, 100, 1e3, 1e4, 1e5, 1e6) if np.log10(1 + t) <= top + 1e-9]
    values = [float(np.log10(1 + t)) * s for t in ticks for s in ((1, -1) if t else (1,))]
    v = "(datum.value < 0 ? -1 : 1) * (pow(10, abs(datum.value)) - 1)"
    return sorted(values), f"abs({v}) >= 1e4 ? format({v}, '.0e') : format({v}, ',.0f')"


def signed_log(v: np.ndarray) -> np.ndarray:
    """log10(1 + |v|) with v's sign: the grid's colour scale."""
    return np.sign(v) * np.log10(1 + np.abs(v))


def grid_image(z: np.ndarray, top: float) -> str:
    """One function's grid z[up, gate] as a PNG data URL, one pixel per sample, up increasing upwards,
    coloured blue -> grey -> vermillion (GRID_SCALE, linear in RGB) over signed_log in [-top, top]."""
    return diverging_png(np.clip(signed_log(np.asarray(z, dtype=float))[::-1] / top, -1, 1), GRID_SCALE)


def grid_table(grid: dict) -> pd.DataFrame:
    """Every sample of both functions (the grid chart's CSV): function, g, u, value."""
    axis = np.asarray(grid["axis"], dtype=float)
    G, U = np.meshgrid(axis, axis, indexing="xy")
    return pd.concat([pd.DataFrame({"function": name, "g": G.ravel(), "u": U.ravel(), "value": np.asarray(grid[key]).ravel()})
                      for key, name in (("situ", "SiTU-GLU"), ("swiglu", "SwiGLU"))], ignore_index=True)


def grid_spec(grid: dict, width: int = WIDTH) -> dict:
    """Both functions over gate x up on one signed-log colour scale, with the |f| = 100 (dotted) and
    448 (dashed) contours where a function reaches them: SiTU-GLU's plane never leaves the band,
    SwiGLU's grows without bound. Each plane is one image of every sample (thousands of rect marks took
    the browser far longer to draw); under the pointer, invisible cells of at most GRID_CELLS a side
    give the value at their centre and carry the colour legend."""
    axis = np.asarray(grid["axis"], dtype=float)
    n = len(axis)
    # pointable cells on every step-th sample, step a divisor of n - 1 so that both edges are samples
    step = next(k for k in range(1, n) if (n - 1) % k == 0 and (n - 1) // k + 1 <= GRID_CELLS) if n > GRID_CELLS else 1
    keep = np.arange(0, n, step)
    d = float(axis[1] - axis[0]) if n > 1 else 1.0
    half = d * step / 2                                            # a pointable cell's half width
    top = float(np.log10(1 + max(np.abs(grid["swiglu"]).max(), np.abs(grid["situ"]).max(), 1.0)))
    G, U = np.meshgrid(axis[keep], axis[keep], indexing="xy")
    titles = {"situ": "SiTU-GLU(g, u): bounded by 100", "swiglu": "SwiGLU(g, u): unbounded"}
    names = {"situ": "SiTU-GLU", "swiglu": "SwiGLU"}
    # one dataset per panel and contour, every column precomputed: Streamlit's Vega evaluates expressions
    # (filters, calculations) with its slower interpreter
    datasets = {}
    for key in titles:
        v = np.asarray(grid[key])[np.ix_(keep, keep)].ravel()
        datasets[f"image_{key}"] = pd.DataFrame({"url": [grid_image(grid[key], top)]})
        datasets[f"cells_{key}"] = pd.DataFrame({"function": names[key], "g": G.ravel(), "u": U.ravel(), "value": v,
                                                 "signed_log": signed_log(v), "g0": G.ravel() - half, "g1": G.ravel() + half,
                                                 "u0": U.ravel() - half, "u1": U.ravel() + half})
        for level, _, _ in LEVELS:
            datasets[f"contour_{key}_{level:g}"] = level_curves(axis, grid[key], level).assign(function=names[key])
    ticks, label_expr = _slog_ticks(top)
    lim = [float(axis[0] - d / 2), float(axis[-1] + d / 2)]        # the image's pixels are the samples' cells
    panels, pw, ph = [], _panel_width(width, 2, legend=80), _panel_height(width, 320)
    for key, title in titles.items():
        x = {"field": "g", "type": "quantitative", "title": "gate g", "scale": {"domain": lim, "nice": False, "zero": False}}
        y = {"field": "u", "type": "quantitative", "title": "up u" if key == "situ" else None,
             "scale": {"domain": lim, "nice": False, "zero": False}}
        layers = [{"data": {"name": f"image_{key}"},
                   "mark": {"type": "image", "aspect": False, "smooth": False, "align": "left", "baseline": "top",
                            "width": pw, "height": ph, "tooltip": None},        # px: a concat has no "width" signal
                   "encoding": {"url": {"field": "url", "type": "nominal"}, "x": {"value": 0}, "y": {"value": 0}}},
                  {"data": {"name": f"cells_{key}"}, "mark": {"type": "rect", "opacity": 0, "clip": True},
                   "encoding": {"x": {**x, "field": "g0"}, "x2": {"field": "g1"},
                                "y": {**y, "field": "u0"}, "y2": {"field": "u1"},
                                "color": {"field": "signed_log", "type": "quantitative", "title": "value",
                                          "scale": {"domain": [-top, 0, top], "range": GRID_SCALE, "interpolate": "rgb"},
                                          "legend": {"orient": "right", "values": ticks, "labelExpr": label_expr,
                                                     "gradientLength": 260, "labelOverlap": False}},
                                "tooltip": [{"field": "function"}, {"field": "g", "type": "quantitative", "format": ".3g"},
                                            {"field": "u", "type": "quantitative", "format": ".3g"},
                                            {"field": "value", "type": "quantitative", "format": ".4g"}]}}]
        for level, colour, dash in LEVELS:
            part = datasets[f"contour_{key}_{level:g}"]
            if not len(part):
                continue
            layers.append({"data": {"name": f"contour_{key}_{level:g}"},
                           "mark": {"type": "line", "color": colour, "strokeDash": dash, "strokeWidth": 2, "clip": True},
                           "encoding": {"x": x, "y": y, "detail": {"field": "branch", "type": "nominal"},
                                        "tooltip": [{"field": "level", "type": "quantitative", "title": "contour |value| ="}],
                                        "order": {"field": "g", "type": "quantitative"}}})
            # its label where the first branch above u = 0 on the right meets the diagonal (else its middle)
            right = part[(part["g"] > 0) & (part["u"] > 0)]
            at = right.iloc[int(np.argmin(np.abs(right["g"] - right["u"])))] if len(right) else part.iloc[len(part) // 2]
            label = {"data": {"values": [{"g": float(at["g"]), "u": float(at["u"]), "label": f"|value| = {level:g}"}]},
                     "encoding": {"x": x, "y": y, "text": {"field": "label"}}}
            text = {"type": "text", "tooltip": None, "align": "left", "baseline": "bottom", "dx": 5, "dy": -3,
                    "fontWeight": "bold"}
            layers += [{**label, "mark": {**text, "color": HALO, "stroke": HALO, "strokeWidth": 4, "strokeJoin": "round"}},
                       {**label, "mark": {**text, "color": colour}}]     # a light halo: readable on any cell
        panels.append({"title": title, "width": pw, "height": ph, "layer": layers})
    return {"$schema": SCHEMA, "datasets": datasets, "hconcat": panels,
            "spacing": PANEL_GAP, "config": {"title": {"fontWeight": "normal"}, "view": {"stroke": None}},
            "usermeta": usermeta("situ_grid")}


# ---- the live experts ------------------------------------------------------------------------------

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
                                      **_colours(legend, [SWIGLU, SITU], symbolType="square", symbolOpacity=0.6)},
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
    style = {"color": {"field": "variant", "type": "nominal", **_colours(names, colours, columns=2)},
             "strokeDash": {"field": "variant", "type": "nominal", "scale": {"domain": names, "range": dashes},
                            "legend": _legend(columns=2)}}
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
    refs_drawn = _hlines(refs, label_align="right", halo=theme.paper(theme_type))
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
