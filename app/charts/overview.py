"""Figures of the Overview page: pure functions from data frames to plotly figures."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app import theme


def stack_figure(stack: pd.DataFrame, n_blocks: int) -> go.Figure:
    """The layer stack as two rows of squares (attention above, FFN below), AttnRes blocks shaded."""
    fig = go.Figure()
    attn_colour = {"KDA": theme.KDA, "MLA": theme.MLA}
    names = {"KDA": "Kimi Delta Attention", "MLA": "gated MLA"}
    for kind in ("KDA", "MLA"):
        part = stack[stack["attention"] == kind]
        fig.add_trace(go.Scatter(
            x=part["layer"], y=[1] * len(part), mode="markers", name=f"{names[kind]} ({len(part)})",
            marker=dict(symbol="square", size=11, color=attn_colour[kind], line=dict(width=0)),
            hovertext=part["hover"], hoverinfo="text"))
    for kind, colour, label in (("dense", theme.DENSE, "dense FFN"), ("MoE", theme.MOE, "LatentMoE FFN")):
        part = stack[stack["ffn"] == kind]
        fig.add_trace(go.Scatter(
            x=part["layer"], y=[0] * len(part), mode="markers", name=f"{label} ({len(part)})",
            marker=dict(symbol="square", size=11, color=colour, line=dict(width=0)),
            hovertext=part["hover"], hoverinfo="text"))
    for b in range(n_blocks):
        layers = stack.loc[stack["block"] == b, "layer"]
        if layers.empty:
            continue
        fig.add_vrect(x0=layers.min() - 0.5, x1=layers.max() + 0.5, y0=0, y1=1, line_width=0,
                      fillcolor=theme.SEQUENCE[7] if b % 2 else theme.SEQUENCE[5], opacity=0.12, layer="below")
        fig.add_annotation(x=(layers.min() + layers.max()) / 2, y=1.75, text=f"block {b + 1}",
                           showarrow=False, font=dict(size=11))
    fig.update_yaxes(tickvals=[0, 1], ticktext=["FFN", "attention"], range=[-0.8, 2.1], fixedrange=True,
                     showgrid=False, zeroline=False)
    fig.update_xaxes(title="layer (0-based)", range=[-1, len(stack)], dtick=4, showgrid=False, zeroline=False)
    fig.update_layout(height=250, margin=dict(l=10, r=10, t=10, b=10), hovermode="closest",
                      legend=dict(orientation="h", y=-0.45, x=0))
    return fig


def breakdown_figure(df: pd.DataFrame, which: str = "total") -> go.Figure:
    """Share of the parameters by component ('total' = stored weights, 'active' = used per token)."""
    share = f"share of {which}"
    d = df[df[which] > 0].sort_values(which)
    fig = go.Figure(go.Bar(
        x=d[share] * 100, y=d["component"], orientation="h",
        marker_color=[theme.ACCENT if c == "routed experts" else theme.K3 for c in d["component"]],
        text=[f"{s * 100:.2f}%  ({v / 1e9:,.1f}B)" for s, v in zip(d[share], d[which])],
        textposition="outside", cliponaxis=False,
        hovertemplate="%{y}: %{x:.3f}%<extra></extra>"))
    fig.update_xaxes(title=f"% of {'all stored' if which == 'total' else 'per-token active'} parameters",
                     range=[0, 118], ticksuffix="%")
    fig.update_layout(height=360, margin=dict(l=10, r=10, t=10, b=10))
    return fig


def frontier_figure(df: pd.DataFrame) -> go.Figure:
    """Total vs active parameters on log axes, with lines of constant active share."""
    fig = go.Figure()
    x_max, y_max = 5000, 200
    for share in (0.01, 0.03, 0.1, 0.3):
        fig.add_trace(go.Scatter(x=[30, x_max], y=[30 * share, x_max * share], mode="lines", showlegend=False,
                                 hoverinfo="skip", line=dict(dash="dot", width=1, color=theme.OKABE_ITO["grey"])))
        # label where the line leaves the plot, just inside it
        x_end = min(x_max, y_max / share) * 0.8
        fig.add_annotation(x=np.log10(x_end), y=np.log10(x_end * share), text=f"{share:.0%} active",
                           showarrow=False, xanchor="right", yshift=9,
                           font=dict(size=10, color=theme.OKABE_ITO["grey"]))
    for origin, colour, symbol, size in (("published", theme.K2, "circle", 11),
                                         ("computed", theme.ACCENT, "star", 20)):
        d = df[df["origin"] == origin]
        fig.add_trace(go.Scatter(
            x=d["total_b"], y=d["active_b"], mode="markers+text", text=d["model"],
            textposition="middle left" if origin == "computed" else "top center",
            name=("published figures" if origin == "published"
                                             else "Kimi K3, computed by our accounting"),
            marker=dict(size=size, color=colour, symbol=symbol, line=dict(width=1, color="rgba(0,0,0,0.4)")),
            customdata=np.stack([d["source"], d["active share"] * 100], axis=1),
            hovertemplate="<b>%{text}</b><br>total %{x:,.1f}B<br>active %{y:,.1f}B (%{customdata[1]:.1f}%)"
                          "<br>source: %{customdata[0]}<extra></extra>"))
    fig.update_xaxes(type="log", title="total parameters (billions, log)", range=[np.log10(30), np.log10(x_max)],
                     tickvals=[30, 50, 100, 200, 500, 1000, 2000, 5000])
    fig.update_yaxes(type="log", title="active parameters per token (billions, log)",
                     range=[np.log10(2), np.log10(y_max)], tickvals=[2, 5, 10, 20, 50, 100, 200])
    fig.update_layout(height=520, margin=dict(l=10, r=10, t=10, b=10),
                      legend=dict(orientation="h", y=-0.15, x=0))
    return fig


def growth_figure(df: pd.DataFrame, cols: int = 5) -> go.Figure:
    """K2 -> K3, one small bar chart per metric, each on its own scale, titled with the ratio."""
    rows = -(-len(df) // cols)
    titles = [f"{m}<br><b>x{r:.2f}</b>" for m, r in zip(df["metric"], df["ratio"])]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, vertical_spacing=0.28,
                        horizontal_spacing=0.06)
    for i, r in enumerate(df.itertuples()):
        fig.add_trace(go.Bar(
            x=["K2", "K3"], y=[r.K2, r.K3], marker_color=[theme.K2, theme.K3], showlegend=False,
            text=[_short(r.K2), _short(r.K3)], textposition="inside",
            hovertemplate=f"{r.metric}<br>%{{x}}: %{{y:,.4g}}<br>{r.origin}<extra></extra>"),
            row=i // cols + 1, col=i % cols + 1)
    fig.update_annotations(font_size=11)
    fig.update_yaxes(showticklabels=False, showgrid=False)
    fig.update_layout(height=200 * rows + 60, margin=dict(l=10, r=10, t=50, b=10), bargap=0.25)
    return fig


def _short(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:.2f}M" if v % 1e6 else f"{v / 1e6:.0f}M"
    if v >= 1e4:
        return f"{v / 1e3:.0f}K"
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"
