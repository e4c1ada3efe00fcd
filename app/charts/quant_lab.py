"""Figures of the Quantization lab: pure functions from data frames to plotly figures."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app import theme

MATRIX_COLOURS = {"w_gate": theme.OKABE_ITO["blue"], "w_up": theme.OKABE_ITO["orange"],
                  "w_down": theme.OKABE_ITO["green"]}
SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def superscript(n: int) -> str:
    return str(n).translate(SUPERSCRIPT)


KIND_COLOURS = {"zero": theme.OKABE_ITO["grey"], "subnormal": theme.OKABE_ITO["purple"],
                "normal": theme.OKABE_ITO["blue"]}


def grids_figure(e2m1: pd.DataFrame, e4m3: pd.DataFrame) -> go.Figure:
    """Top: the 15 E2M1 values on a linear axis (both signs). Bottom: the positive E4M3 values on a
    log axis, so each power of two holds the same 8 values."""
    fig = make_subplots(rows=2, cols=1, vertical_spacing=0.32,
                        subplot_titles=("E2M1 (MXFP4 elements): every value, linear axis",
                                        "E4M3 (MXFP8 elements): every positive value, log axis"))
    pos = e2m1[e2m1["value"] > 0]
    signed = pd.concat([pos.assign(value=-pos["value"], bits="1" + pos["bits"].str[1:]), e2m1]).sort_values("value")
    for kind in ("zero", "subnormal", "normal"):
        d = signed[signed["kind"] == kind]
        fig.add_trace(go.Scatter(
            x=d["value"], y=np.zeros(len(d)), mode="markers+text", text=[f"{v:g}" for v in d["value"]],
            textposition="top center", name=kind, legendgroup=kind,
            marker=dict(size=13, color=KIND_COLOURS[kind], symbol="line-ns-open", line=dict(width=3)),
            customdata=d["bits"], hovertemplate="%{x:g}<br>bits s ee m: %{customdata}<extra></extra>"), row=1, col=1)
    for kind in ("subnormal", "normal"):
        d = e4m3[e4m3["kind"] == kind]
        fig.add_trace(go.Scatter(
            x=d["value"], y=np.zeros(len(d)), mode="markers", name=kind, legendgroup=kind, showlegend=False,
            marker=dict(size=13, color=KIND_COLOURS[kind], symbol="line-ns-open", line=dict(width=2)),
            customdata=np.stack([d["bits"], d["relative gap"].fillna(0) * 100], axis=1),
            hovertemplate="%{x:.6g}<br>bits s eeee mmm: %{customdata[0]}<br>next value %{customdata[1]:.1f}% "
                          "higher<extra></extra>"), row=2, col=1)
    fig.update_xaxes(range=[-6.8, 6.8], dtick=1, title_text="value", row=1, col=1)
    ticks = [2.0 ** k for k in range(-9, 9, 3)] + [448.0]
    fig.update_xaxes(type="log", title_text="value (log scale)", row=2, col=1, range=[np.log10(2.0 ** -9.5), np.log10(600)],
                     tickvals=ticks, ticktext=[f"2{superscript(int(np.log2(t)))}" for t in ticks[:-1]] + ["448"])
    fig.update_yaxes(visible=False, range=[-1, 1], fixedrange=True)
    fig.update_layout(height=380, margin=dict(l=10, r=10, t=40, b=10), legend=dict(orientation="h", y=1.18, x=0),
                      hovermode="closest")
    return fig


def block_figure(table: pd.DataFrame, X: float, grid: np.ndarray | None = None) -> go.Figure:
    """The block's 32 values before (V) and after (X·P) quantisation, the grid levels X·P as faint lines."""
    fig = go.Figure()
    if grid is not None:
        for level in sorted(set(np.concatenate([-grid, grid]) * X)):
            fig.add_hline(y=level, line=dict(width=1, dash="dot", color=theme.OKABE_ITO["grey"]), opacity=0.5)
    for i, row in table.iterrows():
        fig.add_trace(go.Scatter(x=[row["element"]] * 2, y=[row["value V"], row["X · P"]], mode="lines",
                                 line=dict(width=1, color=theme.OKABE_ITO["grey"]), showlegend=False,
                                 hoverinfo="skip"))
    fig.add_trace(go.Scatter(x=table["element"], y=table["value V"], mode="markers", name="before: V",
                             marker=dict(size=9, color=theme.OKABE_ITO["sky"], symbol="circle"),
                             hovertemplate="element %{x}<br>V = %{y:.6g}<extra></extra>"))
    fig.add_trace(go.Scatter(x=table["element"], y=table["X · P"], mode="markers", name="after: X · P",
                             marker=dict(size=10, color=theme.OKABE_ITO["vermillion"], symbol="diamond-open",
                                         line=dict(width=2)),
                             hovertemplate="element %{x}<br>X·P = %{y:.6g}<extra></extra>"))
    fig.update_xaxes(title="element of the block", dtick=4 if len(table) > 16 else 1)
    fig.update_yaxes(title="value", zeroline=True)
    fig.update_layout(height=340, margin=dict(l=10, r=10, t=10, b=10), legend=dict(orientation="h", y=1.1, x=0))
    return fig


