"""Figures of the Model card: training curves from the CSV log, as Vega-Lite specs (their data in named
datasets). Pure functions."""
from __future__ import annotations

import pandas as pd

from app import theme
from app.charts.vega import HOVER_STEPS, SCHEMA, hover_bands, hover_layer, thin, usermeta

LOSS_PANEL = "cross-entropy per token (nats)"
LOAD_PANEL = "expert load balance"
# Pointing reads bands of steps (HOVER_STEPS of them), each with every value at its step. Not a nearest-point
# selection: its Voronoi diagram is a path per logged step, which cost the Model card's reload ~0.3 s.
# Samples drawn of a smoothed curve (a rolling mean changes little from one step to the next): about one per
# 2.5 px; each drawn point costs the browser's reload ~0.03 ms. The raw training loss is drawn at every step.
SMOOTH_POINTS = 400


def _series(window: int) -> dict[str, tuple[str, str, float, float]]:
    """Legend name -> (column in the "log" dataset, colour, line width, opacity), top panel then bottom."""
    return {
        "training loss": ("loss", theme.OKABE_ITO["grey"], 1, 0.5),
        f"training loss ({window}-step mean)": ("loss_mean", theme.K3, 2, 1),
        "validation loss": ("val_loss", theme.ACCENT, 2, 1),
        "max/mean expert load (worst layer)": ("max_mean_load", theme.MOE, 2, 1),
        "experts with no token in the batch (mean per layer)": ("dead_experts", theme.OKABE_ITO["purple"], 2, 1),
    }


