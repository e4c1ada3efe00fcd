"""Claims: every claim docs/REFERENCES.md lists, quoted from its article, beside the value the code computes, a
verdict (one per part where a claim's parts fare differently) and where to look it up in the K3 report."""
import pandas as pd
import streamlit as st

from app import live as lv_mod
from app import state, ui
from app.charts.claims import evidence_spec, verdict_spec
from app.claims import cached_checks
from app.claims_data import (
    LEVEL_MEANING,
    LEVELS,
    SOURCE,
    VERDICT_COLOURS,
    VERDICT_ICONS,
    VERDICTS,
    evidence_table,
    parse_claim,
    quote_markdown,
    verdict_slug,
)
from app.navigation import PAGES
from app.text import md_escape


class ClaimNumber(state.Control):
    """?claim=6 or ?claim=claim-6 (the anchor's name): one claim shown alone."""

    def parse(self, raw):
        number, why = parse_claim(raw)
        if why:
            return None, (f"The link asks for claim “{md_escape(raw, 40)}”: {why}. Showing every claim instead.")
        return number, None


view = state.page(
    ClaimNumber("claim", None, "claim"),
    state.Choices("verdict", [], "verdict filter",                  # nothing picked: every claim
                  options=tuple(verdict_slug(v) for v in VERDICTS), key="claims_verdicts"),
)
ui.page_header(
    "Claims, checked",
    "Fifteen claims about Kimi K3 from two public articles, each quoted from its article and set beside the value "
    "this app's code computes now (from the accounting, the live model or the cost model) and a verdict: **holds**, "
    "**holds with a caveat**, **does not hold** or **cannot be checked here**; a claim whose parts fare differently "
    "gets a verdict per part.",
    "filter to \"does not hold\", then follow the link under claim 12 to the decode step it times, in milliseconds; "
    "a teacher can share one claim with `?claim=6` or `#claim-6` at the end of this page's address.",
)
lv = lv_mod.live()
pages = {p.url_path: p for p in PAGES}

with st.spinner("Checking every claim against the accounting, the live model and the cost model…"):
    prompt = lv_mod.PRESETS[lv_mod.DEFAULT_PRESET]
    ids = tuple(lv.tokenizer.encode(prompt))[: lv_mod.MAX_TOKENS]
    checks = cached_checks(ids)
st.caption(f"Claims quoted from {SOURCE}. The live checks run on the preset prompt “{md_escape(prompt, 120)}”; "
           "the full-scale numbers come from K3's published config.")

# ---- the link: one claim, or a verdict filter ----------------------------------------------------------
only = view["claim"]
counts = pd.Series([sum(c.verdict == v for c in checks) for v in VERDICTS], index=list(VERDICTS))
# a pill shows every claim with that verdict on the whole claim or on one of its parts: count those
matching = {v: sum(c.matches({v}) for c in checks) for v in VERDICTS}
by_slug = {verdict_slug(v): v for v in VERDICTS}
picked = [by_slug[v] for v in view.draw(
    st.pills, "verdict", "Show only the claims whose verdict (or a part's) is", list(by_slug), selection_mode="multi",
    required=False, format_func=lambda v: f"{by_slug[v]} ({matching[by_slug[v]]})", disabled=only is not None,
    help="Pick one or more verdicts; with none picked, every claim is shown.")]
listed = [c for c in checks if not picked or c.matches(picked)]
c1, c2 = st.columns([2, 3])
with c1:
    ui.vega_chart(verdict_spec(counts, st.context.theme.type),
                  "How the claims fare, one verdict per claim (a split claim's summary): the counts follow from the "
                  "computed values below.",
                  alt="Bar chart of the number of claims with each verdict.", key="claims_counts")
with c2:
    table = pd.DataFrame({"#": [c.claim.number for c in listed], "claim": [c.claim.title for c in listed],
                          "verdict": [c.verdict for c in listed]})
    ui.table(table)
    if picked:
        st.caption(f"{len(listed)} of {len(checks)} claims, filtered by the verdicts picked above (a split claim is "
                   "listed when one of its parts has one).")

if only is not None:
    st.info(f"Showing claim {only} only, as the link asks.", icon=":material/link:")
    st.button("Show every claim", key="claims_all", on_click=view.set, args=("claim", None))
    shown = [c for c in checks if c.claim.number == only]
else:
    shown = listed

# ---- one section per claim -----------------------------------------------------------------------------
for c in shown:
    n = c.claim.number
    st.subheader(f"Claim {n}: {c.claim.title}", anchor=f"claim-{n}", divider="gray")
    st.markdown(quote_markdown(c.claim))
    left, right = st.columns([3, 2])
    with left:
        st.markdown(f"**Computed now:** {c.computed}")
        if c.claim.cite:
            st.caption(f"Look it up: {c.claim.cite} (arXiv 2607.24653 v2).")
        spec = pages.get(c.claim.page)
        if spec is not None:
            where = f", section “{c.claim.where}”" if c.claim.where else ""
            st.page_link(spec.path, label=f"See it on the page “{spec.title}”{where}", icon=":material/arrow_forward:")
    with right:
        st.badge(c.verdict, icon=VERDICT_ICONS[c.verdict], color=VERDICT_COLOURS[c.verdict])
        st.markdown(c.why)
        for part in c.parts:
            st.badge(f"{part.label}: {part.verdict}", icon=VERDICT_ICONS[part.verdict],
                     color=VERDICT_COLOURS[part.verdict])
            st.markdown(part.why)
    st.caption(f"Link to this claim: `?claim={n}` or `#claim-{n}` after this page's address.")

# ---- evidence --------------------------------------------------------------------------------------------
st.subheader("How strong is the evidence behind each component?", anchor="evidence")
ev = evidence_table(checks)
ui.vega_chart(evidence_spec(ev, LEVELS, st.context.theme.type),
              "Each of K3's new components by the strength of the published evidence for it (docs/REFERENCES.md): "
              + "; ".join(f"{level}, {LEVEL_MEANING[level]}" for level in reversed(LEVELS))
              + ". Labels list the claims on this page about the component; hover for the sources.",
              alt="Chart placing six K3 components at evidence levels self-cited, mixed or high.", key="claims_evidence",
              table=lambda: ev)
ui.table(ev)
