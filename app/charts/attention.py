"""Figures of the Hybrid attention & memory page: pure functions from arrays / frames to Vega-Lite specs
(their data in named datasets), drawn by the browser's Vega without plotly (plotly's drawing of the page's
five charts was most of its reload)."""
from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd

from app import theme
from app.charts.vega import SCHEMA, usermeta
from app.text import fmt_bytes, fmt_tokens, token_text
from model.config import K3Config

DESIGN_COLOUR = {"K3 hybrid": theme.K3, "all MLA": theme.MLA, "all MHA": theme.OKABE_ITO["purple"]}


def design_labels(cfg: K3Config) -> dict[str, str]:
    """The memory chart's legend: each stack design named by its counts, read from the config."""
    return {"K3 hybrid": f"K3 hybrid: {cfg.n_kda} KDA states + {cfg.n_mla} MLA latent caches",
            "all MLA": f"all MLA: {cfg.num_layers} latent caches",
            "all MHA": f"all MHA: {cfg.num_layers} layers, {cfg.mla_heads} heads x {cfg.v_head_dim}"}


DESIGN_LABELS = design_labels(K3Config.full())
PLANE_COLOUR = {"KDA state": theme.KDA, "MLA latent": theme.MLA, "Block AttnRes": theme.OKABE_ITO["purple"],
                "Latent dispatch": theme.MOE}
# blue < 0 < red (plotly's RdBu_r before): readable with the common colour-vision deficiencies
DIVERGING = {"scheme": "redblue", "reverse": True}
KIND_NAMES = {"KDA": "Kimi Delta Attention: fixed-size state", "MLA": "gated MLA: cache grows per token"}
SLOTS = ["1st", "2nd", "3rd", "4th"]
HEAT = 280                      # px: the side of the state's square plot, and the cache's plot height
TITLE = {"title": {"fontSize": 14, "anchor": "start"}}     # config (presenter mode replaces it with larger type)


def _fives(n: int) -> list[int]:
    return list(range(0, n, 5))


def stack_spec(sched: pd.DataFrame, theme_type: str | None = None) -> dict:
    """The 93 layers as a grid: one column per repeating unit (KDA, KDA, KDA, MLA), the final MLA alone."""
    n_units = int(sched["unit"].max()) + 1
    kinds = [f"{KIND_NAMES[k]} ({int((sched['kind'] == k).sum())} layers)" for k in ("KDA", "MLA")]
    squares = pd.DataFrame({
        "unit": sched["unit"].to_numpy(), "slot": sched["slot"].to_numpy(), "layer": sched["layer"].to_numpy(),
        "kind": sched["kind"].map(dict(zip(("KDA", "MLA"), kinds))).to_numpy(),
        "where": sched["where"].to_numpy(), "name": sched["name"].to_numpy(), "keeps": sched["keeps"].to_numpy()})
    notes = pd.DataFrame({"unit": [(n_units - 2) / 2, n_units - 1],
                          "text": [f"{n_units - 1} repeating units of 3 KDA + 1 MLA", "final MLA"]})
    x = {"field": "unit", "type": "quantitative", "title": "repeating unit (layers 4u .. 4u+3)",
         "scale": {"domain": [-0.7, n_units - 0.3], "nice": False, "zero": False},
         "axis": {"values": list(range(n_units)), "grid": False, "format": "d", "labelOverlap": False}}
    y = {"field": "slot", "type": "quantitative", "title": "layer in unit",
         "scale": {"domain": [-1.3, 3.6], "nice": False, "zero": False, "reverse": True},
         "axis": {"values": [0, 1, 2, 3], "labelExpr": f"{SLOTS}[datum.value]", "grid": False, "domain": False,
                  "ticks": False}}
    return {
        "$schema": SCHEMA, "width": "container", "height": 270,
        "datasets": {"layers": squares, "notes": notes},
        "layer": [
            {"data": {"name": "layers"}, "mark": {"type": "square", "size": 256, "opacity": 1},
             "encoding": {"x": x, "y": y,
                          "color": {"field": "kind", "type": "nominal", "title": None,
                                    "scale": {"domain": kinds, "range": [theme.KDA, theme.MLA]},
                                    "legend": {"orient": "bottom", "direction": "horizontal", "symbolType": "square",
                                               "labelLimit": 360}},
                          "tooltip": [{"field": "where", "title": "layer"}, {"field": "name", "title": "attention"},
                                      {"field": "keeps", "title": "between tokens"}]}},
            {"data": {"name": "notes"}, "mark": {"type": "text", "color": theme.ink(theme_type), "opacity": 0.75,
                                                 "tooltip": None},
             # every layer repeats the axes: a layer without them can make Vega-Lite drop the tick values
             "encoding": {"x": x, "y": {"datum": -0.9, "type": "quantitative", "scale": y["scale"], "axis": y["axis"],
                                        "title": y["title"]},
                          "text": {"field": "text"}}},
        ],
        "config": {"view": {"stroke": None}},
        "usermeta": usermeta("attention_stack"),
    }


