"""The project's documents: every document the code names is in the repository, every section, claim and
page it cites exists there, the Claims page's quotations match docs/REFERENCES.md and (when the original
articles are beside the checkout) are verbatim, and docs/ is written in the project's own words."""
import re
from pathlib import Path

import pytest

from app import claims as cl

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SEEDS = ROOT.parent / "shared" / "seeds"
SEED_FILES = {"mechanics": "000_f1ec70fc68389b0f.txt", "trillion": "002_61a6f9ff481cf13e.txt"}
SOURCE_DIRS = ("app", "model", "views", "tests", "bench")
DOC_NAME = re.compile(r"\b(?:docs/)?([A-Z][A-Z_]+\.md)\b")


def sources() -> list[Path]:
    files = [ROOT / "streamlit_app.py", ROOT / "README.md", *DOCS.glob("*.md")]
    for d in SOURCE_DIRS:
        files += sorted((ROOT / d).rglob("*.py"))
    return [f for f in files if f.exists() and f != Path(__file__).resolve()]   # this file cites on purpose


def text_of(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_the_four_design_documents_exist():
    for name in ("ARCHITECTURE.md", "APP.md", "REFERENCES.md", "TESTING.md"):
        assert (DOCS / name).is_file(), name


def test_every_document_a_source_file_names_exists():
    missing = {}
    for f in sources():
        for name in set(DOC_NAME.findall(text_of(f))):
            if not ((DOCS / name).is_file() or (ROOT / name).is_file()):
                missing.setdefault(name, []).append(str(f.relative_to(ROOT)))
    assert not missing, missing


def _numbers(spec: str) -> set[int]:
    """'2, 3 and 8' -> {2, 3, 8}; '1-8' -> {1..8}; '8-10' -> {8, 9, 10}."""
    out = set()
    for a, b in re.findall(r"(\d+)(?:\s*[-–]\s*(\d+))?", spec):
        out |= set(range(int(a), int(b) + 1)) if b else {int(a)}
    return out


CITES = {
    "ARCHITECTURE.md": re.compile(r"ARCHITECTURE\.md,?\s*(?:sections?|sec\.?|§)?\s*(\d+(?:\s*(?:,|and|[-–])\s*\d+)*)"),
    "REFERENCES.md": re.compile(r"REFERENCES\.md,?\s*claims?\s*(\d+(?:\s*(?:,|and|[-–])\s*\d+)*)"),
    "APP.md": re.compile(r"APP\.md,?\s*pages?\s*(\d+(?:\s*(?:,|and|[-–])\s*\d+)*)"),
}


def sections_of(name: str) -> set[int]:
    text = text_of(DOCS / name)
    if name == "ARCHITECTURE.md":
        return {int(n) for n in re.findall(r"^## (\d+)\. ", text, re.M)}
    if name == "REFERENCES.md":
        return {int(n) for n in re.findall(r"^\| (\d+) \| ", text, re.M)}
    return {int(n) for n in re.findall(r"^(\d+)\. \*\*", text, re.M)}


def test_every_cited_section_claim_and_page_exists():
    known = {name: sections_of(name) for name in CITES}
    assert known["ARCHITECTURE.md"] == set(range(0, 10))
    assert known["REFERENCES.md"] == set(range(1, 16))
    assert known["APP.md"] == set(range(1, 13))
    bad = []
    for f in sources():
        for name, pattern in CITES.items():
            for spec in pattern.findall(text_of(f).replace("\n", " ")):
                for n in _numbers(spec):
                    if n not in known[name]:
                        bad.append((str(f.relative_to(ROOT)), name, n))
    assert not bad, bad


def test_the_citation_checker_can_fail():
    assert _numbers("2, 3 and 8") == {2, 3, 8} and _numbers("1-8") == set(range(1, 9))
    assert CITES["ARCHITECTURE.md"].findall("see ARCHITECTURE.md section 12") == ["12"]
    assert 12 not in sections_of("ARCHITECTURE.md")


def test_claims_page_names_both_articles_by_title():
    titles = [a.title for a in cl.ARTICLES.values()]
    assert titles == ["Kimi K3- Sparsity Mechanics, Multi-Tiered Token Compression, and MoE vs. "
                      "Mixture-of-Agents Paradigms", "Kimi K3 Goes Trillion-Scale With Sparse MoE Efficiency"]
    for t in titles:
        assert t in cl.SOURCE
        assert t in text_of(DOCS / "REFERENCES.md").replace("\n  ", " ")
    assert "REFERENCES.md" not in cl.SOURCE and "commonly stated" not in cl.SOURCE
    for c in cl.CLAIMS:
        md = cl.quote_markdown(c)
        for q in c.quotes:
            assert cl.ARTICLES[q.article].title in md


def test_claims_match_docs_references():
    """docs/REFERENCES.md lists each claim with the articles it comes from (A, B); app/claims.py agrees."""
    letter = {"A": "mechanics", "B": "trillion"}
    table = {int(n): {letter[x.strip()] for x in arts.split(",")}
             for n, arts in re.findall(r"^\| (\d+) \| ([AB](?:, [AB])*) \|", text_of(DOCS / "REFERENCES.md"), re.M)}
    assert sorted(table) == [c.number for c in cl.CLAIMS] == list(range(1, 16))
    for c in cl.CLAIMS:
        assert set(c.articles) == table[c.number], c.number


def test_quotations_hold_only_the_articles_words():
    """No project note inside a quotation (the old list put its checks in parentheses)."""
    for c in cl.CLAIMS:
        for q in c.quotes:
            assert "check" not in q.text.casefold() and "self-cited" not in q.text, (c.number, q.text)
            assert "cannot be checked" not in q.text and "REFERENCES" not in q.text


def _seed(key: str) -> str:
    return " ".join(text_of(SEEDS / SEED_FILES[key]).split())


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the original articles are not beside this checkout")
def test_every_quotation_is_verbatim_from_its_article():
    for c in cl.CLAIMS:
        for q in c.quotes:
            assert " ".join(q.text.split()) in _seed(q.article), (c.number, q.text)


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the original articles are not beside this checkout")
def test_docs_and_app_text_are_in_the_projects_own_words():
    """No run of 12 words from either article anywhere in docs/, README.md or app/ outside the quotations."""
    def grams(text: str, n: int = 12) -> set[str]:
        w = re.findall(r"[\w'’.-]+", text.casefold())
        return {" ".join(w[i:i + n]) for i in range(len(w) - n + 1)}
    seeds = grams(_seed("mechanics")) | grams(_seed("trillion"))
    titles = set().union(*(grams(a.title) for a in cl.ARTICLES.values()))
    files = [*DOCS.glob("*.md"), ROOT / "README.md", *(p for p in (ROOT / "app").rglob("*.py") if p.name != "claims.py")]
    for f in files:
        shared = (grams(text_of(f)) & seeds) - titles
        assert not shared, (str(f.relative_to(ROOT)), sorted(shared)[:3])
