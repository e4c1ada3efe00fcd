"""What every Vega-Lite spec of the app shares: the schema it is written against, its usermeta (the
chart's name, which tests and the benchmark find it by, and the renderer vega-embed draws it with), and the
cheap way to point at a dense curve (thin, hover_bands, hover_layer)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from app import theme

SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"


def usermeta(name: str, renderer: str = "canvas") -> dict:
    return {"chart": name, "embedOptions": {"renderer": renderer}}


def thin(df: pd.DataFrame, points: int) -> pd.DataFrame:
    """Every k-th row of df, first and last kept, at most about `points` of them: what a chart draws of a
    densely sampled curve (the values are the samples themselves, none is moved)."""
    k = max(1, math.ceil((len(df) - 1) / max(points - 1, 1)))
    keep = sorted(set(range(0, len(df), k)) | {len(df) - 1})
    return df.iloc[keep].reset_index(drop=True)


def hover_bands(df: pd.DataFrame, x: str, points: int, log: bool = False) -> pd.DataFrame:
    """About `points` of df's rows (thin), each with the band of x it answers for under the pointer:
    from half-way to the previous row to half-way to the next (x0, x1); half-way on a log axis (`log`,
    positive x) is the geometric mean."""
    d = thin(df, points)
    v = d[x].to_numpy(dtype=float)
    mids = np.sqrt(v[1:] * v[:-1]) if log else (v[1:] + v[:-1]) / 2
    return d.assign(x0=np.concatenate([[v[0]], mids]), x1=np.concatenate([mids, [v[-1]]]))


def hover_layer(name: str, data: str, x: dict, tooltip: list[dict]) -> dict:
    """Invisible bands across the plot (dataset `data`, from hover_bands), one shaded under the pointer,
    its tooltip giving every curve's value there: plotly's unified hover, without a Voronoi diagram
    (which made the browser draw a path per sample)."""
    return {"data": {"name": data},
            "mark": {"type": "rect", "color": theme.OKABE_ITO["grey"], "clip": True},
            "params": [{"name": name, "select": {"type": "point", "on": "pointerover", "clear": "pointerout"}}],
            "encoding": {"x": {**x, "field": "x0"}, "x2": {"field": "x1"},
                         "y": {"value": 0}, "y2": {"value": "height"},
                         "opacity": {"condition": {"param": name, "empty": False, "value": 0.35}, "value": 0},
                         "tooltip": tooltip}}
