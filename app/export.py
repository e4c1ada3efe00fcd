"""A chart's data as a table (for its CSV download) and the file names of its downloads. Pure: Vega-Lite
specs in, pandas out; no Streamlit."""
from __future__ import annotations

import re

import pandas as pd


def file_stem(title: str, fallback: str = "k3-explorer-chart") -> str:
    """A safe, short file name from a chart's title or alt text."""
    stem = re.sub(r"[^a-z0-9]+", "-", str(title).lower()).strip("-")[:60].strip("-")
    return stem or fallback


# Suffixes of datasets whose rows are copied from another dataset of the same chart: a pointer's bands
# (app.charts.vega.hover_bands) and a smooth curve's drawn samples (app.charts.vega.thin).
COPIES = ("_hover", "_thin")


def spec_frame(spec: dict) -> pd.DataFrame:
    """A Vega-Lite chart's data as one table (its CSV): every dataset's rows, with the dataset's name first;
    not the rows copied from another of its datasets (names ending in one of COPIES)."""
    parts = [pd.DataFrame(rows).assign(dataset=name) for name, rows in spec.get("datasets", {}).items()
             if len(rows) and not name.endswith(COPIES)]             # records or a data frame
    if not parts:
        return pd.DataFrame(columns=["dataset"])
    out = pd.concat(parts, ignore_index=True)
    return out[["dataset"] + [c for c in out.columns if c != "dataset"]]
