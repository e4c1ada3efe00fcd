"""Every control's state, in the session and in the link, through one mechanism.

A page declares its controls once, at its top:

    view = state.page(state.Int("layer", 46, "layer", lo=0, hi=92), state.Flag("bias", True, "balancing bias"), ...)

and draws each with the Streamlit widget it wants, once; the widget's range comes from the declaration (a
slider's lo and hi, a Choice's options), so it is not written twice:

    layer = view.draw(st.slider, "layer", "Layer")

A range that depends on the page now (the prompt's tokens) is given where the control is drawn.

A control (app/controls.py) is a link parameter with a default, a range and the notice that a bad link value
gets. The declaration registers the parameter (a link parameter no control declares is reported and dropped), reads
the link when it holds a value this page did not write itself (a shared link, a link from another page,
a reload), and writes every value back into the link as the person changes it (defaults are left out, so
links stay short).

Why two keys per control: Streamlit deletes a widget's state when a run does not draw the widget (the
page stopped early on an empty prompt, a control is hidden for a mode). The value therefore lives in a
store that only this module writes (`_STORE`), and the widget's own key is seeded from it before every
draw and copied back by the widget's on_change callback. A control drawn inside an `st.fragment` works the
same way: its callback writes the store and the link before the fragment reruns.

The prompt and the token are shared by every page (one owner each): `prompt_input` and `token_index`.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import streamlit as st

from app.controls import FALSE_WORDS, TRUE_WORDS, Control, Index, Int, Ints, as_typed, link_text, shown

# Re-exported ("X as X"), with the classes above: a page declares every control as state.Int(...), state.Flag(...)
# beside state.page(...), from one import.
from app.controls import Choice as Choice
from app.controls import Choices as Choices
from app.controls import Flag as Flag
from app.controls import Text as Text

_STORE = "_k3_state"            # {namespace: {param: value}}
_WRITTEN = "_k3_link_written"   # {namespace: {param: the string this page last put in the link}}
SHARED = "shared"               # the namespace of the controls every page shares (prompt, token)
K_PAGE = "_page_url_path"       # the page of this run (streamlit_app.py sets it)
K_PAINTED = "_k3_painted"        # set once a session's first run has ended (streamlit_app.py)
# Parameters of the app itself (embedding, presenter mode, the lesson a student follows and its step: app/lessons_ui.py),
# understood on every page; no page may declare a control of the same name.
APP_PARAMS = frozenset({"embed", "embed_options", "present", "lesson", "lesson_step", "class", "seat", "teacher"})
# the values Streamlit's front end reads for them (embed_options may be given several times)
EMBED_OPTIONS = frozenset({"show_toolbar", "show_padding", "disable_scrolling", "light_theme", "dark_theme",
                           "hide_loading_screen", "show_loading_screen_v1", "show_loading_screen_v2"})


# ---- the store --------------------------------------------------------------------------------------------

def _store(ns: str) -> dict:
    return st.session_state.setdefault(_STORE, {}).setdefault(ns, {})


def _written(ns: str) -> dict:
    return st.session_state.setdefault(_WRITTEN, {}).setdefault(ns, {})


def _write_link(ns: str, c: Control, value, page_ns: str) -> None:
    """Put a control's value in the link (or take it out when it is the default)."""
    if not c.link:
        return
    text = link_text(c, value)
    written = _written(page_ns)
    if text is None:
        if c.param in st.query_params:
            del st.query_params[c.param]
        written.pop(c.param, None)
    elif st.query_params.get(c.param) != text:
        if c.param not in st.query_params and not st.session_state.get(K_PAINTED):
            # A session's first run (a full load: a pasted link, a reload, an address typed) adds no parameter:
            # the browser would push the longer address as a history entry of its own before the page's history
            # guard (app/sidebar.py) is in place, and Back would stay on the page. The link it came with
            # reproduces the view already; the next run adds the rest in place.
            return
        st.query_params[c.param] = text
        written[c.param] = text
    else:
        written[c.param] = text


