"""A linked view the browser answers alone (Vega-Lite selections, no server round trip): the prompt's
tokens above one layer's 896 experts. Point at an expert and the tokens it serves light up; point at a
token and its 16 experts are outlined. Pure: data frames in, a Vega-Lite spec out."""
from __future__ import annotations

from functools import lru_cache

import altair as alt
import numpy as np
import pandas as pd

from app import theme
from app.routing import GRID_COLS
from app.text import token_text

OI = theme.OKABE_ITO
CELL = 13                      # px per expert square
TOKEN_W = 26                   # px per token column


def token_labels(pieces) -> list[str]:
    """Unique labels in prompt order (position first: a piece can repeat)."""
    return [f"{i} {token_text(p, 8)}" for i, p in enumerate(pieces)]


@lru_cache(maxsize=64)
def _template(labels: tuple[str, ...], n_experts: int) -> dict:
    """The Vega-Lite spec without its data: the same for every layer of one prompt, so altair builds and
    checks it once per prompt (~50 ms) and a layer change only swaps the data."""
    on_expert = alt.selection_point(name="expert", fields=["expert"], on="pointerover", clear="pointerout",
                                    empty=False)
    on_token = alt.selection_point(name="token", fields=["token"], on="pointerover", clear="pointerout",
                                   empty=False)
    tokens, pairs, experts = (alt.Data(name=n) for n in ("tokens", "pairs", "experts"))
    x_tok = alt.X("label:N", sort=list(labels), title=None,
                  axis=alt.Axis(labelAngle=-60, labelFontSize=12, labelLimit=90, ticks=False, domain=False,
                                labelOverlap=False))
    bands = (alt.Chart(tokens).mark_rect(color="#9994", stroke="#8888", strokeWidth=0.5)
             .encode(x=x_tok, tooltip=[alt.Tooltip("token:O", title="position"), alt.Tooltip("label:N", title="token")])
             .add_params(on_token))
    served = (alt.Chart(pairs).transform_filter(on_expert)
              .mark_rect(color=OI["vermillion"])
              .encode(x=x_tok, tooltip=[alt.Tooltip("label:N", title="token"),
                                        alt.Tooltip("weight:Q", title="output weight", format=".3f")]))
    strip = (alt.layer(bands, served)
             .properties(width=max(TOKEN_W * len(labels), 300), height=28,
                         title="Tokens of the prompt: point at one, its experts are outlined below"))
    x_e = alt.X("col:O", axis=None)
    y_e = alt.Y("row:O", axis=None)
    grid = (alt.Chart(experts).mark_rect(stroke="#8888", strokeWidth=0.5)
            .encode(x=x_e, y=y_e,
                    color=alt.Color("load:Q", title="tokens", scale=alt.Scale(scheme="blues", domainMin=0),
                                    legend=alt.Legend(format="d", tickMinStep=1)),
                    tooltip=[alt.Tooltip("expert:Q"), alt.Tooltip("shard:Q"),
                             alt.Tooltip("load:Q", title="tokens of the prompt")])
            .add_params(on_expert))
    chosen = (alt.Chart(pairs).transform_filter(on_token)
              .mark_rect(filled=False, stroke=OI["vermillion"], strokeWidth=2.5)
              .encode(x=x_e, y=y_e))
    board = (alt.layer(grid, chosen)
             .properties(width=CELL * GRID_COLS, height=CELL * (-(-n_experts // GRID_COLS)),
                         title=f"The {n_experts} experts, coloured by load (point at one)"))
    return (alt.vconcat(strip, board).resolve_scale(x="independent", color="independent")
            .configure_view(stroke=None).to_dict())


def linked_figure(pairs: pd.DataFrame, experts: pd.DataFrame, pieces) -> dict:
    """Tokens (top) and experts (bottom), linked both ways by pointer-over selections: a Vega-Lite spec
    (for st.vega_lite_chart) with the layer's data in its named datasets (data frames)."""
    labels = token_labels(pieces)
    spec = dict(_template(tuple(labels), len(experts)))
    # Drawn on a canvas: the view is ~900 marks, which as SVG cost the browser ~8,000 DOM changes per redraw
    # (vega-embed reads its options from usermeta).
    spec["usermeta"] = {"embedOptions": {"renderer": "canvas"}}
    # data frames, not records: Streamlit sends each as Arrow, and a frame is converted without a detour; small
    # column types, since the frames travel to the browser on every layer key
    small = {"token": np.int16, "expert": np.int16, "row": np.int8, "col": np.int8, "load": np.int16,
             "shard": np.int8, "weight": np.float32}

    def typed(df: pd.DataFrame) -> pd.DataFrame:
        return df.astype({c: t for c, t in small.items() if c in df.columns})

    spec["datasets"] = {
        "tokens": typed(pd.DataFrame({"token": np.arange(len(labels)), "label": labels})),
        "pairs": typed(pairs.assign(label=[labels[t] for t in pairs["token"]])[["token", "label", "expert", "row",
                                                                                 "col", "weight"]]),
        "experts": typed(experts[["expert", "row", "col", "load", "shard"]]),
    }
    return spec
