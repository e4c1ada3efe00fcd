"""The guided tour and the glossary data (pure: no Streamlit)."""
import re

import pytest

from app.glossary import MAX_QUERY, TERMS, by_slug, search
from app.navigation import PAGES
from app.tour import TOUR, next_stop, position, stop_for

URLS = {p.url_path for p in PAGES}


# ---- tour ------------------------------------------------------------------------------------------------

def test_every_page_is_one_stop_with_its_navigation_title():
    assert sorted(s.url_path for s in TOUR) == sorted(URLS)           # each page exactly once, nothing else
    assert "glossary" in URLS
    titles = {p.url_path: p.title for p in PAGES}
    assert all(s.title == titles[s.url_path] for s in TOUR)
    assert TOUR[0].url_path == PAGES[0].url_path                      # the tour starts where the app opens


def test_why_notes_are_one_or_two_plain_sentences():
    for s in TOUR:
        assert 40 < len(s.why) < 400, s.url_path
        assert 1 <= len(re.findall(r"[.!?](?:\s|$)", s.why)) <= 2, s.url_path
        assert "<" not in s.why and "$" not in s.why
        assert not re.search(r"\b(revolutionary|cutting-edge|groundbreaking|unprecedented|game-changing)\b",
                             s.why, re.I)


def test_next_stop_chain_visits_every_stop_in_order():
    seen, stop = [TOUR[0].url_path], TOUR[0]
    while (stop := next_stop(stop.url_path)) is not None:
        seen.append(stop.url_path)
    assert seen == [s.url_path for s in TOUR]
    assert next_stop(TOUR[-1].url_path) is None


def test_position_and_stop_for():
    n = len(TOUR)
    assert [position(s.url_path) for s in TOUR] == [(i, n) for i in range(1, n + 1)]
    assert stop_for("routing").title == "Routing explorer"
    for bad in ("", "nope", "<script>", None, 3):
        assert stop_for(bad) is None and next_stop(bad) is None and position(bad) is None


# ---- glossary ----------------------------------------------------------------------------------------------

REQUIRED = ["token", "tokenizer", "expert", "routed-expert", "shared-expert", "router", "top-k", "sparsity",
            "active-parameters", "latent", "situ-glu", "swiglu", "kda", "delta-rule", "chunked-form", "mla",
            "kv-cache", "attnres", "block", "qb", "balancing-bias", "sign-rule", "load", "mxfp4", "mxfp8",
            "e2m1", "e4m3", "e8m0", "block-of-32", "expert-parallelism", "all-to-all", "mtp",
            "mixture-of-agents"]


def test_terms_cover_the_brief_with_unique_url_safe_slugs():
    slugs = [t.slug for t in TERMS]
    assert len(set(slugs)) == len(slugs)
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", s) for s in slugs)
    assert len({t.term.casefold() for t in TERMS}) == len(TERMS)
    assert set(REQUIRED) <= set(slugs)


def test_every_term_links_to_a_real_page_or_none():
    for t in TERMS:
        assert t.page is None or t.page in URLS, (t.slug, t.page)
        assert t.page != "glossary"


def test_definitions_are_short_plain_markdown():
    for t in TERMS:
        assert t.short and len(t.short) < 400, t.slug
        assert len(t.more) < 500, t.slug
        for text in (t.short, t.more):
            assert "$" not in text and "<" not in text and "\n" not in text, t.slug


def test_definitions_carry_the_architecture_numbers():
    assert "56" in by_slug("sparsity").short
    assert "3,584" in by_slug("latent").short and "d/2" in by_slug("latent").short
    assert "100" in by_slug("situ-glu").short
    assert "4.25" in by_slug("mxfp4").short and "32" in by_slug("mxfp4").short
    assert "448" in by_slug("e4m3").short
    assert "576" in by_slug("kv-cache").short
    assert "0.5, 1, 1.5, 2, 3, 4, 6" in by_slug("e2m1").short
    assert "12" in by_slug("block").short and "8 blocks" in by_slug("block").short


def test_search_finds_mxfp4_by_name_and_by_a_definition_word():
    assert search("mxfp4")[0].slug == "mxfp4"                              # name matches rank first
    assert search("  MXFP4 ")[0].slug == "mxfp4"
    assert by_slug("mxfp4") in search("microscaling")
    assert by_slug("e4m3") in search("448")
    assert search("top k")[0].slug == "top-k"                              # hyphen read as a space
    assert [t.slug for t in search("delta rule")][0] == "delta-rule"
    assert set(search("cache")) >= {by_slug("kv-cache"), by_slug("mla"), by_slug("kda")}


def test_search_empty_gives_everything_and_misses_give_nothing():
    assert search("") == list(TERMS) and search("   \t") == list(TERMS)
    assert search("zzzz-not-a-term") == []


@pytest.mark.parametrize("odd", ["<script>alert(1)</script>", "\x00", "😀" * 1000, "a" * 100_000, "**[x](y)**",
                                 "\u202e\u0301", "ǅ ß ﬁ", "(", "\\", "%", ".*"])
def test_search_and_by_slug_take_any_input(odd):
    assert isinstance(search(odd), list)
    assert by_slug(odd) is None


def test_search_caps_the_query():
    long = "mxfp4 " + "x" * (MAX_QUERY * 10)
    assert search(long) == []                       # the cut query still holds the long word's start
    assert search("mxfp4" + " " * (MAX_QUERY * 10))[0].slug == "mxfp4"


def test_by_slug():
    assert by_slug("qb").term == "Quantile Balancing (QB)"
    assert by_slug(" MXFP4 ").slug == "mxfp4"
    assert by_slug("unknown") is None and by_slug(None) is None


def test_the_tour_follows_the_sidebar_and_the_first_page_starts_it():
    """The tour's order differed from the sidebar's and nothing on the first page started it."""
    assert [s.url_path for s in TOUR] == [p.url_path for p in PAGES]
    from tests.conftest import open_app_page
    at = open_app_page(PAGES[0].path)
    links = [el for el in at.get("page_link")]
    starts = [el for el in links if "Start the guided tour" in el.proto.label]
    assert len(starts) == 1 and starts[0].proto.label.endswith(TOUR[1].title)
