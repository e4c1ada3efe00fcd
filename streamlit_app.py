"""K3 Explorer: entry point. Navigation over views/, the shared sidebar (the running lesson's panel, link to this
view, presenter mode), the instance banner and link notices above every page. Embedded (`?embed=true`), a page
shows alone: no navigation and no sidebar."""
import streamlit as st

from app import classes_ui, lesson_author_ui, lessons_ui, sidebar, state, ui, warm
from app.assets import AssetError, LiveUnavailable
from app.navigation import PAGES
from app.text import md_escape

ss = st.session_state
# The sidebar's first state is fixed once per session: set_page_config re-applies a changed value, so
# switching presenter mode off must not flip it back (that collapsed the sidebar).
ss.setdefault("_sidebar_start", "collapsed" if sidebar.presenting_in_link() else "auto")
st.set_page_config(page_title="K3 Explorer", page_icon=str(ui.ICON), layout="wide",
                   initial_sidebar_state=ss["_sidebar_start"])

embedded = bool(st.context.is_embedded)
sections: dict[str, list] = {}
for spec in PAGES:
    sections.setdefault(spec.section, []).append(
        st.Page(spec.path, title=spec.title, icon=spec.icon, url_path=spec.url_path,
                default=spec is PAGES[0]))
# all pages listed, except while a lesson runs: its panel comes below the navigation, in view only when that is short
page = st.navigation(sections, position="hidden" if embedded else "sidebar", expanded=not lessons_ui.in_lesson())
here = next((p.url_path for p in PAGES if p.title == page.title), "")
ss[ui.K_PAGE] = here

banner = st.container()                     # which live instance runs, when it is not the trained one
state.notice_slot(st.container())          # link notices, above the title on every page
state.check_app_params()
if embedded:
    sidebar.presenter_style()
    sidebar.browser_guards()
    if lessons_ui.in_link():        # the lesson's panel lives in the sidebar, which an embedded page has none of
        state.notice("An embedded view shows one page: a lesson runs in the full app, with its steps in the "
                     "sidebar, so this view leaves out `lesson` and `lesson_step`.")
else:
    with st.sidebar:
        classes_ui.follow_link(here)        # a student's seat or the teacher's key, before the lesson's panel
        lessons_ui.sidebar_panel(here)      # before the page runs: a lesson step resets the view the page reads
        lesson_author_ui.add_view_button(here)
        st.caption("A tiny live instance of Kimi K3's full architecture (93 layers, 896 experts, top-16), "
                   "and the accounting of the real 2.8T model. Not K3's weights.")
        sidebar.glossary_lookup()
        sidebar.sidebar_controls()
        sidebar.share_box()
        sidebar.browser_guards()
# A session's first page imports its libraries (and on a fresh server loads the model) before it draws anything:
# say so at once, in the place the page's own heading will take (an empty main area for seconds looked broken).
# The slot is there on every run (empty after the first), so the page's elements keep their places: a slot on the
# first run only moved every element by one on the second, and Streamlit drew each widget anew beside its stale
# copy until that run ended (two "N dense agents" sliders under load).
loading = st.empty()
first_paint = not ss.get(state.K_PAINTED)
if first_paint:
    loading.info(f"Opening {page.title}: the first page of a visit can take a few seconds…",
                 icon=":material/hourglass_top:")
try:
    with warm.page_run():
        page.run()
except AssetError as e:             # a file the page needs is missing or damaged: say which, not a traceback
    what = "runs the live model, which is unavailable" if isinstance(e, LiveUnavailable) else "needs a file that is unavailable"
    st.info(f"This page {what}: {md_escape(str(e), 300)}.", icon=":material/block:")
finally:                    # also after a page's st.stop()
    state.notice_slot(None)     # a fragment's rerun writes its notices in place
    if first_paint:
        loading.empty()
        ss[state.K_PAINTED] = True
    ui.instance_banner(banner)
    if not embedded:
        ui.tour_footer(here)
    warm.start()            # once per process: the other pages' default views, computed in the background
    warm.model_loaded()     # once the model is loaded: the held-out routing, which the Routing explorer waits for
