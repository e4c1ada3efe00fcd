"""Figures of the Load balancing lab: pure functions from arrays and frames to plotly figures."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app import theme

COLOURS = {
    "No balancing": theme.OKABE_ITO["grey"],
    "Sign rule (DeepSeek-V3)": theme.OKABE_ITO["vermillion"],
    "Auxiliary loss": theme.OKABE_ITO["purple"],
    "Quantile Balancing, histogram": theme.OKABE_ITO["sky"],
    "Quantile Balancing, exact": theme.OKABE_ITO["blue"],
}
DASH = {"Quantile Balancing, histogram": "dash"}


def load_figure(load: np.ndarray, target: float, title: str, sort: bool = False) -> go.Figure:
    """One bar per expert at the chosen step, the target q = m k / n as a line, empty experts marked."""
    n = len(load)
    order = np.argsort(-load, kind="stable") if sort else np.arange(n)
    y = load[order]
    colour = np.where(y == 0, theme.OKABE_ITO["vermillion"],
                      np.where(y > target, theme.OKABE_ITO["orange"], theme.OKABE_ITO["blue"]))
    x = np.arange(n)
    fig = go.Figure(go.Bar(
        x=x, y=y, marker=dict(color=colour, line=dict(width=0)), customdata=order,
        hovertemplate="expert %{customdata}<br>load %{y} tokens<extra></extra>", showlegend=False))
    fig.add_trace(go.Scatter(x=[-0.5, n - 0.5], y=[target, target], mode="lines", showlegend=False,
                             hovertemplate=f"target q = m·k/n = {target:,.1f}<extra></extra>",
                             line=dict(color=theme.OKABE_ITO["green"], width=2, dash="dash")))
    fig.update_xaxes(title="experts, sorted by load" if sort else "expert id", showticklabels=not sort)
    fig.update_yaxes(title="tokens routed to the expert")
    fig.update_layout(height=330, margin=dict(l=10, r=10, t=30, b=10), bargap=0,
                      title=dict(text=f"{title}; dashed: target q = m·k/n = {target:,.1f}", font=dict(size=14)))
    return fig


def steps_figure(df: pd.DataFrame, floor: float) -> go.Figure:
    """max/mean (log), coefficient of variation and empty experts over steps, every method."""
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.08,
                        subplot_titles=("max / mean load (log)", "coefficient of variation", "experts with no token"))
    for method, d in df.groupby("method", sort=False):
        style = dict(color=COLOURS.get(method), width=2.5, dash=DASH.get(method, "solid"))
        for col, key in enumerate(("max/mean", "cv", "dead"), start=1):
            fig.add_trace(go.Scatter(x=d["step"], y=d[key], mode="lines+markers", name=method, line=style,
                                     marker=dict(size=5), legendgroup=method, showlegend=col == 1,
                                     hovertemplate=f"{method}<br>step %{{x}}: %{{y:.4g}}<extra></extra>"),
                          row=1, col=col)
    # shapes take data values on a log axis, annotations log10 of them (plotly convention)
    # One reference line, the goal: the sampling-noise floor of this batch size (app.balance.goal_note)
    colour = theme.OKABE_ITO["green"]
    fig.add_hline(y=floor, row=1, col=1, line=dict(color=colour, dash="dot", width=1.5))
    fig.add_annotation(x=0.98, xref="x domain", y=math.log10(floor), yref="y", text=f"goal: noise floor {floor:.2f}",
                       showarrow=False, xanchor="right", yanchor="top", font=dict(color=colour, size=11))
    top = max(2.0, float(df["max/mean"].max()))
    ticks = [v for v in (1, 1.5, 2, 3, 5, 10, 20, 50, 100, 200, 500) if v <= top * 1.2]
    fig.update_yaxes(type="log", row=1, col=1, tickvals=ticks, ticktext=[f"{v:g}" for v in ticks],
                     range=[math.log10(min(1.0, float(df["max/mean"].min()))) - 0.02, math.log10(top) + 0.08])
    fig.update_xaxes(title="step (one fresh batch each)")
    fig.update_layout(height=380, margin=dict(l=10, r=10, t=40, b=10), hovermode="closest",
                      legend=dict(orientation="h", y=-0.25, x=0))
    return fig


def hist_error_figure(exact: np.ndarray, hist: np.ndarray, bin_width: float) -> go.Figure:
    """Left: histogram estimate against the exact quantile, one point per expert. Right: the error
    in bin widths (the estimator promises at most one)."""
    err = np.abs(hist - exact) / bin_width
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1, subplot_titles=(
        "bias from the histogram vs exact quantile", "error per expert, in bin widths"))
    lo, hi = float(min(exact.min(), hist.min())), float(max(exact.max(), hist.max()))
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color=theme.OKABE_ITO["grey"], dash="dot"),
                             showlegend=False, hoverinfo="skip"), row=1, col=1)
    fig.add_trace(go.Scatter(x=exact, y=hist, mode="markers", showlegend=False,
                             marker=dict(size=5, color=theme.OKABE_ITO["sky"]), customdata=np.arange(len(exact)),
                             hovertemplate="expert %{customdata}<br>exact %{x:.5f}<br>histogram %{y:.5f}<extra></extra>"),
                  row=1, col=1)
    fig.add_trace(go.Histogram(x=err, xbins=dict(start=0, end=max(1.05, float(err.max()) * 1.05), size=0.05),
                               marker_color=theme.OKABE_ITO["blue"], showlegend=False,
                               hovertemplate="error %{x} bins: %{y} experts<extra></extra>"), row=1, col=2)
    fig.add_vline(x=1.0, row=1, col=2, line=dict(color=theme.OKABE_ITO["vermillion"], dash="dash"),
                  annotation_text="one bin", annotation_font_color=theme.OKABE_ITO["vermillion"])
    fig.update_xaxes(title="exact b̂ (uncentred)", row=1, col=1)
    fig.update_yaxes(title="histogram b̂", row=1, col=1)
    fig.update_xaxes(title="|histogram - exact| / bin width", row=1, col=2)
    fig.update_yaxes(title="experts", row=1, col=2)
    fig.update_layout(height=340, margin=dict(l=10, r=10, t=40, b=10))
    return fig


def weights_figure(pairs: pd.DataFrame) -> go.Figure:
    """For experts chosen both with and without the bias (weights renormalised over them): the
    weight with it minus the weight without. Quantile Balancing: exactly 0 up to rounding."""
    fig = go.Figure()
    for name, colour, size in (("Auxiliary-loss offsets", theme.OKABE_ITO["purple"], 6),
                               ("Quantile Balancing bias", theme.OKABE_ITO["blue"], 5)):
        d = pairs[pairs["method"] == name]
        fig.add_trace(go.Scatter(x=d["without"], y=d["with"] - d["without"], mode="markers", name=name,
                                 marker=dict(size=size, color=colour, opacity=0.7), customdata=d["with"],
                                 hovertemplate=name + "<br>without %{x:.5f}<br>with %{customdata:.5f}"
                                                      "<br>difference %{y:.2e}<extra></extra>"))
    fig.add_hline(y=0, line=dict(color=theme.OKABE_ITO["grey"], dash="dot"))
    fig.update_xaxes(title="output weight without the bias / offsets (renormalised over the common experts)")
    fig.update_yaxes(title="weight with − weight without", exponentformat="e")
    fig.update_layout(height=360, margin=dict(l=10, r=10, t=20, b=10), legend=dict(orientation="h", y=-0.25, x=0))
    return fig
