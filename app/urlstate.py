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


# ---- the prompt in the link (every page with a prompt box: app.ui.prompt_input) ----------------------

PROMPT_PARAMS = frozenset({"preset", "text"})
OWN_TEXT = "Your own text"          # the preset picker's last option
OWN_SLUG = "own"
MAX_LINK_TEXT = 2000                # characters of typed text written into a link (= app.live.MAX_CHARS)


def preset_slug(name: str) -> str:
    return OWN_SLUG if name == OWN_TEXT else name.lower()


def prompt_from_params(params, presets) -> tuple[str | None, str | None, list[str]]:
    """(preset name or None, own text or None, notices) from the link's `preset` and `text`.
    `text` alone means own text; `text` with a named preset is ignored (the preset wins)."""
    slugs = {preset_slug(p): p for p in presets}
    slugs[OWN_SLUG] = OWN_TEXT
    preset, text, notes = None, None, []
    if "preset" in params:
        raw = str(params["preset"]).strip().lower()
        if raw in slugs:
            preset = slugs[raw]
        else:
            notes.append(f"The link's prompt preset `{md_escape(raw, 40)}` is unknown, so it was ignored.")
    if "text" in params:
        if preset in (None, OWN_TEXT):
            preset, text = OWN_TEXT, str(params["text"])
        else:
            notes.append(f"The link named the {preset} preset and a text: showing the preset.")
    return preset, text, notes


def prompt_to_params(preset: str, text: str) -> dict[str, str]:
    p = {"preset": preset_slug(preset)}
    if preset == OWN_TEXT:
        p["text"] = text[:MAX_LINK_TEXT]
    return p


def write_params(wanted: dict[str, str], owned) -> None:
    """Make the link hold `wanted` for the parameters in `owned` (others, e.g. embed, are kept)."""
    for key in owned:
        if key in wanted:
            if st.query_params.get(key) != wanted[key]:
                st.query_params[key] = wanted[key]
        elif key in st.query_params:
            del st.query_params[key]
