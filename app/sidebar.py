"""The shared sidebar (presenter mode, the glossary look-up, the link to this view) and what every page installs
in the browser (the Back/Forward and half-character guards, the stale style). streamlit_app.py calls these before
the page runs; static HTML, CSS and scripts of ours, never with user text in them."""
from __future__ import annotations

import streamlit as st

from app.ui import K_PRESENT

_TRUE = {"1", "true", "on", "yes"}

# Presenter mode: static CSS written by us (no user text). Large type, the page's controls hidden (the
# link already fixed the view), with the element boxes around them, so they leave no gaps. Charts are
# made taller by ui.presenter_spec (a figure height), never by restyling plotly's container: plotly
# measures that container, and a flex or min-height box around it drew charts without their axes and
# legends. The controls it hides, each widget and the element box around it, are listed once:
_PRESENTER_HIDDEN = ", ".join(f'[data-testid="{t}"]' for t in (
    "stSlider", "stSelectSlider", "stSelectbox", "stMultiSelect", "stTextArea", "stTextInput", "stNumberInput",
    "stRadio", "stCheckbox", "stButtonGroup", "stButton", "stDownloadButton", "stPageLink"))
# A metric's label wraps in presenter mode: in its large type a label such as "Training tokens in the corpus"
# was cut to "Training tokens in t…" at a classroom projector's 1024 px.
PRESENTER_CSS = """
<style id="k3-presenter">
[data-testid="stMain"] [data-testid="stMarkdownContainer"] p,
[data-testid="stMain"] [data-testid="stMarkdownContainer"] li { font-size: 1.45rem !important; line-height: 1.5; }
[data-testid="stMain"] [data-testid="stCaptionContainer"] p { font-size: 1.2rem !important; }
[data-testid="stMain"] [data-testid="stMarkdownContainer"] :is(th, td) { font-size: 1.25rem !important; }
[data-testid="stMain"] [class*="st-key-k3-plain"] [data-testid="stText"] span { font-size: 1.3rem !important; }
[data-testid="stMain"] h1 { font-size: 3.8rem !important; }
[data-testid="stMain"] h2, [data-testid="stMain"] h3 { font-size: 2.2rem !important; }
[data-testid="stMain"] [data-testid="stMetricValue"],
[data-testid="stMain"] [data-testid="stMetricValue"] [data-testid="stMarkdownContainer"] p { font-size: 3rem !important;
  line-height: 1.25; }
[data-testid="stMain"] [data-testid="stMetricLabel"],
[data-testid="stMain"] [data-testid="stMetricLabel"] * { white-space: normal !important; overflow: visible !important;
  text-overflow: clip !important; height: auto !important; }
[data-testid="stMain"] :is(@HIDDEN@) { display: none !important; }
[data-testid="stMain"] [data-testid="stElementContainer"]:has(> :is(@HIDDEN@)) { display: none !important; }
</style>
""".replace("@HIDDEN@", _PRESENTER_HIDDEN)


def presenting_in_link() -> bool:
    return str(st.query_params.get("present", "")).strip().lower() in _TRUE


def presenter_style() -> None:
    """Presenter mode's style sheet, when it is on (also in an embedded page, which has no sidebar)."""
    ss = st.session_state
    if K_PRESENT not in ss:
        ss[K_PRESENT] = presenting_in_link()
    if ss[K_PRESENT]:
        st.html(PRESENTER_CSS)


def sidebar_controls() -> None:
    """Presenter mode (link flag `present=1`). Call before
    the page runs, inside `with st.sidebar`."""
    ss = st.session_state
    if K_PRESENT not in ss:
        ss[K_PRESENT] = presenting_in_link()
    st.toggle("Presenter mode", key=K_PRESENT,
              help="large type, the page's controls hidden, taller charts: set the view up first, "
                   "then switch it on (the link keeps it: present=1)")
    if ss[K_PRESENT]:
        st.html(PRESENTER_CSS)
        if st.query_params.get("present") != "1":
            st.query_params["present"] = "1"
    elif "present" in st.query_params:
        del st.query_params["present"]


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


