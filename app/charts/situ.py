"""Figures of the SiTU-GLU vs SwiGLU page: pure functions from data to plotly figures."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app import theme

SITU, SWIGLU = theme.K3, theme.ACCENT                       # blue, orange
CAP_COLOUR, FP8_COLOUR = theme.OKABE_ITO["green"], theme.OKABE_ITO["vermillion"]
GREY = theme.OKABE_ITO["grey"]
CHAIN_STYLE = {   # (activation, norm) -> colour, dash
    ("swiglu", False): (theme.OKABE_ITO["vermillion"], "dash"),
    ("swiglu", True): (theme.OKABE_ITO["orange"], "solid"),
    ("situ_glu", False): (theme.OKABE_ITO["sky"], "dash"),
    ("situ_glu", True): (theme.OKABE_ITO["blue"], "solid"),
}


def _limit_lines(fig, y_lo, y_hi, cap=100.0, fp8=448.0, row=None, col=None, labels=True):
    """Horizontal lines at +-cap and +-fp8 where they fall inside [y_lo, y_hi]."""
    for value, colour, dash, name in ((cap, CAP_COLOUR, "dot", "SiTU-GLU cap 100"),
                                      (fp8, FP8_COLOUR, "dash", "E4M3 max 448 (no block scale)")):
        for sign in (1, -1):
            y = sign * value
            if not y_lo <= y <= y_hi:
                continue
            kw = {"row": row, "col": col} if row else {}
            fig.add_hline(y=y, line=dict(color=colour, dash=dash, width=1.5),
                          annotation_text=(name if sign > 0 or not y_lo <= value <= y_hi else "") if labels else "",
                          annotation_position="top left", annotation_font_color=colour, **kw)


def output_figure(df: pd.DataFrame, up: float, crossings: list[float], full_range: bool = False) -> go.Figure:
    """Both activations against the gate value at one up value, with the cap and FP8 limits."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=df["x"], y=df["swiglu"], name="SwiGLU  g·σ(g)·u", line=dict(color=SWIGLU, width=2.5),
                             hovertemplate="g = %{x:.3g}<br>SwiGLU = %{y:.4g}<extra></extra>"))
    fig.add_trace(go.Scatter(x=df["x"], y=df["situ"], name="SiTU-GLU  4tanh(g/4)σ(g)·25tanh(u/25)",
                             line=dict(color=SITU, width=2.5),
                             hovertemplate="g = %{x:.3g}<br>SiTU-GLU = %{y:.4g}<extra></extra>"))
    y_all = np.concatenate([df["swiglu"].to_numpy(), df["situ"].to_numpy()])
    if full_range:
        lo, hi = float(y_all.min()), float(y_all.max())
        pad = 0.08 * max(hi - lo, 1e-9)
        lo, hi = lo - pad, hi + pad
    else:   # a window that always shows both limits; SwiGLU leaving it is the point
        top = max(1.25 * 448, 1.1 * float(np.abs(df["situ"]).max()))
        lo, hi = max(-top, min(-0.12 * top, 1.3 * float(y_all.min()))), min(top, max(0.12 * top, 1.3 * float(y_all.max())))
    _limit_lines(fig, lo, hi)
    for g in crossings:
        fig.add_trace(go.Scatter(
            x=[g], y=[448.0 * float(np.sign(up)) * (1.0 if g > 0 else -1.0)],
            mode="markers+text", marker=dict(size=12, color=FP8_COLOUR, symbol="x"),
            text=[f"  SwiGLU hits {'' if up * g > 0 else '-'}448 at g = {g:.4g}"],
            textposition="bottom right" if up * g > 0 else "top right",
            name="where SwiGLU crosses 448", showlegend=g == crossings[0],
            hovertemplate=f"|SwiGLU| = 448 at g = {g:.6g}, u = {up:g}<extra></extra>"))
    fig.update_xaxes(title="gate pre-activation g", zeroline=False)
    fig.update_yaxes(title=f"output at up value u = {up:g}", range=[lo, hi])
    fig.update_layout(height=420, margin=dict(l=10, r=10, t=30, b=10), hovermode="x unified",
                      legend=dict(orientation="h", y=-0.2, x=0))
    return fig


