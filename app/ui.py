"""Streamlit building blocks shared by every page: header, chart with caption and downloads, URL
notices, the prompt box, the shared sidebar (link to this view, presenter mode) and the browser guards."""
from __future__ import annotations

import weakref
from pathlib import Path

import streamlit as st

from app import export, state
from app.prompts import DEFAULT_PRESET
from app.text import clean_text

K_PRESENT = "presenter_mode"
K_PROMPT = "_k3_prompt"              # the prompt this session's page read last (app.live.Prompt): a class's next step
# The page icon, served by the app itself: a Material icon as page_icon makes every browser fetch it from a
# public font host (a third-party request per student that a school's network sees).
ICON = Path(__file__).resolve().parent.parent / "assets" / "icon.png"
K_PAGE = state.K_PAGE              # the page of this run (streamlit_app.py), for the guided tour

# ---- the prompt and the token: one owner each, shared by every page ---------------------------------------

OWN_TEXT, OWN_SLUG = "Your own text", "own"
MAX_LINK_TEXT = 2000                # characters of typed text written into a link (= app.live.MAX_CHARS)


def _preset_slugs() -> dict[str, str]:
    from app.prompts import PRESETS
    return {name.lower(): name for name in PRESETS} | {OWN_SLUG: OWN_TEXT}


PROMPT = (state.Choice("preset", DEFAULT_PRESET.lower(), "prompt preset", shared=True, key="prompt_preset",
                       options=tuple(_preset_slugs())),
          state.Text("text", "", "typed text", shared=True, key="prompt_text", most=MAX_LINK_TEXT))
TOKEN = state.Index("token", None, "token", shared=True)
state.carry(*PROMPT, TOKEN)        # every page's link carries them, so a reload anywhere keeps the sentence
# the help of every page's token chips
TOKEN_HELP = ("␣ is a space, ↵ a line break; a token can be part of a word, or part of a character: the tokenizer "
              "works on UTF-8 bytes, where a character such as é takes two bytes and 日 three, and they can fall into "
              "different tokens. 日[1/3] is a token holding the first of 日's three bytes. A repeated token shows which "
              "occurrence it is: the (2) is the second \"the\".")


def instance_banner(where) -> None:
    """At the top of every page (streamlit_app.py, after the page ran): which live instance the app runs, when it
    is not the trained one. A page that loaded the model knows why from the loader; any other page asks
    app.assets, which checks the same files without loading torch."""
    from app import assets, warm
    from app.text import md_escape
    live = warm.live_module()
    if live is not None and live.LOADED.is_set():
        lv = live.live()                                    # loaded: a cache hit
        problem, fatal = ("" if lv.pretrained else lv.note), False
    else:
        problem, fatal = assets.live_instance_problem()
    if not problem:
        return
    if fatal:
        where.error("**The live model is unavailable**, so the pages that run it cannot show it (the others "
                    f"work as usual). Reason: {md_escape(problem, 300)}", icon=":material/error:")
    else:
        where.warning("**The app is running on a seeded random instance, not the trained one**: the shipped "
                      "checkpoint could not be loaded, so routing shows no learned structure. "
                      f"Reason: {md_escape(problem, 300)}", icon=":material/warning:")


def page_header(title: str, lead: str, try_this: str | None = None) -> None:
    """Title, the lead sentence, the "try this" action and, from the guided tour, why it matters."""
    from app import tour
    st.title(title)
    st.markdown(lead)
    if try_this:
        st.caption(f"**Try this:** {try_this}")
    here = st.session_state.get(K_PAGE, "")
    stop = tour.stop_for(here)
    if stop is not None:
        st.caption(f"**Why it matters:** {stop.why}")
    if stop is not None and stop == tour.TOUR[0] and (nxt := tour.next_stop(here)) is not None:
        from app.navigation import PAGES
        path = {p.url_path: p.path for p in PAGES}[nxt.url_path]
        st.page_link(path, label=f"Start the guided tour: {len(tour.TOUR)} stops in the sidebar's order, first "
                     f"{nxt.title}", icon=":material/tour:")


def tour_footer(url_path: str) -> None:
    """The guided tour's next stop, at the foot of every page."""
    from app import tour
    from app.navigation import PAGES
    here, nxt = tour.position(url_path), tour.next_stop(url_path)
    if here is None:
        return
    st.divider()
    path = {p.url_path: p.path for p in PAGES}
    if nxt is not None:
        st.page_link(path[nxt.url_path], label=f"Next on the guided tour (stop {here[0] + 1} of {here[1]}): {nxt.title}",
                     icon=":material/arrow_forward:")
    else:
        first = tour.TOUR[0]
        st.page_link(path[first.url_path], label=f"End of the guided tour ({here[1]} stops): back to "
                     f"{first.title}", icon=":material/replay:")


# Presenter mode's larger type for a Vega-Lite chart.
PRESENTER_VEGA = {"axis": {"labelFontSize": 15, "titleFontSize": 16}, "legend": {"labelFontSize": 15, "titleFontSize": 15},
                  "title": {"fontSize": 18}, "text": {"fontSize": 14}, "header": {"labelFontSize": 16}}


