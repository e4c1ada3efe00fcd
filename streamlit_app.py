"""K3 Explorer: entry point. Navigation over views/, shared sidebar."""
import streamlit as st

from app.navigation import PAGES

st.set_page_config(page_title="K3 Explorer", page_icon=":material/hub:", layout="wide")

sections: dict[str, list] = {}
for spec in PAGES:
    sections.setdefault(spec.section, []).append(
        st.Page(spec.path, title=spec.title, icon=spec.icon, url_path=spec.url_path,
                default=spec is PAGES[0]))
page = st.navigation(sections)

with st.sidebar:
    st.caption("A tiny live instance of Kimi K3's full architecture (93 layers, 896 experts, top-16), "
               "and the accounting of the real 2.8T model. Not K3's weights.")
page.run()
