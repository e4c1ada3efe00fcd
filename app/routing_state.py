"""The Routing explorer's view in the link and in the session: parse and validate the URL's view
parameters (clamping out-of-range values and saying so), write the view back, and the session-state
callbacks of views/routing.py. The parsing is pure; the rest is thin Streamlit glue."""
from __future__ import annotations

import re
from collections.abc import Mapping

import streamlit as st

from app.routing import COLOURINGS, MAX_LISTED, MAX_TOP_K, SCOPES, Rerouting, expert_from_selection
from app.live import PRESETS
from app.text import md_escape
from app.urlstate import OWN_TEXT, PROMPT_PARAMS, prompt_from_params, prompt_to_params, write_params
from model.config import K3Config

# ---- the link ---------------------------------------------------------------------------------------

URL_KEYS = ("token", "layer", "k", "bias", "dense", "ko", "force", "scope", "colour", "expert")
LINK_KEYS = frozenset(URL_KEYS) | PROMPT_PARAMS        # the prompt's are read and written by ui.prompt_input
_INT = re.compile(r"^[+-]?\d{1,9}$")
_TRUE, _FALSE = {"1", "true", "on", "yes"}, {"0", "false", "off", "no"}


def _shown(value: str) -> str:
    return md_escape(value, 40)


def parse_params(params: Mapping[str, str], cfg: K3Config) -> tuple[dict, list[str]]:
    """Validate the link's view parameters: (the values that can be used, notices for the page).
    Out-of-range numbers are clamped and say so; junk is ignored and says so."""
    E, last = cfg.n_routed_experts, cfg.num_layers - 1
    out, notes = {}, []

    def integer(name, lo, hi, what):
        raw = str(params[name]).strip()
        if not _INT.match(raw):
            notes.append(f"The link's {what} `{_shown(raw)}` is not a whole number, so it was ignored.")
            return None
        v = int(raw)
        if v < lo or v > hi:
            c = min(max(v, lo), hi)
            notes.append(f"The link asked for {what} {v}, outside {lo}–{hi}: showing {c} instead.")
            return c
        return v

    def flag(name, what):
        raw = str(params[name]).strip().lower()
        if raw in _TRUE:
            return True
        if raw in _FALSE:
            return False
        notes.append(f"The link's {what} setting `{_shown(raw)}` is not on/off, so it was ignored.")
        return None

    def experts(name, what):
        items = [x.strip() for x in str(params[name]).split(",") if x.strip()]
        good, junk, outside = [], [], []
        for x in items:
            if not _INT.match(x):
                junk.append(x)
            elif not 0 <= int(x) < E:
                outside.append(x)
            elif int(x) not in good:
                good.append(int(x))
        if junk:
            notes.append(f"The link's {what} list had entries that are not expert ids "
                         f"({_shown(', '.join(junk[:5]))}): ignored.")
        if outside:
            notes.append(f"The link's {what} list named experts outside 0–{E - 1} "
                         f"({_shown(', '.join(outside[:5]))}): ignored.")
        if len(good) > MAX_LISTED:
            notes.append(f"The link's {what} list was cut to its first {MAX_LISTED} experts.")
            good = good[:MAX_LISTED]
        return good

    preset, text, prompt_notes = prompt_from_params(params, PRESETS)
    notes += prompt_notes
    if preset is not None:
        out["preset"] = preset
    if text is not None:
        out["text"] = text
    if "token" in params:
        raw = str(params["token"]).strip()
        if _INT.match(raw):
            out["token"] = int(raw)          # clamped against the prompt's length by clamp_token
        else:
            notes.append(f"The link's token `{_shown(raw)}` is not a whole number, so it was ignored.")
    for name, lo, hi, what in (("layer", 0, last, "layer"), ("k", 1, MAX_TOP_K, "top-k"),
                               ("expert", 0, E - 1, "expert")):
        if name in params and (v := integer(name, lo, hi, what)) is not None:
            out[name] = v
    for name, what in (("bias", "balancing-bias"), ("dense", "dense")):
        if name in params and (v := flag(name, what)) is not None:
            out[name] = v
    for name, what in (("ko", "knocked-out"), ("force", "forced")):
        if name in params:
            out[name] = experts(name, what)
    for name, allowed, what in (("scope", SCOPES, "scope"), ("colour", COLOURINGS, "colouring")):
        if name in params:
            raw = str(params[name]).strip().lower()
            if raw in allowed:
                out[name] = raw
            else:
                notes.append(f"The link's {what} `{_shown(raw)}` is not one of "
                             f"{', '.join(allowed)}, so it was ignored.")
    return out, notes


def clamp_token(token: int | None, n_tokens: int) -> tuple[int, str | None]:
    """A token index inside the prompt (default: the last token), with a notice when it moved."""
    if token is None:
        return n_tokens - 1, None
    if 0 <= token < n_tokens:
        return token, None
    c = min(max(token, 0), n_tokens - 1)
    return c, (f"The link asked for token {token}, but the prompt has tokens 0–{n_tokens - 1}: "
               f"showing token {c}.")