def state_spec(state: np.ndarray, zmax: float, title: str) -> dict:
    """One head's d_k x d_v recurrent state, square cells (the same size after every token), on a colour
    scale fixed at [-zmax, zmax] so that colours compare across tokens."""
    dk, dv = state.shape
    cell = HEAT / max(dk, dv)
    k, v = np.indices((dk, dv))
    cells = pd.DataFrame({"key": k.reshape(-1), "value": v.reshape(-1),
                          "S": np.asarray(state, dtype=float).reshape(-1)})
    return {
        "$schema": SCHEMA, "width": cell * dv, "height": cell * dk, "autosize": {"type": "pad"},
        "title": {"text": title},
        "datasets": {"state": cells}, "data": {"name": "state"},
        "mark": {"type": "rect"},
        "encoding": {
            "x": {"field": "value", "type": "ordinal", "title": f"value channel (d_v = {dv})",
                  "axis": {"labelAngle": 0, "values": _fives(dv)}},
            "y": {"field": "key", "type": "ordinal", "title": f"key channel (d_k = {dk})",
                  "axis": {"values": _fives(dk)}},
            "color": {"field": "S", "type": "quantitative", "title": "state entry S",
                      "scale": DIVERGING | {"domain": [-zmax, zmax], "clamp": True},
                      "legend": {"gradientLength": cell * dk - 30, "format": ".2~f"}},
            "tooltip": [{"field": "key", "type": "quantitative", "title": "key channel"},
                        {"field": "value", "type": "quantitative", "title": "value channel"},
                        {"field": "S", "type": "quantitative", "title": "S", "format": ".4f"}]},
        "config": {"view": {"stroke": None}} | TITLE,
        "usermeta": usermeta("attention_state"),
    }