def scales_figure(df: pd.DataFrame) -> go.Figure:
    """Histogram of the E8M0 scale exponents E (X = 2^E) of every block, one bar group per matrix."""
    fig = go.Figure()
    for m, d in df.groupby("matrix", sort=False):
        fig.add_trace(go.Bar(x=d["exponent"], y=d["blocks"], name=m, marker_color=MATRIX_COLOURS.get(m, theme.K3),
                             hovertemplate=f"{m}<br>E = %{{x}} (X = 2^%{{x}})<br>%{{y}} blocks<extra></extra>"))
    fig.update_xaxes(title="scale exponent E (block scale X = 2^E)", dtick=1)
    fig.update_yaxes(title="blocks of 32")
    fig.update_layout(barmode="group", height=320, margin=dict(l=10, r=10, t=10, b=10),
                      legend=dict(orientation="h", y=1.12, x=0))
    return fig


def errors_figure(df: pd.DataFrame, columns: list[str]) -> go.Figure:
    """Relative RMS error per weight matrix for each format; routed-expert rows are already MXFP4."""
    colours = [theme.OKABE_ITO["blue"], theme.OKABE_ITO["orange"], theme.OKABE_ITO["green"]]
    labels = [f"{t} ({s})" for t, s in zip(df["tensor"], df["stored as"])]
    fig = go.Figure()
    for c, colour in zip(columns, colours):
        fig.add_trace(go.Bar(y=labels, x=df[c] * 100, name=c, orientation="h", marker_color=colour,
                             text=["0 (exact)" if v == 0 else f"{v * 100:.2f}%" for v in df[c]],
                             textposition="outside", cliponaxis=False,
                             hovertemplate="%{y}<br>" + c + ": %{x:.3f}%<extra></extra>"))
    top = float(np.nanmax(df[columns].to_numpy())) * 100 if len(df) else 1.0
    fig.update_xaxes(title="relative RMS error ‖Q(W) − W‖ / ‖W‖ (%)", range=[0, max(top, 1e-3) * 1.3])
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(barmode="group", height=120 + 62 * len(df), margin=dict(l=10, r=10, t=10, b=10),
                      legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0))
    return fig


def behaviour_figure(per_layer: dict[str, pd.DataFrame], top_k: int) -> go.Figure:
    """Share of the top-k choices that change, per MoE layer, one line per text."""
    fig = go.Figure()
    colours = [theme.OKABE_ITO["blue"], theme.OKABE_ITO["orange"]]
    for (name, d), colour in zip(per_layer.items(), colours):
        fig.add_trace(go.Scatter(x=d["layer"], y=d["changed"] * 100, mode="lines+markers", name=name,
                                 marker=dict(size=5, color=colour), line=dict(color=colour),
                                 hovertemplate=f"{name}<br>layer %{{x}}: %{{y:.1f}}% of the top-{top_k} "
                                               "choices changed<extra></extra>"))
    fig.update_xaxes(title="MoE layer")
    fig.update_yaxes(title=f"top-{top_k} choices changed (%)", rangemode="tozero")
    fig.update_layout(height=330, margin=dict(l=10, r=10, t=10, b=10), legend=dict(orientation="h", y=1.12, x=0))
    return fig


def k3_bytes_figure(df: pd.DataFrame) -> go.Figure:
    """Weight memory at K3 scale: everything in bf16 vs K3's precisions, routed experts apart."""
    routed = df[df["component"] == "routed experts"]
    rest = df[df["component"] != "routed experts"]
    bars = ["all in bf16", "K3: routed experts MXFP4, rest bf16"]
    r = [routed["bytes, all bf16"].sum(), routed["bytes, K3"].sum()]
    o = [rest["bytes, all bf16"].sum(), rest["bytes, K3"].sum()]
    fig = go.Figure()
    fig.add_trace(go.Bar(y=bars, x=np.array(r) / 1e12, name="routed experts", orientation="h",
                         marker_color=theme.ACCENT, text=[f"{v / 1e12:,.2f} TB" for v in r], textposition="inside",
                         hovertemplate="routed experts: %{x:,.3f} TB<extra></extra>"))
    fig.add_trace(go.Bar(y=bars, x=np.array(o) / 1e12, name="everything else (bf16)", orientation="h",
                         marker_color=theme.K3, text=[f"{v / 1e9:,.0f} GB" for v in o], textposition="outside",
                         cliponaxis=False, hovertemplate="everything else: %{x:,.3f} TB<extra></extra>"))
    fig.update_xaxes(title="weight memory (TB, 10^12 bytes)", range=[0, max(r[0] + o[0], 1) / 1e12 * 1.12])
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(barmode="stack", height=230, margin=dict(l=10, r=10, t=10, b=10),
                      legend=dict(orientation="h", y=1.2, x=0))
    return fig
