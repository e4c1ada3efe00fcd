"""The project's documents: every document and every file the code and the documents name is in the
repository, every section, claim and page it cites exists there, the Claims page's quotations match
docs/REFERENCES.md and (when the original articles are beside the checkout) are verbatim, docs/ is
written in the project's own words, the README stays short, no document reads like a lab notebook, and
the figures the documents quote about the live instance are the ones its files hold."""
import json
import re
from pathlib import Path

import pytest

from app import claims_data as cl

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SEEDS = ROOT.parent / "shared" / "seeds"
SEED_FILES = {"mechanics": "000_f1ec70fc68389b0f.txt", "trillion": "002_61a6f9ff481cf13e.txt"}
SOURCE_DIRS = ("app", "model", "views", "tests", "bench", "deploy")
DOC_NAME = re.compile(r"\b(?:docs/)?([A-Z][A-Z_]+\.md)\b")
# a file named with its folder ("deploy/k3-explorer.conf", "docs/APP.md", "bench/capacity.py"); a folder
# alone, a glob ("tests/test_*_page.py") or a template ("assets/{name}") is not a file name
CITED_PATH = re.compile(r"(?<![\w./-])((?:app|assets|bench|deploy|docs|model|tests|views)/[\w./-]*"
                        r"\.(?:conf|csv|json|md|npz|py|safetensors|sh|toml|txt))\b")
OTHER_REPO = re.compile(r"github\.com/|huggingface\.co/")   # a path on such a line is that repository's
README_MAX_LINES = 150
# what a dated run log or a development diary looks like (history belongs to git, not to the documents)
LOG_TELLS = re.compile(r"this (?:morning|session|round)|today's (?:run|host)|earlier attempts"
                       r"|[0-9]{4}-[0-9]{2}-[0-9]{2}[,:)]|the step before this|\(commit [0-9a-f]{7}|on a lent",
                       re.I)


def sources() -> list[Path]:
    files = [ROOT / "streamlit_app.py", ROOT / "README.md", *DOCS.glob("*.md")]
    for d in SOURCE_DIRS:
        files += sorted((ROOT / d).rglob("*.py"))
    files += sorted((ROOT / "deploy").glob("*.conf"))            # the shipped nginx config names a document
    return [f for f in files if f.exists() and f != Path(__file__).resolve()]   # this file cites on purpose


def text_of(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_the_four_design_documents_exist():
    for name in ("ARCHITECTURE.md", "APP.md", "REFERENCES.md", "TESTING.md"):
        assert (DOCS / name).is_file(), name


def missing_citations(files: list[Path]) -> dict[str, list[str]]:
    """Every document name (APP.md, docs/APP.md) and every file named with its folder (deploy/README.md,
    bench/capacity.py) that one of `files` cites but the repository does not hold -> the files citing it."""
    missing = {}
    for f in files:
        text, where = text_of(f), str(f.relative_to(ROOT)) if f.is_relative_to(ROOT) else f.name
        for name in set(DOC_NAME.findall(text)):
            if not ((DOCS / name).is_file() or (ROOT / name).is_file()):
                missing.setdefault(name, []).append(where)
        ours = "\n".join(line for line in text.splitlines() if not OTHER_REPO.search(line))
        for path in set(CITED_PATH.findall(ours)):
            if not (ROOT / path).is_file():
                missing.setdefault(path, []).append(where)
    return missing


def test_every_document_a_source_file_names_exists():
    missing = missing_citations(sources())
    assert not missing, missing


def test_the_cited_file_checker_can_fail(tmp_path):
    cite = tmp_path / "cites.py"
    cite.write_text('"""See deploy/README.md, `bench/nothing_here.py`, docs/APP.md and assets/k3_tiny.json;\n'
                    'not files: tests/test_*_page.py, app/charts/, assets/{name}.\n'
                    'Another repository\'s file: github.com/someone/tool, its docs/usage.md."""\n')
    assert set(CITED_PATH.findall(text_of(cite))) == {"deploy/README.md", "bench/nothing_here.py", "docs/APP.md",
                                                       "assets/k3_tiny.json", "docs/usage.md"}
    assert set(missing_citations([cite])) == {"deploy/README.md", "bench/nothing_here.py"}
    assert ROOT / "deploy" / "k3-explorer.conf" in sources()


def log_tells(text: str) -> list[str]:
    """The phrases of `text` that read like a dated run log (whitespace folded: a phrase may wrap)."""
    return [m.group(0) for m in LOG_TELLS.finditer(" ".join(text.split()))]


def test_readme_is_short_and_no_document_is_a_lab_notebook():
    lines = text_of(ROOT / "README.md").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; the details belong in docs/"
    tells = {f.name: log_tells(text_of(f)) for f in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]}
    assert not any(tells.values()), {k: v for k, v in tells.items() if v}


def test_the_log_checker_can_fail():
    diary = ("this morning's first run; the step before this round\n(commit 2036395) 41.6 s; on a lent H200 "
             "(2026-12-04) a step took 3.05 s; Earlier attempts to close the gap; on today's host")
    assert len(log_tells(diary)) == 7, log_tells(diary)
    assert not log_tells("Each session keeps its own settings; the run of 2026 steps; version 3.11.2-6")