def factors_figure(df: pd.DataFrame) -> go.Figure:
    """The gate factor against g and the up factor against u, each with its bound."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        "gate factor: 4·tanh(g/4)·σ(g) vs swish g·σ(g)", "up factor: 25·tanh(u/25) vs u"))
    x = df["x"]
    for col, (s_key, w_key, cap, s_name, w_name) in enumerate((
            ("situ_gate", "swiglu_gate", 4.0, "SiTU-GLU gate factor", "SwiGLU gate factor (swish)"),
            ("situ_up", "swiglu_up", 25.0, "SiTU-GLU up factor", "SwiGLU up factor (identity)")), start=1):
        fig.add_trace(go.Scatter(x=x, y=df[w_key], name=w_name, line=dict(color=SWIGLU, width=2.5),
                                 legendgroup="swiglu", showlegend=col == 1), row=1, col=col)
        fig.add_trace(go.Scatter(x=x, y=df[s_key], name=s_name, line=dict(color=SITU, width=2.5),
                                 legendgroup="situ", showlegend=col == 1), row=1, col=col)
        top = min(float(df[w_key].max()), 3 * cap)
        lo = -top if col == 2 else -0.6
        fig.add_hline(y=cap, line=dict(color=CAP_COLOUR, dash="dot", width=1.5), row=1, col=col,
                      annotation_text=f"bound {cap:g}", annotation_position="top left",
                      annotation_font_color=CAP_COLOUR)
        fig.update_yaxes(range=[lo, max(top, 1.3 * cap)], row=1, col=col)
    # the gate factor's minimum, read off the curve
    i = int(df["situ_gate"].idxmin())
    fig.add_annotation(x=df["x"][i], y=df["situ_gate"][i], text=f"min {df['situ_gate'][i]:.4f} at g = {df['x'][i]:.2f}",
                       showarrow=True, arrowhead=2, ax=-40, ay=-45, row=1, col=1)
    fig.update_xaxes(title="g", row=1, col=1)
    fig.update_xaxes(title="u", row=1, col=2)
    fig.update_layout(height=380, margin=dict(l=10, r=10, t=40, b=10), hovermode="x unified",
                      legend=dict(orientation="h", y=-0.25, x=0))
    return fig


def derivative_figure(df: pd.DataFrame, up: float) -> go.Figure:
    """Derivatives by torch.autograd: of each factor, and of the output in g at the chosen u."""
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.07, subplot_titles=(
        "d(gate factor)/dg", "d(up factor)/du", f"∂output/∂g at u = {up:g}"))
    for col, (s_key, w_key) in enumerate((("situ_gate_d", "swiglu_gate_d"), ("situ_up_d", "swiglu_up_d"),
                                          ("situ_dg", "swiglu_dg")), start=1):
        fig.add_trace(go.Scatter(x=df["x"], y=df[w_key], name="SwiGLU", line=dict(color=SWIGLU, width=2.5),
                                 legendgroup="swiglu", showlegend=col == 1), row=1, col=col)
        fig.add_trace(go.Scatter(x=df["x"], y=df[s_key], name="SiTU-GLU", line=dict(color=SITU, width=2.5),
                                 legendgroup="situ", showlegend=col == 1), row=1, col=col)
    fig.update_xaxes(title="g", row=1, col=1)
    fig.update_xaxes(title="u", row=1, col=2)
    fig.update_xaxes(title="g", row=1, col=3)
    fig.update_layout(height=340, margin=dict(l=10, r=10, t=40, b=10), hovermode="x unified",
                      legend=dict(orientation="h", y=-0.28, x=0))
    return fig


def _signed_log(v: np.ndarray) -> np.ndarray:
    return np.sign(v) * np.log10(1 + np.abs(v))


def grid_figure(grid: dict) -> go.Figure:
    """Both functions over gate x up on one signed-log colour scale, with the |f| = 100 and 448
    contours: SiTU-GLU's plane never leaves the band, SwiGLU's grows without bound."""
    axis = grid["axis"]
    top = float(np.log10(1 + max(np.abs(grid["swiglu"]).max(), np.abs(grid["situ"]).max(), 1.0)))
    ticks = [t for t in (0, 1, 10, 100, 1e3, 1e4, 1e5, 1e6) if np.log10(1 + t) <= top + 1e-9]
    tickvals = [float(np.log10(1 + t)) * s for t in ticks for s in ((1, -1) if t else (1,))]
    ticktext = [(f"{s * t:,.0f}" if t < 1e4 else f"{s * t:.0e}") for t in ticks for s in ((1, -1) if t else (1,))]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.08,
                        subplot_titles=("SiTU-GLU(g, u): bounded by 100", "SwiGLU(g, u): unbounded"))
    # Okabe-Ito blue -> grey -> vermillion: diverging and colour-blind safe on both themes
    scale = [[0, theme.OKABE_ITO["blue"]], [0.5, "#bbbbbb"], [1, theme.OKABE_ITO["vermillion"]]]
    for col, key in enumerate(("situ", "swiglu"), start=1):
        z = grid[key]
        fig.add_trace(go.Heatmap(
            x=axis, y=axis, z=_signed_log(z), zmin=-top, zmax=top, colorscale=scale, customdata=z,
            showscale=col == 2, colorbar=dict(title="value", tickvals=tickvals, ticktext=ticktext, len=0.9),
            hovertemplate="g = %{x:.3g}<br>u = %{y:.3g}<br>value = %{customdata:.4g}<extra></extra>"),
            row=1, col=col)
        for level, colour, dash in ((100.0, CAP_COLOUR, "dot"), (448.0, FP8_COLOUR, "dash")):
            if np.abs(z).max() < level:
                continue
            fig.add_trace(go.Contour(
                x=axis, y=axis, z=np.abs(z), showscale=False, hoverinfo="skip",
                contours=dict(start=level, end=level, size=1, coloring="none", showlabels=True,
                              labelfont=dict(color=colour)),
                line=dict(color=colour, width=2, dash=dash),
                name=f"|value| = {level:g}", showlegend=False), row=1, col=col)
    fig.update_xaxes(title="gate g")
    fig.update_yaxes(title="up u", col=1)
    fig.update_layout(height=430, margin=dict(l=10, r=10, t=40, b=10))
    return fig


def histogram_figure(values: dict[str, np.ndarray], names: dict[str, str]) -> go.Figure:
    """Hidden activations of the routed experts, both functions on the same bins, log counts."""
    allv = np.concatenate(list(values.values()))
    lo, hi = float(allv.min()), float(allv.max())
    if hi - lo < 1e-12:
        lo, hi = lo - 1, hi + 1
    size = (hi - lo) / 80
    fig = go.Figure()
    for key, colour in (("swiglu", SWIGLU), ("situ_glu", SITU)):
        fig.add_trace(go.Histogram(x=values[key], name=names[key], marker_color=colour, opacity=0.6,
                                   xbins=dict(start=lo, end=hi + size, size=size),
                                   hovertemplate="%{x}<br>%{y} values<extra>" + names[key] + "</extra>"))
    for value, colour, dash, label in ((100.0, CAP_COLOUR, "dot", "100"), (448.0, FP8_COLOUR, "dash", "448")):
        for sign in (1, -1):
            if lo <= sign * value <= hi:
                fig.add_vline(x=sign * value, line=dict(color=colour, dash=dash, width=1.5),
                              annotation_text=f"{'-' if sign < 0 else ''}{label}",
                              annotation_font_color=colour)
    fig.update_xaxes(title="hidden activation value h = act(g, u)")
    fig.update_yaxes(title="count (log)", type="log")
    fig.update_layout(barmode="overlay", height=360, margin=dict(l=10, r=10, t=20, b=10),
                      legend=dict(orientation="h", y=-0.25, x=0))
    return fig


def _log_hline(fig, value: float, text: str, colour: str, dash: str) -> None:
    # shapes take data values on a log axis, annotations take log10 of them (plotly convention)
    fig.add_hline(y=value, line=dict(color=colour, dash=dash, width=1.5))
    fig.add_annotation(x=0, xref="x domain", y=math.log10(value), yref="y", text=text, showarrow=False,
                       xanchor="left", yanchor="bottom", font=dict(color=colour, size=11))


def chain_figure(table: pd.DataFrame, metric: str = "max_h", ceiling: float = 1e6) -> go.Figure:
    """Activation magnitude per layer of the routed-path chain, log y, one line per variant. Values
    past `ceiling` leave the chart, marked where they do (the table beside it says where they pass the
    float32 maximum or overflow float64), so the bounded variants stay readable."""
    fig = go.Figure()
    label = {"max_h": "largest |hidden activation|", "rms_out": "RMS of the routed output"}[metric]
    lo_val, hi_val = math.inf, 1.0
    for (activation, norm), part in table.groupby(["activation", "norm"], sort=False):
        colour, dash = CHAIN_STYLE[(activation, norm)]
        ok = part[np.isfinite(part[metric]) & (part[metric] > 0)]
        name = part["variant"].iloc[0]
        shown = ok[ok[metric] <= ceiling]
        fig.add_trace(go.Scatter(x=ok["layer"], y=ok[metric], name=name, mode="lines",
                                 line=dict(color=colour, dash=dash, width=2.5),
                                 hovertemplate="layer %{x}<br>%{y:.3g}<extra>" + name + "</extra>"))
        if len(shown):
            lo_val, hi_val = min(lo_val, float(shown[metric].min())), max(hi_val, float(shown[metric].max()))
        gone = part[~part.index.isin(shown.index)]
        if len(gone):
            first = gone.iloc[0]
            inf = not np.isfinite(first[metric])
            fig.add_trace(go.Scatter(
                x=[first["layer"]], y=[ceiling], mode="markers+text", cliponaxis=False,
                marker=dict(symbol="triangle-up", size=13, color=colour),
                text=[f"{'overflow (inf)' if inf else f'past {ceiling:.0e}'} from layer {int(first['layer'])}"],
                textposition="middle right", showlegend=False,
                hovertemplate=f"{name}: past {ceiling:.0e} from layer {int(first['layer'])}<extra></extra>"))
            hi_val = ceiling
    if metric == "max_h":
        for value, colour, dash, text in ((100.0, CAP_COLOUR, "dot", "SiTU-GLU cap 100"),
                                          (448.0, FP8_COLOUR, "dash", "E4M3 max 448 (no block scale)"),
                                          (3.4e38, GREY, "dashdot", "FP32 / BF16 max 3.4e38")):
            if value <= hi_val * 10:
                _log_hline(fig, value, text, colour, dash)
                hi_val = max(hi_val, value)
    lo_val = lo_val if np.isfinite(lo_val) else 1e-3
    fig.update_xaxes(title="MoE layer", range=[0, 93])
    fig.update_yaxes(title=f"{label} (log)", type="log", exponentformat="power", dtick=1,
                     range=[math.log10(lo_val) - 0.5, math.log10(hi_val) + 0.8])
    fig.update_layout(height=440, margin=dict(l=10, r=10, t=20, b=10), hovermode="closest",
                      legend=dict(orientation="h", y=-0.2, x=0))
    return fig