_LAST_INPUT = "_k3_last_input"     # the widget key whose own input caused the latest run
_slot = threading.local()          # per session's script thread: where this run's link notices go


def notice_slot(container) -> None:
    """Put this run's link notices in `container` (streamlit_app.py: one at the top of every page, so a
    notice sits in the same place whichever page it is on and wherever the page declares its controls)."""
    _slot.container = container


def _in_fragment_rerun() -> bool:
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx
    ctx = get_script_run_ctx()
    return bool(ctx is not None and ctx.fragment_ids_this_run)


def notice(text: str) -> None:
    """A notice about a link value: in the page's notice slot, or here when there is none (a page run on
    its own, as the tests do; a fragment's rerun, which may write only inside the fragment)."""
    where = getattr(_slot, "container", None)
    (where if where is not None and not _in_fragment_rerun() else st).info(text, icon=":material/link_off:")


# ---- a page's controls ----------------------------------------------------------------------------------

@dataclass
class View:
    """The controls of the page running now; `page()` makes it."""
    ns: str
    prefix: str
    controls: dict[str, Control]
    from_link: set = field(default_factory=set)      # params whose value the link set in this run
    notes: list = field(default_factory=list)

    # -- reading and writing values --
    def _ns(self, c: Control) -> str:
        return SHARED if c.shared else self.ns

    def key(self, param: str) -> str:
        """The widget key of a control (stable: tests and callbacks use it)."""
        return self.controls[param].key or f"{self.prefix}_{param}"

    def __getitem__(self, param: str):
        c = self.controls[param]
        value = _store(self._ns(c)).get(param, c.default)
        return list(value) if isinstance(value, list) else value

    def get(self, param: str, default=None):
        c = self.controls[param]
        return _store(self._ns(c)).get(param, default)

    def set(self, param: str, value) -> None:
        """Change a control's value (from a button's callback, or before its widget is drawn)."""
        c = self.controls[param]
        value = c.normal(value) if value is not None else None
        _store(self._ns(c))[param] = value
        _write_link(self._ns(c), c, value, self.ns)

    def reset(self, *params: str) -> None:
        for p in params:
            c = self.controls[p]
            self.set(p, list(c.default) if isinstance(c.default, list) else c.default)

    def _changed(self, param: str, required: bool) -> None:
        """on_change of a control's widget: copy the widget's value into the store and the link."""
        key = self.key(param)
        value = st.session_state.get(key)
        if value is None and required:                   # a single-choice chip clicked again: keep it
            st.session_state[key] = self[param]
            return
        self.set(param, list(value) if isinstance(value, (list, tuple)) and not isinstance(value, str) else value)

    # -- drawing --
    def draw(self, widget: Callable, param: str, label: str, *args, options: Sequence | None = None,
             default=None, required: bool = True, on_change: Callable | None = None, follow: bool = False,
             **kwargs):
        """Draw `widget(label, *args, key=..., **kwargs)` bound to the control `param`. `options` is
        the range the value must lie in now (e.g. the prompt's tokens); a value outside moves to the
        nearest, with a notice when the link had asked for it. `default` overrides the declared one (e.g.
        the last token). With `follow`, an unset control shows `default` without storing it (nor putting it
        in the link), so it follows `default` from run to run until the person sets it (e.g. the expert
        panel, which shows the token's first expert of each layer until an expert is picked). Returns the
        control's value."""
        c = self.controls[param]
        if not args:
            args = c.widget_range(getattr(widget, "__name__", ""))
        store = _store(self._ns(c))
        value = store.get(param)
        following = follow and value is None
        if value is None:
            value = c.default if default is None else default
        fitted = c.fit(value, options)
        if fitted != value and param in self.from_link:
            notice(f"The link asked for {c.label} {shown(value)}, which is not available here: showing "
                   f"{shown(fitted)} instead.")
        if not following and (store.get(param) != fitted or st.query_params.get(c.param) is None):
            self.set(param, fitted)
        key = self.key(param)
        want = list(fitted) if isinstance(fitted, list) else fitted
        # A value the script writes is pushed to the browser's widget. Pushed back to the widget whose own
        # input caused this run, it undid key presses a person had made on a slider since that commit (a
        # press was lost): that widget already shows its value, so it is left alone. Every other widget
        # gets the value (after new text a re-drawn slider would otherwise show its minimum).
        own_input = st.session_state.get(_LAST_INPUT) == key
        if own_input:
            del st.session_state[_LAST_INPUT]                # good for this one run
        if not (own_input and st.session_state.get(key) == want):
            st.session_state[key] = want

        def changed():
            st.session_state[_LAST_INPUT] = key
            self._changed(param, required)
            if on_change is not None:
                on_change()

        widget(label, *args, key=key, on_change=changed, **kwargs)
        return fitted if following else self[param]

    def draw_number(self, param: str, label: str, value: int | None = None, hi: int | None = None,
                    **kwargs) -> int:
        """A whole number (an Int control) drawn as a text box that always shows the value the page uses: typed
        text is read as a link value is (clamped into range with the reason under the box, or ignored if it is
        not a whole number). Streamlit's number box kept `-3` or `99999` in a red box while the page showed
        another value, and read `abc` as 0 and `1e3` as 1. `value`: what an unset control shows, not stored
        (the panel follows the token's first expert until one is picked); `hi`: an upper end that depends on
        the page now. Returns the value."""
        c = self.controls[param]
        assert isinstance(c, (Int, Index)), param
        key, note_key = self.key(param), self.key(param) + "__note"

        def changed():
            typed, note = c.parse(st.session_state.get(key) or "", whose="Your", hi=hi)
            st.session_state[note_key] = note
            if typed is not None:
                self.set(param, typed)

        stored = self.get(param)
        if stored is not None and hi is not None and stored > hi:          # the range shrank under it
            self.set(param, hi)
        shown = self.get(param)
        shown = shown if shown is not None else (c.default if value is None else value)
        st.session_state[key] = str(shown)
        st.text_input(label, key=key, on_change=changed, **kwargs)
        note = st.session_state.pop(note_key, None)
        if note:
            st.caption(f":material/rule: {note}")
        return int(shown)

    def draw_ids(self, param: str, label: str, **kwargs) -> list[int]:
        """A list of whole numbers (an Ints control) drawn as a text box of comma-separated ids: one cheap
        element where a multiselect would carry all its options (896 experts) on every rerun. Typed text is
        read as a link value is, and what it had to drop is said under the box. Returns the list."""
        c = self.controls[param]
        assert isinstance(c, Ints), param
        key, note_key = self.key(param), self.key(param) + "__note"
        st.session_state[key] = ", ".join(map(str, self[param]))

        def changed():
            value, note = c.parse(st.session_state.get(key) or "", whose="Your")
            st.session_state[note_key] = note
            self.set(param, value)

        st.text_input(label, key=key, on_change=changed, **kwargs)
        note = st.session_state.pop(note_key, None)
        if note:
            st.caption(f":material/rule: {note}")
        return self[param]


