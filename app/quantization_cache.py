"""The Quantization lab's cached calls: chart specs that depend on nothing chosen, built once per process, and the
live model's block scales, rounding errors and experiments, each computed once per argument (Streamlit caches;
the computations are app/quantization_blocks.py's, app/quantization_weights.py's and app/quantization_behaviour.py's)."""
from __future__ import annotations

import pandas as pd
import streamlit as st
import torch

from app.quantization_behaviour import (
    HELDOUT_CHUNK,
    Behaviour,
    Comparison,
    behaviour,
    compare,
    heldout_ids,
    run,
    variant_model,
)
from app.quantization_blocks import grid_frame
from app.quantization_weights import experts_already_mxfp4, k3_bytes_table, layer_errors, layer_scale_exponents
from model.k3 import K3Model


@st.cache_resource(max_entries=8, show_spinner=False)
def cached_spec(name: str, theme_type: str | None = None) -> dict:
    """Vega-Lite specs that depend on nothing the person chooses (but the theme, which colours their
    text), built once per process: ui.vega_chart and st.vega_lite_chart copy a spec before changing it,
    so sharing is safe."""
    from app.charts import quantization as charts
    if name == "grids":
        return charts.grids_spec(grid_frame("e2m1"), grid_frame("e4m3"), theme_type)
    if name == "k3_bytes":
        return charts.k3_bytes_spec(k3_bytes_table(), theme_type)
    raise ValueError(f"no chart named {name}")


@st.cache_data(max_entries=128, show_spinner=False)
def cached_layer_scales(layer: int) -> pd.DataFrame:
    from app.live import computing, live
    model = live().model
    with computing():
        return layer_scale_exponents(model, layer)


@st.cache_data(max_entries=128, show_spinner=False)
def cached_layer_errors(layer: int) -> tuple[pd.DataFrame, bool]:
    from app.live import computing, live
    m = live().model
    with computing():
        return layer_errors(m, layer), experts_already_mxfp4(m, layer)


@st.cache_resource(max_entries=3, show_spinner=False)
def _variant(variant: str) -> K3Model:
    from app.live import computing, live
    model = live().model
    with computing():
        return variant_model(model, variant)


def _behaviour_of(ids: tuple[int, ...], variant: str | None) -> Behaviour:
    from app.live import computing, forward
    if variant is None:
        return behaviour(forward(ids))                      # shared with the other pages
    if variant == "act":
        return behaviour(forward(ids, quant=True))
    m = _variant(variant)
    with computing():
        return behaviour(m(torch.tensor([ids]), record=False, max_tokens=HELDOUT_CHUNK))


@st.cache_data(max_entries=64, show_spinner=False)
def cached_prompt_comparison(ids: tuple[int, ...], variant: str) -> Comparison:
    return compare(_behaviour_of(ids, None), _behaviour_of(ids, variant))


@st.cache_resource(show_spinner=False)
def _heldout_reference() -> tuple[torch.Tensor, Behaviour]:
    from app.live import computing, live
    lv = live()
    ids = heldout_ids(lv.tokenizer)
    with computing():
        return ids, run(lv.model, ids, None)


@st.cache_data(max_entries=8, show_spinner=False)
def cached_heldout_comparison(variant: str) -> Comparison:
    from app.live import computing, live
    ids, ref = _heldout_reference()
    variants = {} if variant == "act" else {variant: _variant(variant)}
    model = live().model
    with computing():
        return compare(ref, run(model, ids, variant, variants))