def cache_spec(rows: np.ndarray, upto: int, kv_lora: int, pieces: list[str], title: str,
               theme_type: str | None = None) -> dict:
    """The MLA layer's cache, one row per token (labelled with its piece); rows after token `upto` are
    not written yet and stay empty. The colour scale is fixed by the whole prompt's cache."""
    T, width = rows.shape
    zmax = float(np.abs(rows).max()) or 1.0
    labels = [f"{i} {token_text(p, 12)}" for i, p in enumerate(pieces)]     # positions count from 0, as everywhere
    t, c = np.indices((upto, width))
    cells = pd.DataFrame({"token": t.reshape(-1) + 1, "label": np.asarray(labels, dtype=object)[t.reshape(-1)],
                          "piece": [token_text(pieces[i]) for i in t.reshape(-1)],
                          "column": c.reshape(-1), "start": c.reshape(-1) - 0.5, "end": c.reshape(-1) + 0.5,
                          "part": np.where(c.reshape(-1) < kv_lora, "latent c", "k_rope"),
                          "value": np.asarray(rows[:upto], dtype=float).reshape(-1)})
    parts = pd.DataFrame({"column": [(kv_lora - 1) / 2, kv_lora + (width - kv_lora - 1) / 2],
                          "text": ["latent c", "k_rope"]})
    x_scale = {"domain": [-0.5, width - 0.5], "nice": False, "zero": False}
    x = {"field": "start", "type": "quantitative",
         "title": f"cached value ({kv_lora} latent c + {width - kv_lora} k_rope, never rotated)",
         "scale": x_scale, "axis": {"values": _fives(width), "format": "d", "grid": False}}
    y = {"field": "label", "type": "ordinal", "title": "token (one row each)",
         "scale": {"domain": labels, "paddingInner": 0},
         "axis": {"labelLimit": 90, "labelOverlap": "greedy", "ticks": False}}
    grey = theme.OKABE_ITO["grey"]
    return {
        # fit-x: the height is the plot's, the same as the state's beside it
        "$schema": SCHEMA, "width": "container", "height": HEAT, "autosize": {"type": "fit-x", "contains": "padding"},
        "title": {"text": title},
        "datasets": {"cache": cells, "parts": parts, "split": pd.DataFrame({"x": [kv_lora - 0.5]})},
        "layer": [
            {"data": {"name": "cache"}, "mark": {"type": "rect"},
             "encoding": {"x": x, "x2": {"field": "end"}, "y": y,
                          "color": {"field": "value", "type": "quantitative", "title": "value",
                                    "scale": DIVERGING | {"domain": [-zmax, zmax], "clamp": True},
                                    "legend": {"gradientLength": HEAT - 30, "format": ".2~f"}},
                          "tooltip": [{"field": "token", "type": "quantitative", "title": "token"},
                                      {"field": "piece", "title": "piece"},
                                      {"field": "column", "type": "quantitative", "title": "cache column"},
                                      {"field": "part"},
                                      {"field": "value", "type": "quantitative", "format": ".4f"}]}},
            {"data": {"name": "split"}, "mark": {"type": "rule", "strokeDash": [2, 3], "color": grey, "tooltip": None},
             "encoding": {"x": x | {"field": "x"}}},
            {"data": {"name": "parts"},
             "mark": {"type": "text", "baseline": "bottom", "y": -4, "color": theme.ink(theme_type), "opacity": 0.75,
                      "tooltip": None},
             "encoding": {"x": x | {"field": "column"},
                          "text": {"field": "text"}}},
        ],
        "config": {"view": {"stroke": None}} | TITLE,
        "usermeta": usermeta("attention_cache"),
    }


def _tick_labels(ticks: list[float], names: list[str], base: int) -> str:
    """A labelExpr naming each tick of a log axis whose ticks are powers of `base`."""
    powers = [round(float(np.log(t) / np.log(base))) for t in ticks]
    return f"{names}[indexof({powers}, round(log(datum.value) / log({base})))]"


