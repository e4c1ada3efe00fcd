"""What every Vega-Lite spec of the app shares: the schema it is written against, its usermeta (the
chart's name, which tests and the benchmark find it by, and the renderer vega-embed draws it with), and the
cheap way to point at a dense curve (thin, hover_bands, hover_layer)."""
from __future__ import annotations

import base64
import io
import math

import numpy as np
import pandas as pd
from PIL import Image

from app import theme

SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"
HOVER_STEPS = 200       # pointable bands across a full-width chart, at most (one per ~4 px)


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



def diverging_png(t: np.ndarray, stops: tuple[str, str, str], px: int = 1) -> str:
    """A grid of values t in [-1, 1] as a PNG data URL, px x px pixels a value, coloured linearly in RGB from
    stops[0] at -1 through stops[1] at 0 to stops[2] at 1 (a Vega-Lite scale with the same three stops and
    "interpolate": "rgb" is its legend); NaN is transparent. A grid of coloured cells drawn as one picture
    costs the browser far less than a rect mark per cell."""
    t = np.asarray(t, dtype=float)
    rgb3 = np.array([[int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in stops], dtype=float)   # [3, 3]
    a = np.abs(np.nan_to_num(t))[..., None]
    rgb = np.where((t < 0)[..., None], rgb3[1] + (rgb3[0] - rgb3[1]) * a, rgb3[1] + (rgb3[2] - rgb3[1]) * a)
    pixels, mode = np.rint(rgb), "RGB"
    if np.isnan(t).any():
        pixels, mode = np.concatenate([pixels, np.where(np.isnan(t), 0, 255)[..., None]], axis=-1), "RGBA"
    pixels = pixels.astype(np.uint8).repeat(px, axis=0).repeat(px, axis=1)
    buf = io.BytesIO()
    Image.fromarray(pixels, mode).save(buf, "PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