def test_readme_says_what_the_tiny_instance_keeps_and_what_it_shrinks():
    """K3's layer schedule, expert counts and AttnRes block are kept, and latent = d/2; the widths, the head
    counts and the vocabulary are shrunk: every "K3 -> tiny" pair the README gives is a field of the two
    configs, and the head counts and the vocabulary are among them (not "every count kept")."""
    from model.config import K3Config
    full, tiny = K3Config.full(), K3Config.tiny()
    text = " ".join(text_of(ROOT / "README.md").split())
    assert "every count and ratio" not in text
    pairs = {(int(a.replace(",", "")), int(b.replace(",", "")))
             for a, b in re.findall(r"(\d[\d,]*) -> (\d[\d,]*)", text)}
    fields = {name: (getattr(full, name), getattr(tiny, name)) for name in vars(tiny)
              if isinstance(getattr(tiny, name), int) and not isinstance(getattr(tiny, name), bool)}
    shrunk = {name for name, pair in fields.items() if pair in pairs}
    assert all(p in fields.values() for p in pairs), pairs - set(fields.values())
    assert {"d_model", "latent_dim", "expert_hidden", "kda_heads", "mla_heads", "vocab_size"} <= shrunk, shrunk
    for name in ("num_layers", "n_routed_experts", "top_k", "n_shared_experts", "attnres_block_size"):
        assert getattr(full, name) == getattr(tiny, name), name
    assert full.layer_types == tiny.layer_types
    assert tiny.latent_dim * 2 == tiny.d_model and full.latent_dim * 2 == full.d_model
    kda, mla = tiny.layer_types.count("kda"), tiny.layer_types.count("mla")
    for said in (f"{tiny.num_layers} layers", f"{kda} KDA and {mla} MLA", f"{tiny.n_routed_experts} routed experts",
                 f"top-{tiny.top_k}", f"{tiny.n_shared_experts} shared experts",
                 f"blocks of {tiny.attnres_block_size}", "latent = d/2"):
        assert said in text, said


def test_training_doc_quotes_the_shipped_card_and_evaluation():
    """docs/TRAINING.md's figures are those of assets/k3_tiny.json and assets/k3_tiny_eval.json: retraining
    or re-evaluating without updating the document fails here."""
    from app.model_card import balanced_floor
    card = json.loads(text_of(ROOT / "assets" / "k3_tiny.json"))
    ev = json.loads(text_of(ROOT / "assets" / "k3_tiny_eval.json"))
    text = " ".join(text_of(DOCS / "TRAINING.md").split())
    hw, tr = ev["held_out_windows"], ev["trained"]
    said = [f"{card['steps']:,} steps", f"{card['tokens_seen']:,} tokens seen", f"{card['train_minutes']} minutes",
            ", ".join(f"{x}" for x in card["balance_calibration"]["median_max_mean_load_by_pass"]),
            f"{card['balance_calibration']['minutes']} minutes",
            f"{hw['trained']['whole_split']['cross_entropy']:.2f} nats",
            f"unigram model of the training split {hw['unigram']['whole_split']:.2f}",
            f"untrained instance {hw['untrained']['whole_split']['cross_entropy']:.2f}",
            f"uniform guess {ev['uniform_cross_entropy']:.2f}",
            f"earlier split {hw['trained']['earlier_split']['cross_entropy']:.2f} (unigram {hw['unigram']['earlier_split']:.2f})",
            f"in a row {tr['cross_entropy']:.2f}",
            f"{hw['as_trained']['trained']['cross_entropy']:.2f} (unigram {hw['as_trained']['unigram']:.2f})",
            f"{tr['class_expert_mi_bits']:.2f} bits (untrained {ev['untrained']['class_expert_mi_bits']:.2f})",
            f"{tr['max_mean_load']['median_over_layers']:.2f} / {tr['max_mean_load']['max_over_layers']:.2f}"]
    for key in ("load_heldout_batch", "load_training_batch"):
        lb = ev[key]
        said += [f"{lb['median_over_layers']:.2f} / {lb['max_over_layers']:.2f}",
                 f"{sum(x <= 1.3 for x in lb['per_layer'])} "]
    floor = balanced_floor(ev["load_heldout_batch"]["tokens"])
    said.append(f"{floor['median_layer']:.2f} / {floor['worst_layer']:.2f}")
    for phase in card["phases"]:
        said += [f"| {phase['steps']:,} | {phase['tokens_seen']:,} | {phase['train_minutes']} |",
                 f"{phase.get('start_val_loss', phase['untrained_val_loss']):.4f} -> {phase['final_val_loss']:.4f}"]
    for n in ev["next_tokens"].values():
        said.append(", ".join(f"`{t['piece']}`" for t in n["top5"]))
    missing = [s for s in said if s not in text]
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
    assert known["APP.md"] == set(range(1, 15))
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
    """docs/REFERENCES.md lists each claim with the articles it comes from (A, B); app/claims_data.py agrees."""
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
    files = [*DOCS.glob("*.md"), ROOT / "README.md", *(p for p in (ROOT / "app").rglob("*.py") if p.name != "claims_data.py")]
    for f in files:
        shared = (grams(text_of(f)) & seeds) - titles
        assert not shared, (str(f.relative_to(ROOT)), sorted(shared)[:3])
