"""Streamlit building blocks shared by every page: header, chart with caption and downloads, URL
notices, the prompt box, and the shared sidebar (link to this view, presenter mode, download format)."""
from __future__ import annotations

import streamlit as st

from app import export, urlstate
from app.text import md_escape

PROMPT_PARAMS = urlstate.PROMPT_PARAMS

# Query parameters every page understands (Streamlit's embed options, presenter mode); never reported
# as unknown.
STREAMLIT_PARAMS = {"embed", "embed_options", "present"}
IMAGE_FORMATS = ("png", "svg")
K_FORMAT, K_PRESENT, K_CHART_SEQ = "chart_image_format", "presenter_mode", "_chart_seq"
K_PAGE = "_page_url_path"          # the page of this run (streamlit_app.py), for the guided tour


def page_header(title: str, lead: str, try_this: str | None = None) -> None:
    """Title, the lead sentence, the "try this" action and, from the guided tour, why it matters."""
    from app import tour
    st.title(title)
    st.markdown(lead)
    if try_this:
        st.caption(f"**Try this:** {try_this}")
    stop = tour.stop_for(st.session_state.get(K_PAGE, ""))
    if stop is not None:
        st.caption(f"**Why it matters:** {stop.why}")


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


def plotly_config(image_format: str = "png") -> dict:
    """The modebar's camera button downloads the chart as PNG (2x) or SVG, as the sidebar says."""
    fmt = image_format if image_format in IMAGE_FORMATS else "png"
    return {"displaylogo": False, "toImageButtonOptions": {"format": fmt, "scale": 2 if fmt == "png" else 1}}


def chart(fig, caption: str, alt: str, key: str | None = None, **kwargs):
    """A plotly figure in the theme's colours, with a caption saying what to look at and its data as CSV.
    The image download (PNG or SVG) is the camera button of the chart's toolbar."""
    ss = st.session_state
    if ss.get(K_PRESENT):                     # presenter mode: larger type (a copy: figures may be shared)
        import plotly.graph_objects as go
        fig = go.Figure(fig).update_layout(font_size=17)
    out = st.plotly_chart(fig, config=plotly_config(ss.get(K_FORMAT, "png")), alt=alt, key=key, **kwargs)
    st.caption(caption)
    seq = ss[K_CHART_SEQ] = ss.get(K_CHART_SEQ, 0) + 1
    stem = export.file_stem(alt)
    st.download_button("Chart data (CSV)", data=lambda: export.figure_frame(fig).to_csv(index=False),
                       file_name=f"{stem}.csv", mime="text/csv", key=f"csv_{key or stem}_{seq}",
                       on_click="ignore", type="tertiary", icon=":material/download:",
                       help="the numbers behind this chart; the camera in the chart's toolbar saves the picture")
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
    """Preset picker + text box, both bound to the link (`preset`, `text`); returns a validated
    app.live.Prompt, or None after showing why."""
    from app.live import DEFAULT_PRESET, PRESETS, Prompt, live, prepare_prompt
    lv = live()
    ss = st.session_state
    names = list(PRESETS) + [urlstate.OWN_TEXT]
    preset_key, own_key = f"{key}_preset", f"{key}_text_{urlstate.OWN_TEXT}"
    if f"_{key}_link_read" not in ss:              # a session's first visit: the link sets the prompt
        ss[f"_{key}_link_read"] = True
        preset, text, notes = urlstate.prompt_from_params(st.query_params, PRESETS)
        for note in notes:
            st.info(note, icon=":material/link_off:")
        if preset is not None:
            ss[preset_key] = preset
        if text is not None:
            ss[own_key] = text
    ss.setdefault(preset_key, DEFAULT_PRESET)
    preset = st.segmented_control("Prompt", names, key=preset_key) or DEFAULT_PRESET
    text_key = f"{key}_text_{preset}"
    ss.setdefault(text_key, PRESETS.get(preset, ""))
    text = st.text_area("Text the live model reads", key=text_key, height=80, max_chars=None,
                        placeholder="Type a sentence, some code, numbers…")
    urlstate.write_params(urlstate.prompt_to_params(preset, text or ""), urlstate.PROMPT_PARAMS)
    result = prepare_prompt(text, lv.tokenizer)
    if isinstance(result, str):
        st.info(result, icon=":material/edit_note:")
        return None
    for note in result.notices:
        st.caption(f":material/content_cut: {note}")
    assert isinstance(result, Prompt)
    return result


