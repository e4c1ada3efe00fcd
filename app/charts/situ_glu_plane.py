"""Both activations over the whole gate x up plane, for the SiTU-GLU vs SwiGLU page: the two heatmaps
with their |value| = 100 and 448 contours (Vega-Lite), and the 3-D surfaces (plotly). Pure functions:
data in, figure out."""
from __future__ import annotations

import numpy as np
import pandas as pd

from app import theme
from app.charts.situ_glu import LEVELS, PANEL_GAP, SITU, SWIGLU, WIDTH, panel_height, panel_width
from app.charts.vega import SCHEMA, diverging_png, usermeta

GRID_CELLS = 21          # pointable cells a side at most (the image and the contours use every sample)
GRID_SCALE = [theme.OKABE_ITO["blue"], "#bbbbbb", theme.OKABE_ITO["vermillion"]]   # diverging, colour-blind safe
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
    panels, pw, ph = [], panel_width(width, 2, legend=80), panel_height(width, 320)
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


# ---- the 3-D surfaces --------------------------------------------------------------------------------

SURFACE_HEIGHT = 560                       # px; presenter mode draws it 1.35x, as ui.presenter_spec grows charts
# Grid lines a little darker (lighter) than the light (dark) page: plotly's own are white, lost on a white page.
GRID_LINES = {"light": "#d5d7dd", "dark": "#3b404c"}
# Scrolling over the figure scrolls the page (plotly's default zooms a 3-D scene, which traps the reader's
# wheel); the toolbar's buttons zoom instead.
SURFACE_CONFIG = {"scrollZoom": False, "displaylogo": False}


def surface_table(grid: dict) -> pd.DataFrame:
    """Every sample of the surfaces (their CSV): gate, up and both functions' values, one row per point."""
    axis = np.asarray(grid["axis"], dtype=float)
    G, U = np.meshgrid(axis, axis, indexing="xy")                  # [n, n]: rows up, columns gate, as grid2d's
    return pd.DataFrame({"gate g": G.ravel(), "up u": U.ravel(), "SiTU-GLU": np.asarray(grid["situ"]).ravel(),
                         "SwiGLU": np.asarray(grid["swiglu"]).ravel()})


def surface_figure(grid: dict, cap: float, theme_type: str | None = None):
    """Both functions of app.situ_glu.grid2d as 3-D surfaces over the same gate x up grid, in one scene on one output
    axis: SiTU-GLU's sheet stays within +-cap while SwiGLU's saddle grows as g·u. The app's one plotly figure;
    plotly is imported here so that only this page's code asks for it."""
    import plotly.graph_objects as go
    axis = np.asarray(grid["axis"], dtype=float)
    ink, lines = theme.ink(theme_type), GRID_LINES.get(theme_type, "rgba(128,128,128,0.4)")

    def surface(key: str, name: str, colour: str, **kw) -> go.Surface:
        return go.Surface(x=axis, y=axis, z=np.asarray(grid[key], dtype=float), name=name, showlegend=True,
                          showscale=False, colorscale=[[0, colour], [1, colour]],   # one colour, shaded by the light
                          hovertemplate=f"{name.split(' ')[0]}<br>g = %{{x:.4g}}<br>u = %{{y:.4g}}<br>"
                                        "output = %{z:.4g}<extra></extra>", **kw)

    fig = go.Figure([surface("situ", f"SiTU-GLU (|output| ≤ {cap:g})", SITU),
                     surface("swiglu", "SwiGLU (unbounded)", SWIGLU, opacity=0.8)])
    axis_style = {"color": ink, "gridcolor": lines, "zerolinecolor": lines, "showbackground": False,
                  "spikecolor": ink}
    R = float(axis[-1])
    fig.update_layout(
        title={"text": f"SiTU-GLU and SwiGLU over the same gate × up grid (g and u in ±{R:g})", "x": 0, "xanchor": "left"},
        font={"color": ink}, paper_bgcolor="rgba(0,0,0,0)", margin={"l": 0, "r": 0, "t": 40, "b": 0},
        legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "top"},
        scene={"xaxis": {"title": {"text": "gate g"}, **axis_style}, "yaxis": {"title": {"text": "up u"}, **axis_style},
               "zaxis": {"title": {"text": "output"}, **axis_style},
               "aspectmode": "manual", "aspectratio": {"x": 1.15, "y": 1.15, "z": 0.85},
               "camera": {"eye": {"x": 1.6, "y": -1.6, "z": 0.8}}})          # large g to the front, u across
    return fig
