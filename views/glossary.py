"""Glossary: every term the pages use, defined in a sentence or two and linked to the page that shows it live."""
import streamlit as st

from app import state, ui
from app.glossary import MAX_QUERY, TERMS, Term, by_slug, search
from app.navigation import PAGES
from app.text import md_escape


class TermSlug(state.Control):
    """?term=mxfp4: one term shown first."""

    def parse(self, raw):
        if by_slug(raw) is None:
            return None, (f"The link asks for the term “{md_escape(raw, 40)}”, which this glossary does not have; "
                          "search for it below instead.")
        return by_slug(raw).slug, None


view = state.page(TermSlug("term", None, "term"), state.Text("q", "", "search text", most=MAX_QUERY, key="glossary_q"))
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
    if term.source:
        st.caption(f"Source: {term.source}.")
    spec = pages.get(term.page) if term.page else None
    if spec is not None:
        st.page_link(spec.path, label=f"See it live: {spec.title}", icon=":material/arrow_forward:")
    st.caption(f"Link to this term: `?term={term.slug}` after this page's address.")


# ---- the link: one term first -----------------------------------------------------------------------------
linked = by_slug(view["term"]) if view["term"] else None
if linked is not None:
    with st.container(border=True):
        st.badge("The term your link points to", icon=":material/link:", color="blue")
        show(linked)

# ---- search -----------------------------------------------------------------------------------------------
query = view.draw(st.text_input, "q", "Search the glossary", max_chars=MAX_QUERY,
                  placeholder="a word from a term or its definition, e.g. latent, cache, 448")

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
