"""Figures of the Attention Residuals page: pure functions from frames / arrays to figures."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app import theme

FULL = theme.OKABE_ITO["vermillion"]
BLOCK = theme.OKABE_ITO["blue"]
GREY = theme.OKABE_ITO["grey"]


def links_figure(series: pd.DataFrame, mark: int, block_size: int, paper_limit: int = 100) -> go.Figure:
    """Links per token vs depth, Full and Block, log-log, with K3's depth marked."""
    fig = go.Figure()
    fig.add_vrect(x0=1, x1=paper_limit, fillcolor=GREY, opacity=0.10, line_width=0, layer="below")
    fig.add_annotation(x=np.log10(paper_limit), y=1, yref="paper", xanchor="right", yanchor="top",
                       showarrow=False, font=dict(size=11),
                       text=f"L < {paper_limit}: Full's arithmetic 'affordable'<br>(K3 report, section 2.2)")
    for name, colour in (("Full", FULL), ("Block", BLOCK)):
        label = "Full AttnRes" if name == "Full" else f"Block AttnRes (blocks of {block_size})"
        fig.add_trace(go.Scatter(x=series["layers"], y=series[name], mode="lines", name=label,
                                 line=dict(color=colour, width=2.5),
                                 hovertemplate=f"{label}<br>L = %{{x}}: %{{y:,}} links<extra></extra>"))
    at = series[series["layers"] == mark]
    fig.add_vline(x=mark, line=dict(width=1, dash="dash", color=GREY))
    fig.add_trace(go.Scatter(
        x=[mark, mark], y=[int(at["Full"].iloc[0]), int(at["Block"].iloc[0])], mode="markers+text",
        name=f"K3: L = {mark}", marker=dict(size=11, color=[FULL, BLOCK], line=dict(width=1, color="rgba(0,0,0,0.4)")),
        text=[f"{int(at['Full'].iloc[0]):,}", f"{int(at['Block'].iloc[0]):,}"], textposition="middle left",
        hovertemplate="L = %{x}: %{y:,} links<extra></extra>"))
    fig.update_xaxes(type="log", title="depth L (layers, log)", range=[0, np.log10(series["layers"].max())],
                     tickvals=[1, 2, 5, 10, 20, 50, 93, 200])
    top = int(np.ceil(np.log10(series[["Full", "Block"]].to_numpy().max())))
    ticks = [10 ** k for k in range(top + 1)]
    fig.update_yaxes(type="log", title="links per token (candidates summed over every read, log)",
                     tickvals=ticks, ticktext=[f"{t:,}" for t in ticks])
    fig.update_layout(height=440, margin=dict(l=10, r=10, t=10, b=10), legend=dict(orientation="h", y=-0.2, x=0))
    return fig


def depth_heatmap(z: np.ndarray, rows: list[str], cols: list[str], row_bounds: list[int],
                  col_bounds: list[int], title: str) -> go.Figure:
    """Every read of one token (rows) x its sources (columns); blank where a read had no such source."""
    # Scale to the reads that choose between sources: a read with one candidate has weight 1 and would
    # otherwise push every other weight into the bottom of the colour scale.
    multi = z[np.isfinite(z).sum(1) > 1]
    zmax = float(np.nanmax(multi)) if multi.size and np.isfinite(multi).any() else 1.0
    fig = go.Figure(go.Heatmap(
        z=z, x=cols, y=rows, colorscale="Viridis", zmin=0, zmax=zmax, name="depth weights",
        colorbar=dict(title="weight", thickness=12),
        hovertemplate="%{y} reads %{x}<br>weight %{z:.3f}<extra></extra>"))
    # shapes in one go: add_hline / add_vline cost several ms each
    line = dict(width=1, color=GREY, dash="dot")
    fig.update_layout(shapes=[dict(type="line", xref="paper", x0=0, x1=1, y0=b - 0.5, y1=b - 0.5, line=line)
                              for b in row_bounds]
                      + [dict(type="line", yref="paper", y0=0, y1=1, x0=b - 0.5, x1=b - 0.5, line=line)
                         for b in col_bounds])
    fig.update_yaxes(type="category", tickvals=[rows[i] for i in _ticks(rows)], autorange="reversed",
                     title="read (the module it feeds)", showgrid=False)
    fig.update_xaxes(type="category", tickvals=[cols[i] for i in _ticks(cols)], title="source",
                     showgrid=False, tickangle=-45 if len(cols) > 12 else 0)
    fig.update_layout(title=dict(text=title, font=dict(size=14)), height=620, margin=dict(l=10, r=10, t=40, b=10))
    return fig


