"""Figures of the Expert parallelism page: pure functions from arrays and frames to plotly figures."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app import theme

# sequential, colour-blind safe, legible on both themes: light sky -> Okabe-Ito blue -> vermillion
# diverging around an even share (1): under-loaded blue, even light grey, over-loaded vermillion
LOAD_SCALE = [[0, theme.OKABE_ITO["blue"]], [0.5, "#dddddd"], [1, theme.OKABE_ITO["vermillion"]]]
COUNT_SCALE = [[0, "#d8ecf7"], [1, theme.OKABE_ITO["blue"]]]


def shard_load_figure(pairs: np.ndarray, layers: list[int], tokens: np.ndarray) -> go.Figure:
    """Pairs per shard per layer, coloured relative to an even share (1 = even)."""
    L, G = pairs.shape
    even = pairs.sum(1, keepdims=True) / G
    ratio = pairs / np.maximum(even, 1e-12)
    custom = np.stack([pairs, tokens], axis=-1)
    fig = go.Figure(go.Heatmap(
        z=ratio, x=np.arange(G), y=layers, colorscale=LOAD_SCALE, zmin=0, zmax=2, customdata=custom,
        colorbar=dict(title="load / even share"),
        hovertemplate="layer %{y}, device %{x}<br>%{customdata[0]} pairs from %{customdata[1]} tokens"
                      "<br>%{z:.2f} x an even share<extra></extra>"))
    fig.update_xaxes(title=f"device (shard of {896 // G} experts)", dtick=max(1, G // 16))
    fig.update_yaxes(title="MoE layer", autorange="reversed")
    fig.update_layout(height=460, margin=dict(l=10, r=10, t=10, b=10))
    return fig


def fanout_figure(fan: np.ndarray, G: int, k: int, expected: float) -> go.Figure:
    """How many distinct devices each token's k experts sit on (every token, every layer)."""
    top = min(G, k)
    counts = np.bincount(fan.reshape(-1), minlength=top + 1)[1:top + 1]
    x = np.arange(1, top + 1)
    share = counts / max(1, counts.sum())
    fig = go.Figure(go.Bar(x=x, y=share, marker_color=theme.MOE, name="live routing",
                           customdata=counts, hovertemplate="%{x} devices: %{customdata} token-layers "
                                                            "(%{y:.1%})<extra></extra>"))
    mean = float(fan.mean())
    fig.add_vline(x=mean, line=dict(color=theme.OKABE_ITO["blue"], width=2),
                  annotation_text=f"live mean {mean:.2f}", annotation_position="top left",
                  annotation_font_color=theme.OKABE_ITO["blue"])
    fig.add_vline(x=expected, line=dict(color=theme.OKABE_ITO["vermillion"], dash="dash", width=2),
                  annotation_text=f"uniform routing {expected:.2f}", annotation_position="right",
                  annotation_font_color=theme.OKABE_ITO["vermillion"])
    fig.update_xaxes(title=f"distinct devices among a token's {k} experts", range=[0.4, top + 0.6],
                     dtick=1 if top <= 20 else None)
    fig.update_yaxes(title="share of (token, layer)", tickformat=".0%")
    fig.update_layout(height=340, margin=dict(l=10, r=10, t=30, b=10), showlegend=False)
    return fig


def traffic_figure(M: np.ndarray, unit: str) -> go.Figure:
    """All-to-all matrix: rows are source devices of the tokens, columns the experts' devices."""
    G = M.shape[0]
    text = M.astype(str) if G <= 16 else None
    fig = go.Figure(go.Heatmap(
        z=M, x=np.arange(G), y=np.arange(G), colorscale=COUNT_SCALE, zmin=0, text=text,
        texttemplate="%{text}" if text is not None else None, colorbar=dict(title=unit),
        hovertemplate="from device %{y} to device %{x}: %{z} " + unit + "<extra></extra>"))
    fig.update_xaxes(title="destination device (where the expert lives)", dtick=max(1, G // 16))
    fig.update_yaxes(title="source device (where the token is)", autorange="reversed", dtick=max(1, G // 16))
    fig.update_layout(height=420, margin=dict(l=10, r=10, t=10, b=10))
    return fig


def bytes_figure(df: pd.DataFrame) -> go.Figure:
    d = df.iloc[::-1]
    colours = [theme.K2 if "K2" in w else theme.K3 if "latent" in w else theme.ACCENT for w in d["what is sent"]]
    fig = go.Figure(go.Bar(
        x=d["KB per token (BF16)"], y=d["what is sent"], orientation="h", marker_color=colours,
        text=[f"{v:,.0f} values = {b:,.1f} KB" for v, b in zip(d["values per token"], d["KB per token (BF16)"])],
        textposition="outside", cliponaxis=False,
        hovertemplate="%{y}<br>%{x:,.1f} KB per token<extra></extra>"))
    fig.update_xaxes(title="KB one token sends to its experts (BF16), per MoE layer",
                     range=[0, float(d["KB per token (BF16)"].max()) * 1.45])
    fig.update_layout(height=330, margin=dict(l=10, r=10, t=10, b=10))
    return fig


def rank_bytes_figure(ranks: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    for col, colour in (("bytes sent: dispatch", theme.OKABE_ITO["blue"]),
                        ("bytes sent: combine", theme.OKABE_ITO["orange"])):
        fig.add_trace(go.Bar(x=ranks["rank"], y=ranks[col], name=col.replace("bytes sent: ", ""),
                             marker_color=colour, hovertemplate="rank %{x}: %{y:,} bytes<extra>" + col + "</extra>"))
    fig.update_xaxes(title="rank (process)", dtick=1)
    fig.update_yaxes(title="bytes sent to other ranks")
    fig.update_layout(barmode="stack", height=300, margin=dict(l=10, r=10, t=10, b=10),
                      legend=dict(orientation="h", y=-0.3, x=0))
    return fig
