"""Figures of the Claims page: pure functions from data frames to plotly figures."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from app import theme

LEVEL_COLOURS = {"high": theme.OKABE_ITO["green"], "mixed": theme.OKABE_ITO["orange"],
                 "self-cited": theme.OKABE_ITO["vermillion"]}
VERDICT_COLOURS = {"holds": theme.OKABE_ITO["green"], "holds with a caveat": theme.OKABE_ITO["orange"],
                   "does not hold": theme.OKABE_ITO["vermillion"], "cannot be checked here": theme.OKABE_ITO["grey"]}


def evidence_figure(df: pd.DataFrame, levels: tuple[str, ...]) -> go.Figure:
    """Each component placed at its evidence level, labelled with the claims on this page about it."""
    fig = go.Figure()
    for level in levels:
        d = df[df["confidence"] == level]
        if d.empty:
            continue
        fig.add_trace(go.Scatter(
            x=[levels.index(level)] * len(d), y=d["component"], mode="markers+text", name=level,
            marker=dict(size=26, color=LEVEL_COLOURS.get(level, theme.K3), symbol="square",
                        line=dict(width=1, color="rgba(128,128,128,0.6)")),
            text=[f"claims {c}" if c else "" for c in d["claims"]], textposition="middle right",
            customdata=d["sources"], hovertemplate="<b>%{y}</b>: " + level + "<br>%{customdata}<extra></extra>"))
    fig.update_xaxes(tickvals=list(range(len(levels))), ticktext=list(levels), range=[-0.5, len(levels) - 0.2],
                     title="strength of the evidence (docs/REFERENCES.md)", showgrid=False, zeroline=False)
    fig.update_yaxes(autorange="reversed", showgrid=False, categoryorder="array", categoryarray=list(df["component"]))
    fig.update_layout(height=320, margin=dict(l=10, r=10, t=10, b=10), showlegend=False)
    return fig


def verdict_figure(counts: pd.Series) -> go.Figure:
    """How many claims got each verdict."""
    fig = go.Figure(go.Bar(x=counts.values, y=list(counts.index), orientation="h",
                           marker_color=[VERDICT_COLOURS.get(v, theme.K3) for v in counts.index],
                           text=counts.values, textposition="outside", cliponaxis=False,
                           hovertemplate="%{y}: %{x} claims<extra></extra>"))
    fig.update_xaxes(title="claims", range=[0, max(int(counts.max()), 1) * 1.2], dtick=1)
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(height=200, margin=dict(l=10, r=10, t=10, b=10))
    return fig