def check_app_params() -> None:
    """The app's own link parameters get the notice a page's do when their value means nothing (once per value
    and page; streamlit_app.py, before the sidebar reads them). A bad `present` also leaves the link; `embed`
    and `embed_options` the browser read when it opened the page, so they stay, and the notice says what was
    made of them."""
    written = _written(st.session_state.get(K_PAGE, "") or "page")
    present = st.query_params.get("present")
    if present is not None and present != written.get("_app_present"):
        written["_app_present"] = present
        if present.strip().lower() not in TRUE_WORDS | FALSE_WORDS:
            notice(f"The link's presenter-mode setting {as_typed(present)} is not on/off, so it was ignored.")
            del st.query_params["present"]
    embed, options = _embed_params()
    if embed and embed[-1] != written.get("_app_embed"):
        written["_app_embed"] = embed[-1]
        if embed[-1].strip().lower() not in {"true", "false"}:
            notice(f"The link's embed setting {as_typed(embed[-1])} is not true or false: the page is shown "
                   f"{'alone' if st.context.is_embedded else 'with its navigation'}.")
    bad = [o for o in options if o not in EMBED_OPTIONS]
    if bad and ",".join(options) != written.get("_app_embed_options"):
        written["_app_embed_options"] = ",".join(options)
        notice(f"The link's embed options {', '.join(as_typed(o) for o in bad[:5])} are not known, so they were "
               f"ignored; the known ones are {', '.join(sorted(EMBED_OPTIONS))}.")