def memory_spec(curves: pd.DataFrame, cross: pd.DataFrame, context: int, batch: int,
                theme_type: str | None = None) -> dict:
    """Cache bytes vs context (log-log), one line per stack design, the crossovers labelled, the chosen
    context as a dashed line with each design's point on it."""
    designs = list(dict.fromkeys(curves["design"]))
    names = [DESIGN_LABELS.get(d, d) for d in designs]
    lines = pd.DataFrame({"design": curves["design"].to_numpy(),
                          "name": curves["design"].map(lambda d: DESIGN_LABELS.get(d, d)).to_numpy(),
                          "tokens": curves["tokens"].to_numpy().astype(float),
                          "bytes": curves["bytes"].to_numpy().astype(float),
                          "cache": [fmt_bytes(b) for b in curves["bytes"]]})
    crossings = pd.DataFrame({"versus": cross["versus"].to_numpy() if len(cross) else [],
                              "tokens": cross["tokens"].to_numpy().astype(float) if len(cross) else [],
                              "bytes": cross["bytes"].to_numpy().astype(float) if len(cross) else [],
                              "label": [f"hybrid = {v} at {t:,.0f} tokens" for v, t in zip(cross["versus"], cross["tokens"])]
                              if len(cross) else [],
                              "cache": [fmt_bytes(b) for b in cross["bytes"]] if len(cross) else []})
    gap = (np.log(curves["tokens"]) - np.log(context)).abs()
    at = lines[(gap == gap.min()).to_numpy()]
    lo, hi = float(lines["bytes"][lines["bytes"] > 0].min()), float(lines["bytes"].max())
    y_lo, y_hi = lo / 1.6, hi * 1.6
    yt = [10.0 ** k for k in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
          if y_lo <= 10.0 ** k <= y_hi]
    xt = [2 ** k for k in range(0, 21, 2)]
    x = {"field": "tokens", "type": "quantitative", "title": "context length (tokens, log)",
         "scale": {"type": "log", "domain": [1, 2 ** 20 * 10 ** 0.05], "nice": False},
         "axis": {"values": xt, "labelExpr": _tick_labels(xt, [fmt_tokens(t) for t in xt], 2)}}
    y = {"field": "bytes", "type": "quantitative", "title": f"cache (bytes at bf16, batch {batch})",
         "scale": {"type": "log", "domain": [y_lo, y_hi], "nice": False},
         "axis": {"values": yt, "labelExpr": _tick_labels(yt, [fmt_bytes(t) for t in yt], 10)}}
    colour = {"field": "name", "type": "nominal", "title": None,
              "scale": {"domain": names, "range": [DESIGN_COLOUR.get(d, theme.K3) for d in designs]},
              "legend": {"orient": "bottom", "direction": "horizontal", "columns": 2, "labelLimit": 360,
                         "symbolType": "stroke", "symbolStrokeWidth": 3}}
    grey, ink, green = theme.OKABE_ITO["grey"], theme.ink(theme_type), theme.MOE
    # the context's label where no line passes: top left of it for short contexts, bottom right for long
    left, low = context > 2 ** 10, context >= 2 ** 16
    label_mark = {"type": "text", "align": "right" if left else "left", "dx": -5 if left else 5, "color": grey, "tooltip": None,
                  "baseline": "bottom" if low else "top", "y": {"expr": "height - 4"} if low else 4}
    crossing_tip = [{"field": "label", "title": "crossover"}, {"field": "cache", "title": "cache there"}]
    tip = [{"field": "design"}, {"field": "tokens", "type": "quantitative", "format": ",d"},
           {"field": "cache", "title": "cache"}]
    return {
        "$schema": SCHEMA, "width": "container", "height": 440,
        "datasets": {"curves": lines, "crossovers": crossings, "at_context": at,
                     "context": pd.DataFrame({"tokens": [float(context)],
                                              "label": [f"at {fmt_tokens(context)} token" + ("s" if context != 1 else "")]})},
        "layer": [
            {"data": {"name": "context"}, "mark": {"type": "rule", "strokeDash": [5, 4], "color": grey},
             "encoding": {"x": x, "tooltip": [{"field": "tokens", "type": "quantitative", "title": "chosen context (tokens)",
                                               "format": ",d"}]}},
            {"data": {"name": "context"}, "mark": label_mark, "encoding": {"x": x, "text": {"field": "label"}}},
            {"data": {"name": "curves"}, "mark": {"type": "line", "tooltip": None},
             "encoding": {"x": x, "y": y, "color": colour,
                          "strokeWidth": {"field": "design", "type": "nominal", "legend": None,
                                          "scale": {"domain": designs,
                                                    "range": [3 if d == "K3 hybrid" else 2 for d in designs]}}}},
            # invisible points along each line: hover anywhere near a line for its value there
            {"data": {"name": "curves"}, "mark": {"type": "circle", "size": 90, "opacity": 0},
             "encoding": {"x": x, "y": y, "tooltip": tip}},
            {"data": {"name": "crossovers"},
             "mark": {"type": "point", "shape": "diamond", "size": 170, "filled": True, "fill": green, "opacity": 1,
                      "stroke": "rgba(0,0,0,0.4)", "strokeWidth": 1},
             "encoding": {"x": x, "y": y, "tooltip": crossing_tip}},
            {"data": {"name": "crossovers"},
             "mark": {"type": "text", "align": "left", "baseline": "top", "dx": 7, "dy": 6, "color": ink},
             "encoding": {"x": x, "y": y, "text": {"field": "label"}, "tooltip": crossing_tip}},
            {"data": {"name": "at_context"},
             "mark": {"type": "circle", "size": 110, "opacity": 1, "stroke": "rgba(0,0,0,0.4)", "strokeWidth": 1},
             "encoding": {"x": x, "y": y, "color": colour, "tooltip": tip}},
        ],
        "usermeta": usermeta("attention_memory"),
    }


