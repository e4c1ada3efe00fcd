"""Streamlit building blocks shared by every page: header, chart with caption, URL notices."""
from __future__ import annotations

import streamlit as st

from app.text import md_escape

# Query parameters Streamlit itself understands; never reported as unknown.
STREAMLIT_PARAMS = {"embed", "embed_options"}
PLOTLY_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}


def page_header(title: str, lead: str, try_this: str | None = None) -> None:
    st.title(title)
    st.markdown(lead)
    if try_this:
        st.caption(f"**Try this:** {try_this}")


def chart(fig, caption: str, alt: str, key: str | None = None, **kwargs):
    """A plotly figure in the theme's colours, with a caption saying what to look at."""
    out = st.plotly_chart(fig, config=PLOTLY_CONFIG, alt=alt, key=key, **kwargs)
    st.caption(caption)
    return out


def ignore_unknown_params(known: set[str] = frozenset()) -> None:
    """Tell the person (once, on the page) which link parameters were not understood, and drop them."""
    unknown = [k for k in st.query_params.keys() if k not in known | STREAMLIT_PARAMS]
    if not unknown:
        return
    names = ", ".join(md_escape(k, 40) for k in unknown[:5]) + (" …" if len(unknown) > 5 else "")
    st.info(f"This page ignored link parameters it does not use: {names}.", icon=":material/link_off:")
    for k in unknown:
        del st.query_params[k]


def prompt_input(key: str = "prompt"):
    """Preset picker + text box; returns a validated app.live.Prompt, or None after showing why."""
    from app.live import DEFAULT_PRESET, PRESETS, Prompt, live, prepare_prompt
    lv = live()
    names = list(PRESETS) + ["Your own text"]
    preset = st.segmented_control("Prompt", names, default=DEFAULT_PRESET, key=f"{key}_preset") or DEFAULT_PRESET
    default = PRESETS.get(preset, "")
    text = st.text_area("Text the live model reads", value=default, key=f"{key}_text_{preset}", height=80,
                        max_chars=None, placeholder="Type a sentence, some code, numbers…")
    result = prepare_prompt(text, lv.tokenizer)
    if isinstance(result, str):
        st.info(result, icon=":material/edit_note:")
        return None
    for note in result.notices:
        st.caption(f":material/content_cut: {note}")
    assert isinstance(result, Prompt)
    return result
