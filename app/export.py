"""A chart's data as a table (for its CSV download) and the file names of its downloads. Pure: plotly
figures in, pandas out; no Streamlit."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

_AXES = ("x", "y", "z", "text")


def _values(v) -> np.ndarray | None:
    if v is None:
        return None
    if isinstance(v, dict) and "bdata" in v:          # plotly 7 typed-array encoding (from a JSON spec)
        import base64
        arr = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        return arr.reshape(v["shape"]) if "shape" in v else arr
    arr = np.asarray(v, dtype=object)
    return arr if arr.ndim else None


def _trace_rows(i: int, trace) -> pd.DataFrame:
    name = trace.name if getattr(trace, "name", None) else f"trace {i + 1}"
    cols = {a: _values(getattr(trace, a, None)) for a in _AXES if a in trace}
    z = cols.get("z")
    if z is not None and z.ndim == 2:                 # heatmap: one row per cell, with its x and y
        rows, columns = z.shape
        x = cols.get("x") if cols.get("x") is not None and len(cols["x"]) == columns else np.arange(columns)
        y = cols.get("y") if cols.get("y") is not None and len(cols["y"]) == rows else np.arange(rows)
        frame = pd.DataFrame({"x": np.tile(np.asarray(x, dtype=object), rows),
                              "y": np.repeat(np.asarray(y, dtype=object), columns),
                              "z": z.reshape(-1)})
        text = cols.get("text")
        if text is not None and text.shape == z.shape:
            frame["text"] = text.reshape(-1)
    else:
        flat = {a: v.reshape(-1) for a, v in cols.items() if v is not None and v.ndim >= 1}
        n = max((len(v) for v in flat.values()), default=0)
        frame = pd.DataFrame({a: v for a, v in flat.items() if len(v) == n})
    frame.insert(0, "series", name)
    frame.insert(1, "kind", trace.type)
    return frame


def figure_frame(fig) -> pd.DataFrame:
    """Every trace's data, long format: series, kind, then x, y (z for heatmaps, one row per cell)
    and the hover text where the trace has one per point."""
    frames = [_trace_rows(i, t) for i, t in enumerate(fig.data)]
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=["series", "kind"])
    return pd.concat(frames, ignore_index=True)


def file_stem(title: str, fallback: str = "k3-explorer-chart") -> str:
    """A safe, short file name from a chart's title or alt text."""
    stem = re.sub(r"[^a-z0-9]+", "-", str(title).lower()).strip("-")[:60].strip("-")
    return stem or fallback


def spec_frame(spec: dict) -> pd.DataFrame:
    """A Vega-Lite chart's data as one table (its CSV): every dataset's rows, with the dataset's name first."""
    parts = [pd.DataFrame(rows).assign(dataset=name) for name, rows in spec.get("datasets", {}).items()
             if len(rows)]                                          # records or a data frame
    if not parts:
        return pd.DataFrame(columns=["dataset"])
    out = pd.concat(parts, ignore_index=True)
    return out[["dataset"] + [c for c in out.columns if c != "dataset"]]
