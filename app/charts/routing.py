"""Figures of the Routing explorer: pure functions from the data of app/routing.py to plotly figures."""
from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app import theme
from app.routing import GRID_COLS, N_SHARDS, shard_labels

OI = theme.OKABE_ITO
CHOSEN = OI["vermillion"]          # the token's chosen experts: outline and glow
KNOCKED = OI["purple"]             # an X over experts that may not be chosen
SELECTED = OI["sky"]               # ring around the expert shown in the expert panel
LOAD_COLOURS = {"idle": "rgba(153,153,153,0.35)", "low": OI["blue"], "mid": OI["green"], "high": OI["yellow"]}
PROB_SCALE = "Cividis"             # perceptually uniform, readable with colour-vision deficiencies
CELL = 14                          # px between cell centres
MARKER = 11                        # px side of a cell's square


def grid_figure(grid: pd.DataFrame, colour_by: str = "probability", selected: int | None = None,
                layer: int | None = None, token_label: str = "") -> go.Figure:
    """The routed experts as squares, one band of 4 rows per shard; the token's chosen experts
    outlined and glowing; the 2 shared experts beside the grid. The trace named "routed experts"
    holds one marker per expert, in expert order, with the expert id as customdata[0]; the
    overlays skip hover, so a click always lands on it. Built as one dict and validated once
    (plotly's add_trace/add_shape calls cost ~0.1 s for this figure; the whole dict ~2 ms)."""
    E = len(grid)
    rows = -(-E // GRID_COLS)
    chosen = grid[grid["chosen"]]
    hover = [_status_line(s, w, sl) for s, w, sl in zip(grid["status"], grid["weight"], grid["slot"])]
    custom = np.stack([grid["expert"], grid["shard"], grid["prob"], grid["bias"], grid["biased"],
                       grid["rank"], grid["load"]], axis=1)
    if colour_by == "load":
        marker_colour = dict(color=[LOAD_COLOURS[c] for c in grid["load_class"]])
    else:
        marker_colour = dict(color=grid["prob"].to_numpy(), colorscale=PROB_SCALE, cmin=0, cmax=1,
                             colorbar=dict(title=dict(text="router<br>probability", side="top"), len=0.45, x=1.0,
                                           xanchor="left", y=0.5, yanchor="middle", thickness=10,
                                           tickformat=".1f"))
    data = [
        # glow: a larger translucent square behind each chosen cell, showing in the gaps around it
        dict(type="scatter", x=chosen["col"].to_numpy(), y=chosen["row"].to_numpy(), mode="markers", name="glow",
             showlegend=False, hoverinfo="skip",
             marker=dict(symbol="square", size=MARKER + 10, color=CHOSEN, opacity=0.55, line=dict(width=0))),
        dict(type="scatter", x=grid["col"].to_numpy(), y=grid["row"].to_numpy(), mode="markers",
             name="routed experts", showlegend=False, customdata=custom, text=hover,
             marker=dict(symbol="square", size=MARKER, line=dict(width=np.where(grid["chosen"], 2.0, 0.0),
                                                                 color=CHOSEN), **marker_colour),
             selected=dict(marker=dict(opacity=1)), unselected=dict(marker=dict(opacity=1)),
             hovertemplate=("<b>expert %{customdata[0]}</b> · shard %{customdata[1]}<br>"
                            "router probability %{customdata[2]:.4f}<br>balancing bias %{customdata[3]:+.4f}<br>"
                            "biased score %{customdata[4]:.4f} (rank %{customdata[5]} of " + str(E) + ")<br>"
                            "%{text}<br>tokens of the prompt that chose it: %{customdata[6]}<extra></extra>")),
        # the outline again, on top, so neighbouring squares never cover it
        dict(type="scatter", x=chosen["col"].to_numpy(), y=chosen["row"].to_numpy(), mode="markers",
             name=f"chosen for this token ({len(chosen)})", hoverinfo="skip",
             marker=dict(symbol="square-open", size=MARKER + 2, color=CHOSEN, line=dict(width=2.5))),
    ]
    ko = grid[grid["status"] == "knocked out"]
    if len(ko):
        data.append(dict(type="scatter", x=ko["col"].to_numpy(), y=ko["row"].to_numpy(), mode="markers",
                         name="knocked out", hoverinfo="skip",
                         marker=dict(symbol="x-thin-open", size=MARKER - 1, color=KNOCKED,
                                     line=dict(width=3, color=KNOCKED))))
    if selected is not None and 0 <= selected < E:
        r = grid.iloc[selected]
        data.append(dict(type="scatter", x=[int(r["col"])], y=[int(r["row"])], mode="markers",
                         name=f"expert {selected}: in the panel below", hoverinfo="skip",
                         marker=dict(symbol="square-open", size=MARKER + 12, color=SELECTED, line=dict(width=3))))
    # the shared experts, beside the grid: every token uses both, so they are always on
    sx, sy = GRID_COLS + 1.4, rows / 2
    data.append(dict(type="scatter", x=[sx, sx], y=[sy - 1.1, sy + 1.1], mode="markers",
                     name="2 shared experts: always on", customdata=[[-1], [-2]],
                     text=["shared expert 1", "shared expert 2"],
                     marker=dict(symbol="square", size=2 * MARKER, color=theme.MOE, line=dict(width=2.5, color=CHOSEN)),
                     hovertemplate="<b>%{text}</b><br>every token uses it, with weight 1:<br>not routed, never "
                                   "knocked out<extra></extra>"))
    annotations = [dict(x=sx, y=sy - 2.6, text="shared", showarrow=False, font=dict(size=11))]
    shapes = []
    # shard bands: light shading on alternate bands, a label on the left of each
    rows_per_shard = rows / N_SHARDS
    for s, label in enumerate(shard_labels(E)):
        y0, y1 = s * rows_per_shard - 0.5, (s + 1) * rows_per_shard - 0.5
        if s % 2 == 0:
            shapes.append(dict(type="rect", x0=-0.6, x1=GRID_COLS - 0.4, y0=y0, y1=y1, layer="below",
                               line=dict(width=0), fillcolor="rgba(128,128,128,0.16)"))
        name, experts = label.split(": ")
        annotations.append(dict(x=-0.8, y=(y0 + y1) / 2, text=f"{name}<br><span style='font-size:9px'>{experts}</span>",
                                showarrow=False, xanchor="right", font=dict(size=10)))
    if colour_by == "load":
        present = grid.groupby("load_class")["load"].agg(["min", "max"])
        for cls in ("idle", "low", "mid", "high"):
            if cls in present.index:
                lo, hi = (int(v) for v in present.loc[cls])
                span = f"{lo}" if lo == hi else f"{lo}–{hi}"
                data.append(dict(type="scatter", x=[None], y=[None], mode="markers",
                                 name=f"{cls}: {span} token{'' if hi == 1 else 's'}",
                                 marker=dict(symbol="square", size=12, color=LOAD_COLOURS[cls])))
    x0, x1, y0, y1 = -7.4, GRID_COLS + 2.6, rows - 0.35, -0.75
    top, bottom, right = 36, 84, 74
    title = f"Layer {layer}: the experts of {token_label}" if layer is not None else ""
    layout = dict(
        xaxis=dict(range=[x0, x1], visible=False, fixedrange=True),
        yaxis=dict(range=[y0, y1], visible=False, fixedrange=True, scaleanchor="x", scaleratio=1),
        width=int((x1 - x0) * CELL) + 10 + right, height=int((y0 - y1) * CELL) + top + bottom,
        margin=dict(l=10, r=right, t=top, b=bottom), hovermode="closest", dragmode=False,
        clickmode="event+select", title=dict(text=title, x=0.02, y=0.985, yanchor="top", font=dict(size=14)),
        legend=dict(orientation="h", y=-0.01, x=0.0, yanchor="top", font=dict(size=11)),
        shapes=shapes, annotations=annotations, meta={"chart": "routing_grid"})
    return go.Figure(dict(data=data, layout=layout))


def _status_line(status: str, weight: float, slot: int) -> str:
    if status in ("chosen", "forced"):
        return f"<b>{status}</b> (slot {slot + 1}), output weight {weight:.4f}"
    return status


def changed_figure(df: pd.DataFrame, k_before: int) -> go.Figure:
    """Per later layer: how many of the token's original experts were dropped, how many are new."""
    x = df["layer"].to_numpy()
    data = [dict(type="bar", x=x, y=df["dropped"].to_numpy(), name=f"of its {k_before} original experts, no longer chosen",
                 marker=dict(color=CHOSEN), hovertemplate="layer %{x}: %{y} dropped<extra></extra>"),
            dict(type="bar", x=x, y=df["added"].to_numpy(), name="newly chosen experts",
                 marker=dict(color=OI["blue"]), hovertemplate="layer %{x}: %{y} new<extra></extra>")]
    layout = dict(xaxis=dict(title=dict(text="layer"), range=[x.min() - 0.7, x.max() + 0.7] if len(df) else None),
                  yaxis=dict(title=dict(text="experts"), rangemode="tozero"),
                  height=300, barmode="group", bargap=0.15, margin=dict(l=10, r=10, t=10, b=10),
                  legend=dict(orientation="h", y=-0.3, x=0), meta={"chart": "routing_changed"})
    return go.Figure(dict(data=data, layout=layout))


def predictions_figure(before: pd.DataFrame, after: pd.DataFrame, labels_before: list[str],
                       labels_after: list[str], changed: bool) -> go.Figure:
    """Top-5 next tokens before and after the re-routing, side by side on one probability scale."""
    titles = ("model's own routing", "your re-routing" if changed else "your re-routing (no change yet)")
    top = float(max(before["prob"].max(), after["prob"].max()))
    fmt = ".1%" if top < 0.05 else ".0%"
    gap = 0.22
    width = (1 - gap) / 2
    domains = ([0, width], [1 - width, 1])
    data, layout = [], dict(height=260, margin=dict(l=10, r=10, t=30, b=10), meta={"chart": "routing_predictions"},
                            annotations=[])
    for i, (df, labels, colour) in enumerate(((before, labels_before, theme.K2), (after, labels_after, theme.ACCENT))):
        n = "" if i == 0 else "2"
        data.append(dict(type="bar", x=df["prob"].to_numpy(), y=df["rank"].to_numpy(), orientation="h",
                         marker=dict(color=colour), showlegend=False, text=[f"{p:.1%}" for p in df["prob"]],
                         textposition="outside", cliponaxis=False, customdata=labels, xaxis=f"x{n}", yaxis=f"y{n}",
                         hovertemplate="%{customdata}: %{x:.2%}<extra></extra>"))
        layout[f"xaxis{n}"] = dict(domain=domains[i], anchor=f"y{n}", range=[0, top * 1.35], tickformat=fmt, nticks=4)
        layout[f"yaxis{n}"] = dict(anchor=f"x{n}", tickvals=list(df["rank"]), ticktext=labels, autorange="reversed")
        layout["annotations"].append(dict(text=titles[i], x=sum(domains[i]) / 2, y=1.0, xref="paper", yref="paper",
                                          xanchor="center", yanchor="bottom", showarrow=False, font=dict(size=12)))
    return go.Figure(dict(data=data, layout=layout))


def fingerprint_figure(layers: list[int], probs: np.ndarray, mask: np.ndarray) -> go.Figure:
    """Router probability of one token for every expert (columns) in every MoE layer (rows), the chosen
    experts marked. Probability is drawn as grey over the page's own background (so it reads in light
    and dark themes) and sent as whole percents (uint8) to keep the page light. The chosen experts are a
    second heatmap (one colour, gaps elsewhere), not 1,472 scatter markers: a heatmap is one image, so the
    browser redraws it at once (the markers were ~25,000 DOM changes per redraw). It does not depend on the
    layer being viewed, so moving through layers leaves it as it is."""
    E = probs.shape[1]
    pct = np.rint(np.clip(probs, 0, 1) * 100).astype(np.uint8)
    chosen = np.where(mask, 1.0, np.nan)
    y = np.asarray(layers)
    data = [dict(type="heatmap", z=pct, x=np.arange(E), y=y, zmin=0, zmax=100,
                 name="router probability", colorscale=[[0, "rgba(128,128,128,0)"], [1, "rgba(128,128,128,0.9)"]],
                 colorbar=dict(title=dict(text="router<br>probability %", side="top"), thickness=10, len=0.7),
                 hovertemplate="layer %{y}, expert %{x}<br>router probability %{z}%<extra></extra>"),
            dict(type="heatmap", z=chosen, x=np.arange(E), y=y, zmin=0, zmax=1, showscale=False,
                 name="chosen by the token", showlegend=True, hoverinfo="skip",
                 colorscale=[[0, CHOSEN], [1, CHOSEN]])]
    size = E // N_SHARDS
    layout = dict(
        xaxis=dict(title=dict(text="expert (ticks at the 8 shard boundaries)"), tickvals=list(range(0, E + 1, size)),
                   range=[-0.5, E - 0.5], showgrid=False, zeroline=False),
        yaxis=dict(title=dict(text="layer"), autorange="reversed", showgrid=False, zeroline=False),
        height=460, margin=dict(l=10, r=10, t=10, b=10), showlegend=True,
        legend=dict(orientation="h", y=-0.16, x=0), meta={"chart": "routing_fingerprint"})
    return go.Figure(dict(data=data, layout=layout))
