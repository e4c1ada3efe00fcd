"""AppTest of the Glossary page: every term listed with a stable anchor and a link to its live page, the
search box follows ?q= and writes it back, ?term=<slug> puts one term first, bad links get a notice."""
from app.glossary import TERMS, by_slug, search
from tests.conftest import outside_code
from tests.test_precision_pages import open_page as _open
from tests.test_precision_pages import param

PAGE = "views/glossary.py"


def open_page(params=None):
    return _open(PAGE, params)


def anchors(at):
    return [h.proto.anchor for h in at.subheader]


def notices(at):
    return " ".join(i.value for i in at.info)


def test_all_terms_then_search_filters_and_writes_the_link():
    at = open_page()
    assert at.title[0].value == "Glossary"
    assert anchors(at) == [t.slug for t in TERMS]
    live_links = [p for p in at.get("page_link") if p.proto.label.startswith("See it live")]
    assert len(live_links) == sum(t.page is not None for t in TERMS)
    box = at.text_input(key="glossary_q")
    box.set_value("mxfp4").run()
    assert not at.exception
    assert anchors(at) == [t.slug for t in search("mxfp4")] and anchors(at)[0] == "mxfp4"
    assert param(at, "q") == "mxfp4"
    at.text_input(key="glossary_q").set_value("zzzz").run()
    assert anchors(at) == [] and "zzzz" in notices(at)
    at.text_input(key="glossary_q").set_value("").run()
    assert anchors(at) == [t.slug for t in TERMS] and "q" not in at.query_params


def test_link_with_q_and_term_shows_that_term_first():
    at = open_page({"q": "cache", "term": "e4m3"})
    assert at.text_input(key="glossary_q").value == "cache"
    got = anchors(at)
    assert got[0] == "e4m3"                                     # the linked term first, even if it does not match
    assert got[1:] == [t.slug for t in search("cache") if t.slug != "e4m3"]
    assert len(got) == len(set(got))                           # each anchor once
    assert param(at, "term") == "e4m3" and param(at, "q") == "cache"
    assert by_slug("e4m3").short in [m.value for m in at.markdown]


def test_bad_links_get_a_notice_not_a_traceback():
    at = open_page({"term": "<b>nope</b>", "q": "<script>" + "😀" * 500})
    text = notices(at)
    assert "nope" in text and "<b>" not in outside_code(text)                # markup shown escaped, never as HTML
    assert "cut" in text                                       # the over-long search text was shortened
    assert "term" not in at.query_params
    assert anchors(at) == []                                   # nothing matches "<script>…"
    at = open_page({"term": "unknown"})
    assert "unknown" in notices(at)
    assert anchors(at) == [t.slug for t in TERMS]


def test_a_term_with_an_equation_shows_the_k3_reports_equation_and_section():
    at = open_page({"term": "situ-glu", "q": "situ"})
    captions = [c.value for c in at.caption]
    assert "Source: K3 report Eq. 12, sec 2.3.2." in captions
    assert "Source: K3 report Eq. 14, sec 2.3.3." not in captions      # QB's, not among the matches
    assert by_slug("qb").source == "K3 report Eq. 14, sec 2.3.3"
