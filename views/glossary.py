"""Glossary: every term the pages use, defined in a sentence or two and linked to the page that shows it live."""
import streamlit as st

from app import ui
from app.glossary import MAX_QUERY, TERMS, Term, by_slug, search
from app.navigation import PAGES
from app.text import md_escape

K_QUERY = "glossary_q"
ui.ignore_unknown_params({"term", "q"})
ui.page_header(
    "Glossary",
    "The terms the pages use, from *token* to *MXFP4*, each defined in a sentence or two and linked to the page "
    "where the live model shows it working.",
    "type “bias” to find the terms about load balancing, or share one definition by adding `?term=mxfp4` "
    "to this page's address.",
)
pages = {p.url_path: p for p in PAGES}


def show(term: Term) -> None:
    st.subheader(term.term, anchor=term.slug)
    st.markdown(term.short)
    if term.more:
        st.markdown(term.more)
    spec = pages.get(term.page) if term.page else None
    if spec is not None:
        st.page_link(spec.path, label=f"See it live: {spec.title}", icon=":material/arrow_forward:")
    st.caption(f"Link to this term: `?term={term.slug}` after this page's address.")


# ---- the link: one term first -----------------------------------------------------------------------------
raw_term = st.query_params.get("term")
linked = by_slug(raw_term) if raw_term is not None else None
if raw_term is not None and linked is None:
    st.info(f"The link asks for the term “{md_escape(raw_term, 40)}”, which this glossary does not have; "
            "search for it below instead.", icon=":material/link_off:")
    del st.query_params["term"]
if linked is not None:
    with st.container(border=True):
        st.badge("The term your link points to", icon=":material/link:", color="blue")
        show(linked)

# ---- search -----------------------------------------------------------------------------------------------
if K_QUERY not in st.session_state:
    raw_q = st.query_params.get("q") or ""
    if len(raw_q) > MAX_QUERY:
        st.info(f"The link's search text was cut to its first {MAX_QUERY} characters.", icon=":material/content_cut:")
    st.session_state[K_QUERY] = raw_q[:MAX_QUERY]
query = st.text_input("Search the glossary", key=K_QUERY, max_chars=MAX_QUERY,
                      placeholder="a word from a term or its definition, e.g. latent, cache, 448")
if query.strip():
    st.query_params["q"] = query
elif "q" in st.query_params:
    del st.query_params["q"]

matches = search(query)
if not matches:
    st.info(f"No term matches “{md_escape(query, 60)}”. Try a shorter word, or clear the box to see all "
            f"{len(TERMS)} terms.", icon=":material/search_off:")
elif query.strip():
    st.caption(f"{len(matches)} of {len(TERMS)} terms match “{md_escape(query, 60)}”.")
else:                                   # the whole list: an index first, each entry jumps to its term
    st.markdown(" · ".join(f"[{t.term}](#{t.slug})" for t in TERMS))
for term in matches:
    if term is not linked:            # already shown first, above
        with st.container(border=True):
            show(term)
