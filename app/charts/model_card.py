"""Figures of the Model card: training curves from the CSV log. Pure functions."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app import theme


def training_figure(log: pd.DataFrame, unigram: float | None = None, window: int = 25) -> go.Figure:
    """Loss (train, smoothed, and validation) above, load balance below, the MXFP4 phase shaded."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("cross-entropy per token (nats)", "expert load balance"))
    fig.add_trace(go.Scatter(x=log["step"], y=log["loss"], mode="lines", name="training loss",
                             line=dict(color=theme.OKABE_ITO["grey"], width=1), opacity=0.5), 1, 1)
    fig.add_trace(go.Scatter(x=log["step"], y=log["loss"].rolling(window, min_periods=1).mean(),
                             mode="lines", name=f"training loss ({window}-step mean)",
                             line=dict(color=theme.K3, width=2)), 1, 1)
    val = log[pd.to_numeric(log["val_loss"], errors="coerce").notna()]
    fig.add_trace(go.Scatter(x=val["step"], y=pd.to_numeric(val["val_loss"]), mode="lines+markers",
                             name="validation loss", line=dict(color=theme.ACCENT, width=2)), 1, 1)
    if unigram is not None:
        fig.add_hline(y=unigram, line=dict(dash="dot", color=theme.OKABE_ITO["vermillion"]), row=1, col=1,
                      annotation_text="unigram baseline", annotation_position="top right")
    fig.add_trace(go.Scatter(x=log["step"], y=log["max_mean_load"].rolling(window, min_periods=1).mean(),
                             mode="lines", name="max/mean expert load (worst layer)",
                             line=dict(color=theme.MOE, width=2)), 2, 1)
    fig.add_trace(go.Scatter(x=log["step"], y=log["dead_experts"].rolling(window, min_periods=1).mean(),
                             mode="lines", name="experts with no token in the batch (mean per layer)",
                             line=dict(color=theme.OKABE_ITO["purple"], width=2)), 2, 1)
    quant = log[log["quant"] == 1]
    if len(quant):
        for row in (1, 2):
            fig.add_vrect(x0=quant["step"].min(), x1=log["step"].max(), fillcolor=theme.OKABE_ITO["yellow"],
                          opacity=0.12, line_width=0, row=row, col=1)
        fig.add_annotation(x=log["step"].max(), y=1, yref="paper", text="MXFP4 experts (QAT)",
                           showarrow=False, xanchor="right", yanchor="top", font=dict(size=11))
    fig.update_xaxes(title="training step", row=2, col=1)
    fig.update_layout(height=560, margin=dict(l=10, r=10, t=40, b=10), legend=dict(orientation="h", y=-0.15))
    return fig


def bias_figure(log: pd.DataFrame) -> go.Figure:
    fig = go.Figure(go.Scatter(x=log["step"], y=log["bias_spread"], mode="lines",
                               line=dict(color=theme.OKABE_ITO["blue"], width=2), name="bias spread"))
    fig.update_layout(height=260, margin=dict(l=10, r=10, t=10, b=10), xaxis_title="training step",
                      yaxis_title="max - min balancing bias (mean over layers)")
    return fig
