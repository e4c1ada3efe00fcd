"""Figures of the Hybrid attention & memory page: pure functions from arrays / frames to figures."""
from __future__ import annotations

import html
import textwrap

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app import theme
from app.text import fmt_bytes, fmt_tokens, token_text

DESIGN_COLOUR = {"K3 hybrid": theme.K3, "all MLA": theme.MLA, "all MHA": theme.OKABE_ITO["purple"]}
PLANE_COLOUR = {"KDA state": theme.KDA, "MLA latent": theme.MLA, "Block AttnRes": theme.OKABE_ITO["purple"],
                "Latent dispatch": theme.MOE}
DIVERGING = "RdBu_r"          # blue-white-red: readable with the common colour-vision deficiencies


def stack_figure(sched: pd.DataFrame) -> go.Figure:
    """The 93 layers as a grid: one column per repeating unit (KDA, KDA, KDA, MLA), the final MLA alone."""
    fig = go.Figure()
    names = {"KDA": "Kimi Delta Attention: fixed-size state", "MLA": "gated MLA: cache grows per token"}
    for kind, colour in (("KDA", theme.KDA), ("MLA", theme.MLA)):
        part = sched[sched["kind"] == kind]
        fig.add_trace(go.Scatter(
            x=part["unit"], y=part["slot"], mode="markers", name=f"{names[kind]} ({len(part)} layers)",
            marker=dict(symbol="square", size=16, color=colour, line=dict(width=0)),
            hovertext=part["hover"], hoverinfo="text"))
    n_units = int(sched["unit"].max()) + 1
    fig.add_annotation(x=n_units - 1, y=-0.9, text="final MLA", showarrow=False, font=dict(size=11))
    fig.add_annotation(x=(n_units - 2) / 2, y=-0.9, showarrow=False, font=dict(size=11),
                       text=f"{n_units - 1} repeating units of 3 KDA + 1 MLA")
    fig.update_yaxes(tickvals=[0, 1, 2, 3], ticktext=["1st", "2nd", "3rd", "4th"], autorange="reversed",
                     title="layer in unit", range=[3.6, -1.3], showgrid=False, zeroline=False, fixedrange=True)
    fig.update_xaxes(title="repeating unit (layers 4u .. 4u+3)", range=[-0.7, n_units - 0.3], dtick=1,
                     showgrid=False, zeroline=False, fixedrange=True)
    fig.update_layout(height=280, margin=dict(l=10, r=10, t=10, b=10), hovermode="closest",
                      legend=dict(orientation="h", y=-0.3, x=0))
    return fig


def state_figure(state: np.ndarray, zmax: float, title: str) -> go.Figure:
    """One head's d_k x d_v recurrent state: the same size after every token."""
    dk, dv = state.shape
    fig = go.Figure(go.Heatmap(
        z=state, zmin=-zmax, zmax=zmax, zmid=0, colorscale=DIVERGING, name="KDA state",
        colorbar=dict(title="value", thickness=12),
        hovertemplate="key channel %{y}<br>value channel %{x}<br>S = %{z:.4f}<extra></extra>"))
    fig.update_xaxes(title=f"value channel (d_v = {dv})", showgrid=False, constrain="domain")
    fig.update_yaxes(title=f"key channel (d_k = {dk})", autorange="reversed", showgrid=False,
                     scaleanchor="x", constrain="domain")
    fig.update_layout(title=dict(text=title, font=dict(size=14)), height=380,
                      margin=dict(l=10, r=10, t=40, b=10))
    return fig


def cache_figure(rows: np.ndarray, upto: int, kv_lora: int, pieces: list[str], title: str) -> go.Figure:
    """The MLA layer's cache, one row per token; rows after token `upto` are not written yet."""
    T, width = rows.shape
    z = rows.astype(float).copy()
    z[upto:] = np.nan
    zmax = float(np.abs(rows).max()) or 1.0
    fig = go.Figure(go.Heatmap(
        z=z, zmin=-zmax, zmax=zmax, zmid=0, colorscale=DIVERGING, name="MLA latent cache",
        customdata=np.array([html.escape(token_text(p)) for p in pieces], dtype=object)[:, None].repeat(width, 1),
        colorbar=dict(title="value", thickness=12),
        hovertemplate="token %{y} %{customdata}<br>cache column %{x}<br>%{z:.4f}<extra></extra>"))
    fig.add_vline(x=kv_lora - 0.5, line=dict(width=1, dash="dot", color=theme.OKABE_ITO["grey"]))
    fig.add_annotation(x=(kv_lora - 1) / 2, y=-1, yanchor="bottom", showarrow=False, text="latent c",
                       font=dict(size=11))
    fig.add_annotation(x=kv_lora + (width - kv_lora - 1) / 2, y=-1, yanchor="bottom", showarrow=False,
                       text="k_rope", font=dict(size=11))
    fig.update_xaxes(title=f"cached value ({kv_lora} latent + {width - kv_lora} rope-slice)", showgrid=False)
    fig.update_yaxes(title="token (one row each)", autorange="reversed", range=[T - 0.5, -2.5], showgrid=False)
    fig.update_layout(title=dict(text=title, font=dict(size=14)), height=380, margin=dict(l=10, r=10, t=40, b=10))
    return fig