def _embed_params() -> tuple[list[str], list[str]]:
    """The link's `embed` and `embed_options` values, which st.query_params does not show (the browser reads
    them itself): from the query string this run was started with."""
    from urllib.parse import parse_qs

    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx
    ctx = get_script_run_ctx()
    qs = parse_qs(getattr(ctx, "query_string", "") or "", keep_blank_values=True)
    return qs.get("embed", []), qs.get("embed_options", [])


_CARRIED: list[Control] = []       # shared controls every page's link carries (app.ui: the prompt and the token)


def carried() -> tuple[Control, ...]:
    """The shared controls every page's link carries (registered by `carry`)."""
    return tuple(_CARRIED)


def forget_page(ns: str) -> None:
    """Forget the view a page last showed in this session (its own controls, not the shared prompt and token), so
    that its next run takes every value from the link or from its default: a lesson step opens its page with the
    step's view whole, not merged into the one the student left there."""
    st.session_state.get(_STORE, {}).pop(ns, None)
    st.session_state.get(_WRITTEN, {}).pop(ns, None)


def carry(*controls: Control) -> None:
    """Make every page's link carry these shared controls, whether the page draws them or not: a reload or a
    shared link of any page then keeps the person's sentence and token."""
    for c in controls:
        assert c.shared, c.param
        if all(c.param != k.param for k in _CARRIED):
            _CARRIED.append(c)


def page(*controls: Control, prefix: str | None = None) -> View:
    """Declare the page's controls: read the link, report and drop parameters no control declares, and
    write the current values back. Call once, at the top of a page. The shared controls of `carry` come along
    on every page."""
    declared = {c.param for c in controls}
    controls = (*controls, *(c for c in _CARRIED if c.param not in declared))
    ns = st.session_state.get(K_PAGE, "") or "page"
    view = View(ns, prefix or ns.replace("-", "_"), {c.param: c for c in controls})
    known = {c.param for c in controls if c.link} | APP_PARAMS
    unknown = [k for k in st.query_params.keys() if k not in known]
    if unknown:
        names = ", ".join(shown(k) for k in unknown[:5]) + (" …" if len(unknown) > 5 else "")
        notice(f"This page ignored link parameters it does not use: {names}.")
        for k in unknown:
            del st.query_params[k]
    written = _written(ns)
    for c in (c for c in controls if c.link):
        raw = st.query_params.get(c.param)
        if raw is not None and raw != written.get(c.param):      # a value this page did not write
            value, note = c.parse(raw)
            if note:
                notice(note)
            if value is None:                                     # ignored: out of the link too
                del st.query_params[c.param]
                written.pop(c.param, None)
                continue
            _store(view._ns(c))[c.param] = c.normal(value)
            view.from_link.add(c.param)
            written[c.param] = raw
            if note:                    # clamped or cleaned: the address bar shows what the page uses
                _write_link(view._ns(c), c, c.normal(value), ns)
    for c in controls:                                            # the link holds the current view
        value = _store(view._ns(c)).get(c.param)
        if value is not None and (c.param not in view.from_link or value != c.default):
            _write_link(view._ns(c), c, value, ns)
    return view