def presenter_spec(spec: dict) -> dict:
    """A copy of a Vega-Lite spec for presenter mode: PRESENTER_VEGA's larger type merged into the spec's own
    config one level down (a spec's own axis or title settings are kept), and, for a chart that stretches to
    the column's width, its height 1.35x, as plotly charts once did (a fixed-size chart such as the expert
    grid keeps its proportions). Specs may be cached and shared: the input is not changed."""
    config = dict(spec.get("config", {}))
    for part, values in PRESENTER_VEGA.items():
        config[part] = config.get(part, {}) | values
    out = spec | {"config": config}
    if spec.get("width") == "container" and isinstance(spec.get("height"), (int, float)):
        out["height"] = int(spec["height"] * 1.35)
    if "vconcat" in spec:                                            # stacked panels: each stretching one grows
        out["vconcat"] = [p | {"height": int(p["height"] * 1.35)} if stretches(p) and isinstance(p.get("height"), (int, float))
                          else p for p in spec["vconcat"]]
    return out


def stretches(spec: dict) -> bool:
    """Whether a Vega-Lite chart fills the column's width: its width is "container", or it is a stack of panels
    that all are (Streamlit then sets the stack's width and each panel's)."""
    if spec.get("width") == "container":
        return True
    panels = spec.get("vconcat")
    return bool(panels) and all(isinstance(p, dict) and p.get("width") == "container" for p in panels)


def vega_chart(spec: dict, caption: str, alt: str, key: str, table=None, **kwargs):
    """A Vega-Lite spec (datasets inside it) with a caption and its data as CSV;
    the image download is the PNG button of the chart's toolbar (Streamlit's, on hover). `table`: a function giving
    the CSV's rows where the datasets are not the numbers (an image). Extra arguments (on_select,
    selection_mode) go to st.vega_lite_chart, whose return value this returns."""
    if st.session_state.get(K_PRESENT):
        spec = presenter_spec(spec)
    out = st.vega_lite_chart(arrow_spec(spec), width="stretch" if stretches(spec) else "content", key=key,
                             alt=alt, **kwargs)
    st.caption(caption)
    _csv_button(table or (lambda: export.spec_frame(spec)), alt, key,
                "the numbers behind this chart; the chart's toolbar (on hover) saves the picture as PNG")
    return out


# A chart's data frames as the Arrow bytes Streamlit sends, converted once per frame: a spec kept beside a cached run
# (app.live.derived) or in a cache is drawn again on every rerun that shows it, and Streamlit would convert its
# frames again each time (~40 ms of the server's ~160 ms on a Routing explorer top-k key, py-spy). A frame is
# read-only once drawn; the memo goes with the frame.
_ARROW: dict[int, tuple[tuple, bytes]] = {}


def arrow_bytes(df) -> bytes:
    """What st.vega_lite_chart sends for the data frame `df` (Streamlit's own conversion), computed once per frame
    object while it lives (its shape and column names are checked again on each use)."""
    from streamlit import dataframe_util
    key, shape = id(df), (df.shape, tuple(map(str, df.columns)))
    hit = _ARROW.get(key)
    if hit is not None and hit[0] == shape:
        return hit[1]
    data = dataframe_util.convert_anything_to_arrow_bytes(df)
    if hit is None:
        weakref.finalize(df, _ARROW.pop, key, None)            # before the id can be another object's
    _ARROW[key] = (shape, data)
    return data


def arrow_spec(spec: dict) -> dict:
    """A copy of a Vega-Lite spec whose named datasets that are data frames are their Arrow bytes (arrow_bytes),
    which st.vega_lite_chart sends as they are."""
    import pandas as pd
    datasets = spec.get("datasets")
    if not datasets:
        return spec
    return spec | {"datasets": {name: arrow_bytes(d) if isinstance(d, pd.DataFrame) else d
                                for name, d in datasets.items()}}


def _csv_button(table, alt: str, key: str | None, help: str) -> None:
    stem = export.file_stem(alt)
    st.download_button("Chart data (CSV)", data=lambda: table().to_csv(index=False), file_name=f"{stem}.csv",
                       mime="text/csv", key=f"csv_{key or stem}", on_click="ignore", type="tertiary",
                       icon=":material/download:", help=help)


# Text shown as it is (line breaks, indentation), monospace, in a box: st.text with this static style. Not st.code,
# whose syntax highlighter (every Prism grammar, ~1.5 MB) the browser loads and evaluates on each page load that
# shows one: ~0.4-0.5 s of a Model card reload on this machine (a CPU profile of the reload).
PLAIN_CSS = """
<style id="k3-plain">
[class*="st-key-k3-plain"] [data-testid="stText"] span { font-family: "Source Code Pro", ui-monospace, monospace;
  font-size: 0.875rem; line-height: 1.5; }
</style>
"""