def to_params(view: Mapping) -> dict[str, str]:
    """The URL parameters of a view (defaults left out, so links stay short)."""
    p = {"layer": str(view["layer"]), "token": str(view["token"])}
    p.update(prompt_to_params(view["preset"], view.get("text", "")))
    s: Rerouting = view["settings"]
    if s.top_k != 16:
        p["k"] = str(s.top_k)
    if not s.use_bias:
        p["bias"] = "off"
    if s.dense:
        p["dense"] = "on"
    if s.knocked_out:
        p["ko"] = ",".join(map(str, s.knocked_out))
    if s.forced:
        p["force"] = ",".join(map(str, s.forced))
    if s.scope != "from":
        p["scope"] = s.scope
    if view.get("colour", "probability") != "probability":
        p["colour"] = view["colour"]
    if view.get("expert") is not None:
        p["expert"] = str(view["expert"])
    return p



# ---- session state and the link (Streamlit glue for views/routing.py) ------------------------------

K_TOKEN, K_LAYER, K_K, K_BIAS, K_DENSE = "routing_token", "routing_layer", "routing_k", "routing_bias", "routing_dense"
K_KO, K_FORCE, K_SCOPE, K_COLOUR = "routing_ko", "routing_force", "routing_scope", "routing_colour"
K_EXPERT, K_GRID, K_PLAY = "routing_expert", "routing_grid", "routing_play"
DEFAULT_LAYER = 46
_PENDING = "routing_pending"
_DEFAULTS = {K_LAYER: DEFAULT_LAYER, K_K: 16, K_BIAS: True, K_DENSE: False, K_KO: [], K_FORCE: [],
             K_SCOPE: "from", K_COLOUR: "probability", K_PLAY: False}
_FROM_URL = {"layer": K_LAYER, "k": K_K, "bias": K_BIAS, "dense": K_DENSE, "ko": K_KO, "force": K_FORCE,
             "scope": K_SCOPE, "colour": K_COLOUR, "expert": K_EXPERT}


def start_state(cfg: K3Config) -> list[str]:
    """Apply changes queued by the last run (play), read the link on the session's first visit, and
    give every control its default. Returns the link's notices (first visit only)."""
    ss = st.session_state
    for key, value in ss.pop(_PENDING, {}).items():
        ss[key] = value
    notes = []
    if not ss.get("routing_url_read"):
        ss["routing_url_read"] = True
        link = {k: v for k, v in st.query_params.to_dict().items() if k not in PROMPT_PARAMS}   # ui.prompt_input's
        values, notes = parse_params(link, cfg)
        for param, key in _FROM_URL.items():
            if param in values:
                ss[key] = values[param]
        ss["routing_token_url"] = values.get("token")
    for key, value in _DEFAULTS.items():
        if key not in ss:
            ss[key] = list(value) if isinstance(value, list) else value
    return notes


def place_token(ids) -> str | None:
    """Keep the token chip's value inside the prompt (a new prompt starts at its last token); a
    notice when the link's token was clamped."""
    ss = st.session_state
    n_tokens, ids = len(ids), tuple(ids)
    new_prompt = ss.get("routing_prompt_ids") not in (None, ids)
    ss["routing_prompt_ids"] = ids
    from_url = ss.pop("routing_token_url", None)
    if from_url is not None:
        token, note = clamp_token(from_url, n_tokens)
    else:
        current = None if new_prompt else ss.get(K_TOKEN)
        if current is None and not new_prompt:           # chip deselected: keep the previous token
            current = ss.get("routing_token_last")
        token, note = clamp_token(current, n_tokens)[0], None
    ss[K_TOKEN] = token
    return note


def queue(key: str, value) -> None:
    """Set a control's value at the start of the next run (a widget cannot change after it is drawn)."""
    st.session_state.setdefault(_PENDING, {})[key] = value


def take_click() -> None:
    """A new click on the grid selects that expert for the panel."""
    ss = st.session_state
    clicked = expert_from_selection(ss.get(K_GRID))
    if clicked != ss.get("routing_grid_seen"):
        ss["routing_grid_seen"] = clicked
        if clicked is not None:
            ss[K_EXPERT] = clicked


def step_layer(delta: int, last: int) -> None:
    ss = st.session_state
    ss[K_LAYER] = min(max(ss.get(K_LAYER, DEFAULT_LAYER) + delta, 0), last)


def on_play(last: int) -> None:
    ss = st.session_state
    if ss.get(K_PLAY) and ss.get(K_LAYER, 0) >= last:
        ss[K_LAYER] = 1                                    # start over from the first MoE layer


def reset_routing() -> None:
    ss = st.session_state
    for key in (K_K, K_BIAS, K_DENSE, K_KO, K_FORCE, K_SCOPE):
        value = _DEFAULTS[key]
        ss[key] = list(value) if isinstance(value, list) else value


def knock_out(expert: int) -> None:
    ss = st.session_state
    ss[K_KO] = sorted(set(ss.get(K_KO, [])) | {expert})
    ss[K_FORCE] = [e for e in ss.get(K_FORCE, []) if e != expert]


def force(expert: int) -> None:
    ss = st.session_state
    ss[K_FORCE] = [e for e in ss.get(K_FORCE, []) if e != expert] + [expert]
    ss[K_KO] = [e for e in ss.get(K_KO, []) if e != expert]


def restore(expert: int) -> None:
    ss = st.session_state
    ss[K_KO] = [e for e in ss.get(K_KO, []) if e != expert]
    ss[K_FORCE] = [e for e in ss.get(K_FORCE, []) if e != expert]


def write_url(view: Mapping) -> None:
    """Write the view into the link (only this page's parameters; others such as embed are kept)."""
    write_params(to_params(view), URL_KEYS)