def _ticks(labels: list[str], most: int = 26) -> list[int]:
    """Every label when there are few; otherwise the attention read/source of every 4th (8th, ...) layer,
    so the ticks fall on layer numbers a reader can count with."""
    if len(labels) <= most:
        return list(range(len(labels)))
    n_layers = sum(label.endswith(".attn") for label in labels)
    step = 4
    while n_layers / step > most - 2:
        step *= 2
    keep = {f"L{i}.attn" for i in range(0, n_layers, step)}
    return [i for i, label in enumerate(labels) if label in keep]


def retrieval_figure(profiles: dict[str, pd.DataFrame], source: int, reader: int) -> go.Figure:
    """Weight that each earlier layer's output gets in one read, Full vs Block, the asked-for layer marked."""
    fig = go.Figure()
    colours = {"Full": FULL, "Block": BLOCK}
    for name, df in profiles.items():
        d = df[df["layer"] >= 0]
        fig.add_trace(go.Scatter(
            x=d["layer"], y=d["weight"], mode="lines+markers", name=f"{name} AttnRes",
            line=dict(color=colours.get(name, GREY), width=2), marker=dict(size=5),
            customdata=np.stack([d["source"], d["source weight"], d["share"]], axis=1),
            hovertemplate=("layer %{x}: weight %{y:.4f}<br>held in %{customdata[0]} (weight "
                           "%{customdata[1]:.3f}) x share %{customdata[2]:.3f}<extra></extra>")))
        hit = d[d["layer"] == source]
        if len(hit):
            fig.add_trace(go.Scatter(
                x=hit["layer"], y=hit["weight"], mode="markers", showlegend=False, hoverinfo="skip",
                marker=dict(size=15, symbol="circle-open", color=colours.get(name, GREY), line=dict(width=2.5))))
    fig.add_vline(x=source, line=dict(width=1, dash="dash", color=GREY))
    fig.add_annotation(x=source, y=1, yref="paper", yanchor="bottom", showarrow=False, text=f"layer {source}",
                       font=dict(size=11))
    fig.update_xaxes(title=f"earlier layer whose output is read (0 .. {reader - 1})", range=[-1, reader])
    w = pd.concat([df.loc[df["layer"] >= 0, "weight"] for df in profiles.values()])
    w = w[w > 0]
    fig.update_yaxes(type="log", title=f"weight in layer {reader}'s read (log)",
                     tickvals=_one_two_five(float(w.min()), float(w.max())) if len(w) else None)
    fig.update_layout(height=380, margin=dict(l=10, r=10, t=25, b=10), legend=dict(orientation="h", y=-0.25, x=0))
    return fig


def _one_two_five(lo: float, hi: float) -> list[float]:
    out = []
    for k in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1):
        out += [m * 10.0 ** k for m in (1, 2, 5)]
    return [v for v in out if lo / 2 <= v <= hi * 2]


def vectors_figure(df: pd.DataFrame, full_vectors: int, block_size: int, d: int) -> go.Figure:
    """[d]-vectors kept alive per token vs block size, Full as a flat line."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=df["block size"], y=[full_vectors] * len(df), mode="lines", name="Full AttnRes",
                             line=dict(color=FULL, width=2.5),
                             hovertemplate=f"Full: {full_vectors} vectors<extra></extra>"))
    fig.add_trace(go.Scatter(x=df["block size"], y=df["vectors"], mode="lines", name="Block AttnRes",
                             line=dict(color=BLOCK, width=2.5, shape="hv"), customdata=df["blocks"],
                             hovertemplate="block size %{x}: %{customdata} blocks, %{y} vectors<extra></extra>"))
    at = df[df["block size"] == block_size]
    fig.add_trace(go.Scatter(x=at["block size"], y=at["vectors"], mode="markers+text", name="chosen block size",
                             marker=dict(size=12, color=theme.ACCENT, line=dict(width=1, color="rgba(0,0,0,0.4)")),
                             text=[f"{int(v)} vectors = {int(v) * d:,} values" for v in at["vectors"]],
                             textposition="top right", hoverinfo="skip"))
    fig.update_xaxes(title="block size (layers per block)")
    fig.update_yaxes(type="log", title="vectors kept per token (log)",
                     range=[np.log10(1.5), np.log10(full_vectors * 1.6)], tickvals=[2, 5, 10, 20, 50, 100, 200])
    fig.update_layout(height=360, margin=dict(l=10, r=10, t=10, b=10), legend=dict(orientation="h", y=-0.25, x=0))
    return fig
