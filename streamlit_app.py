"""K3 Explorer: entry point. Navigation over views/, shared sidebar (link to this view, presenter mode,
download format). Embedded (`?embed=true`), a page shows alone: no navigation and no sidebar."""
import streamlit as st

from app import state, ui, warm
from app.navigation import PAGES

ss = st.session_state
# The sidebar's first state is fixed once per session: set_page_config re-applies a changed value, so
# switching presenter mode off must not flip it back (that collapsed the sidebar).
ss.setdefault("_sidebar_start", "collapsed" if ui.presenting_in_link() else "auto")
st.set_page_config(page_title="K3 Explorer", page_icon=":material/hub:", layout="wide",
                   initial_sidebar_state=ss["_sidebar_start"])

embedded = bool(st.context.is_embedded)
sections: dict[str, list] = {}
for spec in PAGES:
    sections.setdefault(spec.section, []).append(
        st.Page(spec.path, title=spec.title, icon=spec.icon, url_path=spec.url_path,
                default=spec is PAGES[0]))
page = st.navigation(sections, position="hidden" if embedded else "sidebar", expanded=True)   # all pages listed
here = next((p.url_path for p in PAGES if p.title == page.title), "")
ss[ui.K_PAGE] = here

if embedded:
    ui.presenter_style()
else:
    with st.sidebar:
        st.caption("A tiny live instance of Kimi K3's full architecture (93 layers, 896 experts, top-16), "
                   "and the accounting of the real 2.8T model. Not K3's weights.")
        ui.glossary_lookup()
        ui.sidebar_controls()
        ui.share_box()
state.notice_slot(st.container())          # link notices, above the title on every page
try:
    with warm.page_run():
        page.run()
finally:                    # also after a page's st.stop()
    state.notice_slot(None)     # a fragment's rerun writes its notices in place
    if not embedded:
        ui.tour_footer(here)
    warm.start()            # once per process: the other pages' default views, computed in the background
    warm.model_loaded()     # once the model is loaded: the held-out routing, which the Routing explorer waits for
