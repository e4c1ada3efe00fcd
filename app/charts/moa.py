"""Figures of the MoE vs Mixture of Agents page: pure functions from data frames to plotly figures."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app import theme

SCALE = {"FLOPs": (1e12, "TFLOP"), "bytes": (1e9, "GB"), "seconds": (1.0, "s")}
RATIO_COLOURS = [theme.OKABE_ITO["blue"], theme.OKABE_ITO["orange"], theme.OKABE_ITO["green"],
                 theme.OKABE_ITO["purple"]]


def costs_figure(table: pd.DataFrame, moa_label: str) -> go.Figure:
    """One small bar chart per cost, K3 beside the Mixture of Agents, titled with the ratio."""
    titles = [f"{r.cost}<br><b>MoA / K3 = {r.ratio:,.1f}x</b>" for r in table.itertuples()]
    fig = make_subplots(rows=1, cols=len(table), subplot_titles=titles, horizontal_spacing=0.07)
    for i, r in enumerate(table.itertuples(), start=1):
        div, unit = SCALE.get(r.unit, (1.0, r.unit))
        ys = [r.K3 / div, r.MoA / div]
        fig.add_trace(go.Bar(
            x=["K3", "MoA"], y=ys, marker_color=[theme.K3, theme.ACCENT], showlegend=False,
            text=[f"{y:,.0f} {unit}" if y >= 100 else f"{y:,.3g} {unit}" for y in ys], textposition="outside",
            cliponaxis=False,
            customdata=["Kimi K3", moa_label],
            hovertemplate=f"{r.cost}<br>%{{customdata}}: %{{y:,.4g}} {unit}<extra></extra>"), row=1, col=i)
        fig.update_yaxes(title_text=unit, range=[0, max(ys) * 1.25], row=1, col=i)
    fig.update_annotations(font_size=12)
    fig.update_layout(height=360, margin=dict(l=10, r=10, t=70, b=10), bargap=0.35)
    return fig


def sweep_figure(sweep: pd.DataFrame, context: int) -> go.Figure:
    """MoA / K3 ratios against the prompt length (log axes), the chosen context marked."""
    fig = go.Figure()
    cols = [c for c in sweep.columns if c != "context"]
    for c, colour in zip(cols, RATIO_COLOURS):
        fig.add_trace(go.Scatter(x=sweep["context"], y=sweep[c], mode="lines+markers", name=c,
                                 line=dict(color=colour), marker=dict(size=6, color=colour),
                                 hovertemplate=f"{c}<br>context %{{x:,}}: MoA / K3 = %{{y:,.2f}}x<extra></extra>"))
    fig.add_vline(x=context, line=dict(dash="dot", width=1, color=theme.OKABE_ITO["grey"]))
    fig.add_hline(y=1, line=dict(dash="dash", width=1, color=theme.OKABE_ITO["vermillion"]))
    fig.add_annotation(x=1, xref="paper", y=0, text="equal cost", showarrow=False, xanchor="right", yanchor="bottom",
                       font=dict(size=11, color=theme.OKABE_ITO["vermillion"]))     # y in log10 units: 10^0 = 1
    ticks = [2 ** k for k in range(10, 21, 2)]
    fig.update_xaxes(type="log", title="prompt length (tokens, log)", tickvals=ticks,
                     ticktext=[f"{t // 1024}K" if t < 2 ** 20 else "1M" for t in ticks])
    lo = max(min(0.5, float(np.nanmin(sweep[cols].to_numpy())) * 0.8), 1e-3)
    hi = float(np.nanmax(sweep[cols].to_numpy())) * 1.5
    yticks = [v for v in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
              if lo <= v <= hi]
    fig.update_yaxes(type="log", title="MoA / K3 (log)", range=[np.log10(lo), np.log10(hi)], tickvals=yticks,
                     ticktext=[f"{v:g}x" for v in yticks])
    fig.update_layout(height=340, margin=dict(l=10, r=10, t=10, b=10), legend=dict(orientation="h", y=1.12, x=0))
    return fig


def step_figure(df: pd.DataFrame) -> go.Figure:
    """What one decode step reads: active weights and cache, for K3 and for one agent."""
    fig = go.Figure()
    for part, colour in zip(df["part"].unique(), (theme.K3, theme.OKABE_ITO["sky"])):
        d = df[df["part"] == part]
        fig.add_trace(go.Bar(y=d["model"], x=d["bytes"] / 1e9, name=part, orientation="h", marker_color=colour,
                             customdata=d["ms at the bandwidth"],
                             hovertemplate="%{y}<br>" + part + ": %{x:,.1f} GB = %{customdata:,.2f} ms<extra></extra>"))
    totals = df.groupby("model", sort=False)[["bytes", "ms at the bandwidth"]].sum()
    for model, row in totals.iterrows():
        fig.add_annotation(y=model, x=row["bytes"] / 1e9,
                           text=f"{row['bytes'] / 1e9:,.0f} GB → {row['ms at the bandwidth']:,.1f} ms",
                           showarrow=False, xanchor="left", xshift=6, font=dict(size=11))
    fig.update_xaxes(title="bytes read per decode step (GB)", range=[0, totals["bytes"].max() / 1e9 * 1.45])
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(barmode="stack", height=220, margin=dict(l=10, r=10, t=10, b=10),
                      legend=dict(orientation="h", y=1.25, x=0))
    return fig
