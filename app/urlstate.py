"""A control's value in the link: read once (validated, clamped with a notice), written back on every run.

    urlstate.sync("att_token", "token", default=T, options=range(1, T + 1), label="token")
    st.slider("Token", 1, T, key="att_token")
    urlstate.remember("token", st.session_state["att_token"])

`sync` seeds the widget's session state from the URL on a session's first run and, on every run,
moves a value that no longer exists (e.g. a token index after the prompt got shorter) to the nearest
option, so the widget never sees an out-of-range value; a value that still exists is kept even when
the widget's range changes.
"""
from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from app.text import md_escape


def _nearest(value, options: Sequence):
    numeric = [o for o in options if isinstance(o, (int, float))]
    return min(numeric, key=lambda o: (abs(o - value), o)) if numeric else options[0]


def sync(key: str, param: str, default, options: Sequence, label: str, parse=int) -> None:
    options = list(options)
    if key not in st.session_state:
        value, note = _from_url(param, default, options, label, parse)
        # Only the first reading of a link speaks up: later the widget may simply have been off screen
        # (e.g. while the prompt was empty) and the URL holds what this page wrote itself.
        first = f"_urlstate_seen_{key}"
        if note and first not in st.session_state:
            st.info(note, icon=":material/link_off:")
        st.session_state[first] = True
        st.session_state[key] = value
    elif st.session_state[key] not in options:
        old = st.session_state[key]
        st.session_state[key] = _nearest(old, options) if isinstance(old, (int, float)) else default
    else:
        # Re-assigning keeps the value when the widget is re-created (e.g. its max changed with the prompt)
        st.session_state[key] = st.session_state[key]


def _from_url(param: str, default, options: list, label: str, parse):
    raw = st.query_params.get(param)
    if raw is None:
        return default, None
    try:
        value = parse(raw)
    except (TypeError, ValueError):
        return default, f"The link's {label} “{md_escape(raw, 40)}” is not understood; showing {default} instead."
    if value in options:
        return value, None
    near = _nearest(value, options) if isinstance(value, (int, float)) else default
    return near, f"The link's {label} {md_escape(raw, 40)} is not available here; showing {near} instead."


def remember(param: str, value) -> None:
    if st.query_params.get(param) != str(value):
        st.query_params[param] = str(value)