# The link box: a static snippet of ours (no user text is ever put into it: the script reads the address
# bar itself and shows it as plain text), so it is always the current link, also after a fragment rerun
# or a slider move that redraws nothing else.
SHARE_HTML = """
<div id="k3-share" style="font-size:0.85rem">
  <div style="font-weight:600;margin-bottom:0.3rem">Link to this view</div>
  <div style="display:flex;gap:0.4rem">
    <input id="k3-share-link" readonly aria-label="Link to this view"
      style="flex:1;min-width:0;font:inherit;font-family:monospace;font-size:0.75rem;padding:0.3rem;color:inherit;
             background:transparent;border:1px solid rgba(128,128,128,0.45);border-radius:0.4rem">
    <button id="k3-share-copy" type="button"
      style="font:inherit;padding:0.2rem 0.6rem;color:inherit;background:transparent;cursor:pointer;
             border:1px solid rgba(128,128,128,0.45);border-radius:0.4rem">Copy</button>
  </div>
  <div style="opacity:0.7;margin-top:0.3rem">It reopens this page with the same prompt and settings.</div>
  <details style="margin-top:0.4rem"><summary>Embed in a lesson</summary>
    <textarea id="k3-share-embed" readonly rows="4" aria-label="Embed code"
      style="width:100%;font-family:monospace;font-size:0.72rem;color:inherit;background:transparent;
             border:1px solid rgba(128,128,128,0.45);border-radius:0.4rem"></textarea>
    <div style="opacity:0.7">embed=true shows the page alone (no navigation, no sidebar); add &amp;present=1 for
      large type.</div>
  </details>
</div>
<script>
(function () {
  const links = () => {
    const url = new URL(window.location.href);
    url.searchParams.delete("embed");
    // a class's code and secrets belong to one person's link, not to a view someone shares
    for (const own of ["class", "seat", "teacher"]) { url.searchParams.delete(own); }
    const embed = new URL(url.href);
    embed.searchParams.set("embed", "true");
    // no "<" in this script: the HTML sanitiser drops a script whose text holds one before a letter
    const lt = String.fromCharCode(60);
    return [url.href, lt + 'iframe src="' + embed.href.replaceAll('"', "%22") +
            '" width="100%" height="900" style="border:0">' + lt + '/iframe>'];
  };
  const show = () => {
    const box = document.getElementById("k3-share-link");
    const code = document.getElementById("k3-share-embed");
    if (!box) { return; }
    const [link, iframe] = links();
    if (box.value !== link) { box.value = link; }
    if (code && code.value !== iframe) { code.value = iframe; }
  };
  if (window.k3ShareTimer) { clearInterval(window.k3ShareTimer); }
  window.k3ShareTimer = setInterval(show, 400);
  show();
  document.addEventListener("click", (event) => {
    if (!event.target || event.target.id !== "k3-share-copy") { return; }
    show();
    const box = document.getElementById("k3-share-link");
    const done = () => { event.target.textContent = "Copied"; setTimeout(() => event.target.textContent = "Copy", 1500); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(box.value).then(done);
    } else {
      box.select(); document.execCommand("copy"); done();
    }
  }, {once: false});
})();
</script>
"""