# ---- the shared sidebar (streamlit_app.py) ------------------------------------------------------------

_TRUE = {"1", "true", "on", "yes"}

# Presenter mode: static CSS written by us (no user text). Large type, the page's controls hidden (the
# link already fixed the view), each chart one screen tall with the page snapping from chart to chart.
PRESENTER_CSS = """
<style>
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p,
[data-testid="stMain"] [data-testid="stMarkdownContainer"] li { font-size: 1.45rem !important; line-height: 1.5; }
[data-testid="stMain"] [data-testid="stCaptionContainer"] p { font-size: 1.2rem !important; }
[data-testid="stMain"] h1 { font-size: 3.8rem !important; }
[data-testid="stMain"] h2, [data-testid="stMain"] h3 { font-size: 2.2rem !important; }
[data-testid="stMain"] [data-testid="stMetricValue"] { font-size: 3rem !important; }
[data-testid="stMain"] :is([data-testid="stSlider"], [data-testid="stSelectSlider"], [data-testid="stSelectbox"],
  [data-testid="stMultiSelect"], [data-testid="stTextArea"], [data-testid="stTextInput"],
  [data-testid="stNumberInput"], [data-testid="stRadio"], [data-testid="stCheckbox"],
  [data-testid="stButtonGroup"], [data-testid="stButton"], [data-testid="stDownloadButton"],
  [data-testid="stPageLink"]) { display: none !important; }
[data-testid="stMain"] { scroll-snap-type: y proximity; }
[data-testid="stMain"] [data-testid="stPlotlyChart"] {
  min-height: 86vh; display: flex; flex-direction: column; justify-content: center; scroll-snap-align: start; }
</style>
"""


def _share_link() -> str | None:
    base = st.context.url
    if not base:
        return None
    from urllib.parse import urlencode
    params = st.query_params.to_dict()
    return base + ("?" + urlencode(params) if params else "")


def sidebar_controls() -> None:
    """Presenter mode (link flag `present=1`) and the image format of chart downloads. Call before
    the page runs, inside `with st.sidebar`."""
    ss = st.session_state
    if K_PRESENT not in ss:
        ss[K_PRESENT] = str(st.query_params.get("present", "")).strip().lower() in _TRUE
    st.toggle("Presenter mode", key=K_PRESENT,
              help="large type, the page's controls hidden, one chart per screen: set the view up first, "
                   "then switch it on (the link keeps it: present=1)")
    if ss[K_PRESENT]:
        st.markdown(PRESENTER_CSS, unsafe_allow_html=True)
        if st.query_params.get("present") != "1":
            st.query_params["present"] = "1"
    elif "present" in st.query_params:
        del st.query_params["present"]
    ss.setdefault(K_FORMAT, "png")
    st.segmented_control("Chart downloads", IMAGE_FORMATS, key=K_FORMAT, format_func=str.upper,
                         help="what the camera button in each chart's toolbar saves; every chart also offers "
                              "its data as CSV below its caption")
    ss[K_CHART_SEQ] = 0


def glossary_lookup() -> None:
    """A term's definition from any page, without leaving it (the Glossary page has them all)."""
    from app.glossary import TERMS
    with st.popover("Look up a term", icon=":material/menu_book:", width="stretch"):
        names = {t.term: t for t in TERMS}
        picked = st.selectbox("Term", list(names), index=None, key="glossary_lookup",
                              placeholder="expert, top-k, KDA, MXFP4…")
        if picked:
            term = names[picked]
            st.markdown(term.short)
            st.page_link("views/glossary.py", label="More in the glossary", icon=":material/arrow_forward:",
                         query_params={"term": term.slug})


def share_box(container) -> None:
    """'Link to this view' with a copy button, and the embed recipe; fill after the page has run, when
    the link holds every control's value."""
    link = _share_link()
    if link is None:                            # no browser (AppTest): nothing to share
        return
    with container:
        st.markdown("**Link to this view**")
        st.code(link, language=None, wrap_lines=True)
        st.caption("The copy icon at its right copies it; it reopens this page with the same prompt and "
                   "settings.")
        embed = link + ("&" if "?" in link else "?") + "embed=true"
        with st.expander("Embed in a lesson"):
            st.code(f'<iframe src="{embed}" width="100%" height="900" style="border:0"></iframe>',
                    language="html", wrap_lines=True)
            st.caption("`embed=true` hides the sidebar and menu; add `&present=1` for large type.")