def training_spec(log: pd.DataFrame, unigram: float | None = None, window: int = 25,
                  theme_type: str | None = None) -> dict:
    """Loss (train, smoothed, and validation) above, load balance below (both smoothed over `window`
    steps), on one step axis; the unigram baseline dotted, the MXFP4 phase shaded in both panels."""
    steps = log["step"].to_numpy().astype(int)
    data = pd.DataFrame({
        "step": steps, "loss": log["loss"].to_numpy().astype(float),
        "loss_mean": log["loss"].rolling(window, min_periods=1).mean().to_numpy(),
        "max_mean_load": log["max_mean_load"].rolling(window, min_periods=1).mean().to_numpy(),
        "dead_experts": log["dead_experts"].rolling(window, min_periods=1).mean().to_numpy()})
    val_loss = pd.to_numeric(log["val_loss"], errors="coerce")
    validation = pd.DataFrame({"step": steps[val_loss.notna().to_numpy()], "val_loss": val_loss.dropna().to_numpy()})
    quant = log[log["quant"] == 1]
    phase = pd.DataFrame({"start": [int(quant["step"].min())] if len(quant) else [],
                          "end": [int(log["step"].max())] if len(quant) else [],
                          "label": ["MXFP4 experts (QAT)"] if len(quant) else []})
    baseline = pd.DataFrame({"unigram": [float(unigram)] if unigram is not None else [],
                             "label": ["unigram baseline"] if unigram is not None else []})
    series = _series(window)
    names = list(series)
    ink = theme.ink(theme_type)
    x_scale = {"domain": [int(steps.min()), int(steps.max())], "nice": False, "zero": False}
    colour = {"type": "nominal", "title": None,
              "scale": {"domain": names, "range": [series[n][1] for n in names]},
              "legend": {"orient": "bottom", "direction": "horizontal", "columns": 3, "labelLimit": 360,
                         "symbolType": "stroke", "symbolStrokeWidth": 3, "symbolSize": 300,
                         "symbolOpacity": 1}}
    # one step axis for both panels: the top one without its labels, as a shared axis
    x_top = {"field": "step", "type": "quantitative", "title": None, "scale": x_scale,
             "axis": {"labels": False, "ticks": False}}
    x_bottom = {"field": "step", "type": "quantitative", "title": "training step", "scale": x_scale,
                "axis": {"format": "d"}}
    y_loss = {"type": "quantitative", "title": None, "scale": {"zero": False}}
    y_load = {"type": "quantitative", "title": None}

    def line(name, x, y, dataset="log", point=False):
        column, _, width, opacity = series[name]
        mark = {"type": "line", "strokeWidth": width, "opacity": opacity}
        if point:
            mark["point"] = {"size": 30, "filled": True, "opacity": 1}
        # the series as a constant datum of the shared colour scale (no per-row expression for Vega to evaluate)
        return {"data": {"name": dataset}, "mark": mark,
                "encoding": {"x": x, "y": {"field": column, **y}, "color": {"datum": name, **colour}}}

    def shade(x):
        return {"data": {"name": "phase"}, "mark": {"type": "rect", "color": theme.OKABE_ITO["yellow"], "opacity": 0.12},
                "encoding": {"x": {**x, "field": "start"}, "x2": {"field": "end"},
                             "tooltip": [{"field": "label", "title": "phase"},
                                         {"field": "start", "type": "quantitative", "title": "from step"}]}}

    def hover(name, x, tooltip):
        """The band of steps under the pointer shaded, with every value at its step."""
        return [hover_layer(name, "log_hover", x, [{"field": "step", "type": "quantitative"}, *tooltip])]

    loss_layers = [
        shade(x_top),
        {"data": {"name": "phase"}, "mark": {"type": "text", "align": "right", "baseline": "top", "dx": -4, "y": 4,
                                             "color": ink},
         "encoding": {"x": {**x_top, "field": "end"}, "text": {"field": "label"}}},
        {"data": {"name": "unigram"}, "mark": {"type": "rule", "strokeDash": [2, 3], "strokeWidth": 2,
                                               "color": theme.OKABE_ITO["vermillion"]},
         "encoding": {"y": {"field": "unigram", **y_loss},
                      "tooltip": [{"field": "label", "title": "reference"},
                                  {"field": "unigram", "type": "quantitative", "title": "nats per token",
                                   "format": ".3f"}]}},
        {"data": {"name": "unigram"}, "mark": {"type": "text", "align": "right", "baseline": "bottom", "dy": -3,
                                               "x": {"expr": "width - 4"}, "color": ink},
         "encoding": {"y": {"field": "unigram", **y_loss}, "text": {"field": "label"}}},
        *hover("loss_hover", x_top, [
            {"field": "loss", "type": "quantitative", "title": "training loss", "format": ".3f"},
            {"field": "loss_mean", "type": "quantitative", "title": names[1], "format": ".3f"}]),
        line(names[0], x_top, y_loss),
        line(names[1], x_top, y_loss, "log_thin"),
        line(names[2], x_top, y_loss, "validation", point=True),
        # drawn last, so that pointing at a validation point shows its value
        {"data": {"name": "validation"}, "mark": {"type": "point", "opacity": 0, "size": 150},
         "encoding": {"x": x_top, "y": {"field": "val_loss", **y_loss},
                      "tooltip": [{"field": "step", "type": "quantitative"},
                                  {"field": "val_loss", "type": "quantitative", "title": "validation loss",
                                   "format": ".3f"}]}},
    ]
    load_layers = [
        shade(x_bottom),
        *hover("load_hover", x_bottom, [
            {"field": "max_mean_load", "type": "quantitative",
             "title": f"max/mean load, worst layer ({window}-step mean)", "format": ".2f"},
            {"field": "dead_experts", "type": "quantitative",
             "title": f"experts with no token, per layer ({window}-step mean)", "format": ".3f"}]),
        line(names[3], x_bottom, y_load, "log_thin"),
        line(names[4], x_bottom, y_load, "log_thin"),
    ]
    # the panel titles' style in the titles, not the config: presenter mode replaces the config's "title"
    top = {"title": {"text": LOSS_PANEL, "fontWeight": "normal", "anchor": "middle"},
           "width": "container", "height": 230, "layer": loss_layers}
    bottom = {"title": {"text": LOAD_PANEL, "fontWeight": "normal", "anchor": "middle"},
              "width": "container", "height": 180, "layer": load_layers}
    return {
        # both panels "container": ui.vega_chart stretches the stack to the column (ui.stretches); fit-x, so that
        # the panels with their axes fit the column (Streamlit pads a vconcat of layers, which overflows)
        "$schema": SCHEMA, "autosize": {"type": "fit-x", "contains": "padding"},
        "datasets": {"log": data, "log_thin": thin(data.drop(columns="loss"), SMOOTH_POINTS),
                     "log_hover": hover_bands(data, "step", HOVER_STEPS), "validation": validation,
                     "phase": phase, "unigram": baseline},
        "vconcat": [top, bottom], "spacing": 12,
        "resolve": {"scale": {"x": "shared", "color": "shared"}},
        "usermeta": usermeta("model_card_training"),
    }


def bias_spec(log: pd.DataFrame) -> dict:
    """The spread of the balancing biases (max - min, mean over layers) per training step."""
    data = pd.DataFrame({"step": log["step"].to_numpy().astype(int),
                         "bias_spread": log["bias_spread"].to_numpy().astype(float)})
    x = {"field": "step", "type": "quantitative", "title": "training step",
         "scale": {"domain": [int(data["step"].min()), int(data["step"].max())], "nice": False, "zero": False},
         "axis": {"format": "d"}}
    y = {"field": "bias_spread", "type": "quantitative", "title": ["max - min balancing bias", "(mean over layers)"],
         "scale": {"zero": False}}
    return {
        "$schema": SCHEMA, "width": "container", "height": 240,
        "datasets": {"bias": data, "bias_hover": hover_bands(data, "step", HOVER_STEPS)},
        "layer": [
            hover_layer("bias_point", "bias_hover", x, [
                {"field": "step", "type": "quantitative"},
                {"field": "bias_spread", "type": "quantitative", "title": "bias spread", "format": ".4f"}]),
            {"data": {"name": "bias"}, "mark": {"type": "line", "strokeWidth": 2, "color": theme.OKABE_ITO["blue"]},
             "encoding": {"x": x, "y": y}},
        ],
        "usermeta": usermeta("model_card_bias"),
    }