def planes_spec(planes: pd.DataFrame, theme_type: str | None = None) -> dict:
    """Each compression plane as the share it cuts, with the before -> after values on the bar; each row
    named at its left, the plane in bold above what it compares."""
    text = [f"{b:,.0f} → {a:,.0f} {u}: −{c:.1%}" if c > 0 else f"{b:,.0f} → {a:,.0f} {u}: no cut"
            for b, a, u, c in zip(planes["before"], planes["after"], planes["unit"], planes["cut"])]
    bars = pd.DataFrame({"row": np.arange(len(planes)), "plane": planes["plane"].to_numpy(),
                         "comparison": planes["comparison"].to_numpy(),
                         "wrapped": ["\n".join(textwrap.wrap(str(c), 48)) for c in planes["comparison"]],
                         "before": planes["before"].to_numpy().astype(float), "after": planes["after"].to_numpy().astype(float),
                         "unit": planes["unit"].to_numpy(), "cut": (planes["cut"] * 100).to_numpy().astype(float),
                         "text": text})
    order = list(dict.fromkeys(planes["plane"]))
    x = {"field": "cut", "type": "quantitative", "title": "share cut (1 − after / before), computed",
         "scale": {"domain": [0, 175], "nice": False},
         "axis": {"values": [0, 25, 50, 75, 100], "labelExpr": "datum.value + '%'"}}
    y = {"field": "row", "type": "ordinal", "title": None, "scale": {"paddingInner": 0.35, "paddingOuter": 0.2},
         "axis": {"labels": False, "ticks": False, "domain": False}}
    ink = theme.ink(theme_type)
    tip = [{"field": "plane"}, {"field": "comparison"}, {"field": "before", "type": "quantitative", "format": ",.0f"},
           {"field": "after", "type": "quantitative", "format": ",.0f"}, {"field": "unit"},
           {"field": "cut", "type": "quantitative", "title": "cut (%)", "format": ".1f"}]
    return {
        "$schema": SCHEMA, "width": "container", "height": 90 + 62 * len(bars),
        "datasets": {"planes": bars}, "data": {"name": "planes"},
        "layer": [
            {"mark": {"type": "bar"},
             "encoding": {"x": x, "y": y,
                          "color": {"field": "plane", "type": "nominal", "legend": None,       # named at the left
                                    "scale": {"domain": order, "range": [PLANE_COLOUR.get(p, theme.K3) for p in order]}},
                          "tooltip": tip}},
            {"mark": {"type": "text", "align": "left", "dx": 5, "color": ink},
             "encoding": {"x": x, "y": y, "text": {"field": "text"}, "tooltip": tip}},
            # the row's name left of the plot (x in pixels): the plane above the middle of its bar, the comparison below
            {"mark": {"type": "text", "align": "right", "baseline": "bottom", "x": -10, "dy": -1, "fontWeight": "bold",
                      "color": ink, "tooltip": None},
             "encoding": {"y": y, "text": {"field": "plane"}}},
            {"mark": {"type": "text", "align": "right", "baseline": "top", "x": -10, "dy": 2, "lineBreak": "\n",
                      "color": ink, "opacity": 0.75, "tooltip": None},
             "encoding": {"y": y, "text": {"field": "wrapped"}}},
        ],
        "config": {"view": {"stroke": None}},
        "usermeta": usermeta("attention_planes"),
    }
