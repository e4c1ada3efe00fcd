"""K3 Explorer: entry point. Navigation over views/, shared sidebar (link to this view, presenter mode,
download format)."""
import streamlit as st

from app import ui
from app.navigation import PAGES

presenting = str(st.query_params.get("present", "")).strip().lower() in {"1", "true", "on", "yes"}
st.set_page_config(page_title="K3 Explorer", page_icon=":material/hub:", layout="wide",
                   initial_sidebar_state="collapsed" if presenting else "auto")

sections: dict[str, list] = {}
for spec in PAGES:
    sections.setdefault(spec.section, []).append(
        st.Page(spec.path, title=spec.title, icon=spec.icon, url_path=spec.url_path,
                default=spec is PAGES[0]))
page = st.navigation(sections)
here = next((p.url_path for p in PAGES if p.title == page.title), "")
st.session_state[ui.K_PAGE] = here

with st.sidebar:
    st.caption("A tiny live instance of Kimi K3's full architecture (93 layers, 896 experts, top-16), "
               "and the accounting of the real 2.8T model. Not K3's weights.")
    ui.glossary_lookup()
    ui.sidebar_controls()
    share = st.container()
try:
    page.run()
finally:                    # also after a page's st.stop(): the link then holds what the page wrote
    ui.tour_footer(here)
    ui.share_box(share)