# Back and Forward move between pages, never through nothing. Streamlit pushes a history entry for every
# change of a link parameter (two for a control that writes two), all on the same page and none of which it
# re-reads on Back: Back then showed the same view under another address, or nothing at all. A same-page
# entry therefore replaces the current one (the address still holds the whole view), and a page change keeps
# its own entry, which Streamlit does follow.
#
# Text boxes never send half a character. A lone UTF-16 surrogate (half of a pasted emoji) cannot be UTF-8
# encoded: Streamlit's server refuses the whole message that carries it and closes the connection, and the
# browser, which resends the same widget state on reconnecting, loses the session until a reload. This
# listener runs before React's (capture phase, on the document) and puts U+FFFD in place of any half, with
# the prototype's value setter, so React sees the change and keeps the mended text as the box's value. Static
# (no user text in it); installed once per browser tab.
BROWSER_GUARDS_HTML = """
<script>
(function () {
  if (window.k3BrowserGuards) { return; }
  window.k3BrowserGuards = true;
  const push = history.pushState.bind(history);
  const replace = history.replaceState.bind(history);
  // The address of the page as its last run left it. A switch the server starts (st.switch_page) writes the new
  // page's link values while the address still shows the old page, and only then pushes the new page: the old
  // page's entry is put back to this address first, so Back finds it as it was.
  // Taken once the app has stayed idle for a moment: between the runs of a switch (the run that writes the new
  // page's values, then the new page's run) the app is idle for an instant with the new values in the old address.
  let settled = location.href;
  let pending = null;
  const idle = () => {
    const app = document.querySelector('[data-testid="stApp"]');
    return app !== null && app.getAttribute("data-test-script-state") === "notRunning";
  };
  const watch = () => {
    if (pending !== null) { clearTimeout(pending); pending = null; }
    if (!idle()) { return; }
    const href = location.href;
    pending = setTimeout(() => {
      pending = null;
      if (!idle()) { return; }
      if (location.href === href) { settled = href; } else { watch(); }   // the address moved: wait again
    }, 150);
  };
  new MutationObserver(watch).observe(document, {subtree: true, attributes: true,
                                                 attributeFilter: ["data-test-script-state"]});
  history.pushState = function (state, title, url) {
    try {
      if (url !== undefined && url !== null) {
        const to = new URL(url, location.href);
        if (to.pathname === location.pathname) { return replace(state, title, url); }
        if (new URL(settled).pathname === location.pathname && settled !== location.href) {
          replace(history.state, "", settled);
        }
      }
    } catch (e) { /* a URL it cannot read: left to the browser */ }
    return push(state, title, url);
  };
  const mend = (s) => {
    if (typeof s.toWellFormed === "function") { return s.toWellFormed(); }
    let out = "";
    for (let i = 0; i !== s.length; i += 1) {
      const c = s.charCodeAt(i), next = s.charCodeAt(i + 1);
      const high = c >= 0xD800 && c <= 0xDBFF, low = c >= 0xDC00 && c <= 0xDFFF;
      if (high && next >= 0xDC00 && next <= 0xDFFF) { out += s[i] + s[i + 1]; i += 1; }
      else { out += high || low ? "\\uFFFD" : s[i]; }
    }
    return out;
  };
  document.addEventListener("input", (event) => {
    const el = event.target;
    if (!el || (el.tagName !== "TEXTAREA" && el.tagName !== "INPUT") || typeof el.value !== "string") { return; }
    const mended = mend(el.value);
    if (mended === el.value) { return; }
    const proto = el.tagName === "TEXTAREA" ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
    const at = el.selectionStart;
    Object.getOwnPropertyDescriptor(proto, "value").set.call(el, mended);
    try { el.setSelectionRange(at, at); } catch (e) { /* not every input has a selection */ }
  }, true);
})();
</script>
"""


# Nothing stale looks current. While a run computes, Streamlit marks what it will replace as stale and fades it
# to a third over about a second, so for that second a number from the previous setting reads as the answer to
# the new one. Here the old result goes dim in one step once a run has taken 0.3 s (a quick answer replaces it
# without a flicker) and comes back at once; the run's own spinner says what is being computed. A chart's
# toolbar (PNG, fullscreen) opens over the chart's own top corner, not above it, where it covered the heading or
# the control over the chart.
STALE_CSS = """
<style id="k3-stale">
[data-stale="true"] { opacity: 0.25 !important; transition: opacity 0.1s linear 0.3s !important; }
[data-stale="false"] { transition: none !important; }
[data-testid="stElementContainer"]:has(.vega-embed) [data-testid="stElementToolbar"] { top: 0 !important; }
</style>
"""


def browser_guards() -> None:
    """The two guards above (same-page history entries replaced; half characters mended) and the stale style, on
    every page."""
    st.html(BROWSER_GUARDS_HTML + STALE_CSS, unsafe_allow_javascript=True)


def share_box() -> None:
    """'Link to this view' with a copy button, and the embed recipe (in the sidebar)."""
    st.html(SHARE_HTML, unsafe_allow_javascript=True)