def memory_figure(curves: pd.DataFrame, cross: pd.DataFrame, context: int, batch: int) -> go.Figure:
    """Cache bytes vs context (log-log), one line per stack design, crossovers and the chosen context."""
    fig = go.Figure()
    labels = {"K3 hybrid": "K3 hybrid: 69 KDA states + 24 MLA latent caches",
              "all MLA": "all MLA: 93 latent caches", "all MHA": "all MHA: 93 layers, 96 heads x 128"}
    for name, part in curves.groupby("design", sort=False):
        fig.add_trace(go.Scatter(
            x=part["tokens"], y=part["bytes"], mode="lines", name=labels.get(name, name),
            line=dict(color=DESIGN_COLOUR.get(name), width=3 if name == "K3 hybrid" else 2),
            customdata=[fmt_bytes(b) for b in part["bytes"]],
            hovertemplate=f"{name}<br>%{{x:,}} tokens<br>%{{customdata}}<extra></extra>"))
    if len(cross):
        fig.add_trace(go.Scatter(
            x=cross["tokens"], y=cross["bytes"], mode="markers+text", name="crossover",
            marker=dict(symbol="diamond", size=12, color=theme.MOE, line=dict(width=1, color="rgba(0,0,0,0.4)")),
            text=[f"hybrid = {v} at {t:,.0f} tokens" for v, t in zip(cross["versus"], cross["tokens"])],
            textposition="bottom right",
            hovertemplate="the hybrid matches %{text}<extra></extra>"))
    at = curves.assign(dist=(np.log(curves["tokens"]) - np.log(context)).abs())
    at = at[at["dist"] == at["dist"].min()]
    fig.add_vline(x=context, line=dict(width=1, dash="dash", color=theme.OKABE_ITO["grey"]))
    fig.add_trace(go.Scatter(
        x=at["tokens"], y=at["bytes"], mode="markers", name=f"at {fmt_tokens(context)} tokens",
        marker=dict(size=10, color=[DESIGN_COLOUR.get(d) for d in at["design"]],
                    line=dict(width=1, color="rgba(0,0,0,0.4)")),
        customdata=np.stack([at["design"], [fmt_bytes(b) for b in at["bytes"]]], axis=1),
        hovertemplate="%{customdata[0]} at %{x:,} tokens: %{customdata[1]}<extra></extra>"))
    lo, hi = curves["bytes"][curves["bytes"] > 0].min(), curves["bytes"].max()
    ticks = [10.0 ** k for k in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)]
    fig.update_yaxes(type="log", title=f"cache (bytes at bf16, batch {batch})", tickvals=ticks,
                     ticktext=[fmt_bytes(t) for t in ticks])
    xt = [2 ** k for k in range(0, 21, 2)]
    fig.update_xaxes(type="log", title="context length (tokens, log)", tickvals=xt,
                     ticktext=[fmt_tokens(t) for t in xt], range=[0, np.log10(2 ** 20) + 0.05])
    fig.update_layout(height=460, margin=dict(l=10, r=10, t=10, b=10), legend=dict(orientation="h", y=-0.2, x=0))
    return fig


def planes_figure(planes: pd.DataFrame) -> go.Figure:
    """Each compression plane as the share it cuts, with the before -> after values on the bar."""
    d = planes.iloc[::-1]                     # first row on top
    labels = ["<br>".join(textwrap.wrap(f"<b>{p}</b>: {c}", 48)) for p, c in zip(d["plane"], d["comparison"])]
    text = [f"{b:,.0f} → {a:,.0f} {u}: −{c:.1%}" if c > 0 else f"{b:,.0f} → {a:,.0f} {u}: no cut"
            for b, a, u, c in zip(d["before"], d["after"], d["unit"], d["cut"])]
    fig = go.Figure(go.Bar(
        x=d["cut"] * 100, y=labels, orientation="h", text=text, textposition="outside", cliponaxis=False,
        marker_color=[PLANE_COLOUR.get(p, theme.K3) for p in d["plane"]], name="cut",
        hovertemplate="%{y}<br>%{text}<extra></extra>"))
    fig.update_xaxes(title="share cut (1 − after / before), computed", range=[0, 175],
                     tickvals=[0, 25, 50, 75, 100], ticktext=["0%", "25%", "50%", "75%", "100%"])
    fig.update_layout(height=110 + 62 * len(d), margin=dict(l=10, r=10, t=10, b=10), bargap=0.35)
    return fig