# st.text dedents its body and strips it (textwrap.dedent, str.strip): a leading invisible word joiner, which is
# neither, keeps the first line's indentation and so every line's.
VERBATIM = "\u2060"


def table(df, formats: dict | None = None) -> None:
    """A data frame as one Markdown table (app.text.md_table: every cell escaped, numbers aligned right),
    each cell written by app.text.cell_text with `formats` (column -> format spec or function). Not
    st.dataframe: its grid costs the browser ~0.35-0.45 s of each page load here (same-run reloads of the
    Model card 1.75 -> 1.41 s and the balancing lab 1.78 -> 1.31 s with its grids drawn as Markdown)."""
    st.markdown(table_markdown(df, formats))


def table_markdown(df, formats: dict | None = None) -> str:
    """What ui.table draws, as Markdown text (for a page that keeps it beside a cached run)."""
    from app.text import md_table, text_table
    shown, right = text_table(df, formats)
    return md_table(shown, right=right)


def plain_blocks(texts, key: str) -> None:
    """Each text verbatim (never parsed as Markdown or HTML), monospace, in its own bordered box."""
    st.html(PLAIN_CSS)
    for i, text in enumerate(texts):
        with st.container(border=True, key=f"k3-plain-{key}-{i}"):
            st.text(VERBATIM + text)


_K_TEXT_NOTES = "_k3_typed_text_notes"   # what cleaning the typed text changed, said once under the box
_K_KEPT_TEXT = "_k3_own_text_kept"       # the own text while a preset is shown: in the session, not the link


def _own_text_typed(view: state.View) -> None:
    """The text box changed: a text that is no preset's is the person's own (cleaned as a link's would be)."""
    from app.live import PRESETS
    text, notes = clean_text(st.session_state.get("prompt_text") or "", MAX_LINK_TEXT)
    st.session_state[_K_TEXT_NOTES] = notes
    match = next((name.lower() for name, preset in PRESETS.items() if preset == text), None)
    if match is None:
        view.set("preset", OWN_SLUG)
        view.set("text", text)
    else:
        view.set("preset", match)
        view.set("text", "")


def _preset_picked(view: state.View) -> None:
    """A preset clicked: the own text leaves the link (a shared link must not carry what was typed before) but
    stays in the session, so that clicking "Your own text" again brings it back."""
    if view["preset"] == OWN_SLUG:
        if not view["text"] and st.session_state.get(_K_KEPT_TEXT):
            view.set("text", st.session_state.pop(_K_KEPT_TEXT))
    elif view["text"]:
        st.session_state[_K_KEPT_TEXT] = view["text"]
        view.set("text", "")


def prompt_input(view: state.View):
    """Preset picker + text box, bound to the link (`preset`, `text`) and shared by every page; returns a
    validated app.live.Prompt, or None after showing why. The page declares ui.PROMPT among its controls."""
    from app.live import PRESETS, Prompt, live, prepare_prompt
    lv = live()
    slugs = _preset_slugs()
    if "text" in view.from_link and "preset" not in view.from_link:     # a text alone is the person's own
        view.set("preset", OWN_SLUG)
    elif "text" in view.from_link and view["preset"] != OWN_SLUG:
        state.notice(f"The link named the {slugs[view['preset']]} preset and a text: showing the preset.")
        view.set("text", "")
    preset = view.draw(st.segmented_control, "preset", "Prompt", list(slugs), format_func=slugs.get,
                       on_change=lambda: _preset_picked(view))
    text = view["text"] if preset == OWN_SLUG else PRESETS[slugs[preset]]
    st.session_state["prompt_text"] = text
    st.text_area("Text the live model reads", key="prompt_text", height=80, max_chars=None,
                 placeholder="Type a sentence, some code, numbers…", on_change=_own_text_typed, args=(view,))
    for note in st.session_state.pop(_K_TEXT_NOTES, None) or ():
        st.caption(f":material/content_cut: {note}")
    result = prepare_prompt(text, lv.tokenizer)
    if isinstance(result, str):
        st.info(result, icon=":material/edit_note:")
        return None
    for note in result.notices:
        st.caption(f":material/content_cut: {note}")
    assert isinstance(result, Prompt)
    st.session_state[K_PROMPT] = result
    if st.session_state.get(K_PRESENT):          # presenter mode hides the text box: the audience still reads the prompt
        plain_blocks([result.text], "prompt")
    return result


def token_index(view: state.View, ids, widget, label: str, *args, **kwargs) -> int:
    """The shared token (a position in the prompt, 0-based), drawn with the page's widget. A new prompt
    starts at its last token; a position the link asked for that the prompt lacks moves, with a notice."""
    store = state._store(state.SHARED)
    ids = tuple(ids)
    if store.get("_token_ids") not in (None, ids) and "token" not in view.from_link:
        store.pop("token", None)
    store["_token_ids"] = ids
    return view.draw(widget, "token", label, *args, options=range(len(ids)), default=len(ids) - 1, **kwargs)
