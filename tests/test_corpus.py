"""The training corpus: pieces lose no text, the held-out split has the training mix, the earlier
corpus is a prefix of today's (its held-out split still held out), no paragraph is shared between the
documentation pages and the other kinds, and the app's held-out sample is unseen text that
`python -m model.corpus` rebuilds exactly."""
import math
import os

import pytest
import torch
import torch.nn.functional as F

from model import corpus


def test_pieces_keep_every_character_and_cut_at_blank_lines():
    code = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(200))
    parts = corpus.pieces(code, max_chars=300)
    assert "".join(parts) == code and len(parts) > 5
    assert all(p.endswith("\n\n") for p in parts[:-1])              # each cut follows a blank line
    assert max(map(len, parts)) < 300 + 30                             # a piece ends at the first blank after 300
    assert corpus.pieces("no blank line " * 50, max_chars=10) == ["no blank line " * 50]
    assert corpus.pieces("") == []


@pytest.fixture(scope="module")
def by_kind():
    try:
        return corpus.documents_by_kind()
    except corpus.CorpusMissing as e:
        if os.environ.get("K3_REQUIRE_BROWSER"):       # CI installs python3.11-doc and must run these
            pytest.fail(str(e))
        pytest.skip(str(e))


def test_without_paragraphs_drops_whole_paragraphs_only():
    text = "keep me\n\ndrop me\n\n\n  keep too\nsecond line\n\ndrop me"
    assert corpus.without_paragraphs(text, {"drop me"}) == "keep me\n\n  keep too\nsecond line\n\n"
    assert corpus.without_paragraphs(text, set()) == text
    assert corpus.without_paragraphs(text, {"drop"}) == text                 # not a part of a paragraph
    assert corpus.ROLE.sub("`", "use :func:`len` or :c:func:`Py_X`, not :ref:") == "use `len` or `Py_X`, not :ref:"


def test_earlier_corpus_is_a_prefix_so_its_held_out_split_stays_held_out(by_kind):
    docs = [d for v in by_kind.values() for d in v]
    old = [d for k in corpus.OLD_KINDS for d in by_kind[k]]
    assert docs[:len(old)] == old
    assert sum(map(len, docs)) > 2 * sum(map(len, old))                  # the pages more than doubled the text
    _, old_val = corpus.split(old)
    _, val = corpus.split(docs)
    assert val[:len(old_val)] == old_val and len(val) > len(old_val)    # the same pieces, first, in order


def test_documentation_pages_share_no_paragraph_with_the_other_kinds(by_kind):
    others = {p for k in corpus.OLD_KINDS for d in by_kind[k] for p in corpus.paragraphs(d)}
    guide = [p for d in by_kind["guide"] for p in corpus.paragraphs(d)]
    assert len(guide) > 20_000
    # pieces re-cut paragraphs only at blank lines, so a shared paragraph would show here
    assert not [p for p in guide if p in others]
    text = "\n".join(by_kind["guide"])
    assert "Python is an easy to learn, powerful programming language." in text    # the tutorial's opening
    assert ":func:`" not in text and "`" in text                   # roles reduced to their name


def test_held_out_split_has_the_training_mix(by_kind):
    docs = [d for v in by_kind.values() for d in v]
    kinds = [k for k, v in by_kind.items() for _ in v]
    train, val = corpus.split(docs)
    assert len(train) + len(val) == len(docs) and len(val) == len(docs) // corpus.HOLD_OUT_EVERY
    share = {}
    for side, keep in (("train", lambda i: not corpus.held_out(i)), ("val", corpus.held_out)):
        chars = {k: sum(len(d) for i, (kk, d) in enumerate(zip(kinds, docs)) if kk == k and keep(i)) for k in by_kind}
        share[side] = {k: c / sum(chars.values()) for k, c in chars.items()}
    for k in corpus.KINDS:
        assert abs(share["val"][k] - share["train"][k]) < 0.05, (k, share)
    # no single document dominates the held-out text (whole files once made difflib half of it)
    assert max(map(len, val)) < 0.05 * sum(map(len, val))


def test_shipped_heldout_sample_is_unseen_and_reproducible(by_kind):
    shipped = corpus.SAMPLE_PATH.read_text(encoding="utf-8")
    assert corpus.heldout_sample(by_kind) == shipped
    train, _ = corpus.split([d for v in by_kind.values() for d in v])
    seen = "\n".join(train)
    paras = corpus.paragraphs(shipped)
    assert len(paras) > 10 and not [p for p in paras if p in seen]
    assert "def " in shipped and any(c.isdigit() for c in shipped) and "***" in shipped


def test_shipped_model_predicts_held_out_text_better_than_untrained():
    """Cross-entropy on the held-out sample: the trained instance is far below uniform guessing over the
    vocabulary and below the same architecture at its seeded initialisation."""
    from model.checkpoint import load_pretrained
    from model.config import K3Config
    from model.k3 import K3Model
    model, tok = load_pretrained()
    ids = torch.tensor([tok.encode(corpus.SAMPLE_PATH.read_text(encoding="utf-8"))[:129]])
    torch.manual_seed(0)
    untrained = K3Model(K3Config.tiny()).eval()
    with torch.no_grad():
        ce = {name: F.cross_entropy(m(ids[:, :-1], record=False).logits[0].float(), ids[0, 1:]).item()
              for name, m in (("trained", model), ("untrained", untrained))}
    assert ce["trained"] < 0.8 * math.log(tok.vocab_size) and ce["trained"] < ce["untrained"] - 1.5, ce


def test_fingerprint_sees_boundaries_and_split():
    """The token cache is keyed by it: re-cutting the same text, or another split, must change it."""
    assert corpus.fingerprint(["ab", "c"]) != corpus.fingerprint(["a", "bc"])
    assert corpus.fingerprint(["ab", "c"], every=12) != corpus.fingerprint(["ab", "c"], every=50)
    assert corpus.fingerprint(["ab", "c"]) == corpus.fingerprint(["ab", "c"])


def test_guide_package_names_the_installed_documentation_package(tmp_path, monkeypatch):
    """The card records which revision of the documentation package the corpus was built from (Debian's
    updates change a few pages, and so the fingerprint); read from the package's changelog."""
    import gzip
    folder = tmp_path / corpus.GUIDE_PACKAGE
    folder.mkdir()
    with gzip.open(folder / "changelog.Debian.gz", "wt") as f:
        f.write("python3.11 (3.11.2-6+deb12u8) bookworm; urgency=medium\n\n  * Security update.\n")
    monkeypatch.setattr(corpus, "DOC_ROOT", tmp_path)
    assert corpus.guide_package() == f"{corpus.GUIDE_PACKAGE} 3.11.2-6+deb12u8"
    (folder / "changelog.Debian.gz").write_bytes(b"not gzip")
    assert corpus.guide_package() is None                          # unreadable: no version claimed
    (folder / "changelog.Debian.gz").unlink()
    assert corpus.guide_package() is None                          # not installed


def test_unwrap_joins_wrapped_prose_and_leaves_code_lists_and_examples():
    wrapped = ("   If the argument is omitted, the default value of the parameter is taken from the\n"
               "   configuration, which is read once when the module is first imported and then\n"
               "   kept for the life of the process; a well-\n   known rule.")
    got = corpus.unwrap(wrapped)
    assert "\n" not in got and "from the configuration, which" in got and "well-known rule." in got
    kept = ["   >>> sorted([3, 1, 2])\n   [1, 2, 3]",                       # a doctest
            "* first item of a list that is long enough to be wrapped\n* second item of it",
            "+-------+-------+\n| a     | b     |\n+-------+-------+",        # a table
            "def f(x):\n    return x + 1",                                   # code
            "   spam(eggs, ham, and a great many other arguments, all of them here)\n"
            "   spam(eggs, ham, and a great many other arguments, all of them there)",
            # lines of different indentation (a signature over its description) are not one paragraph
            "If the argument is omitted, the default value of the parameter is taken from\n"
            "   the configuration, which is read once when the module is first imported"]
    for text in kept:
        assert corpus.unwrap(text) == text, text
    # a literal block under a paragraph that ends in "::" stays as written, even when it reads as prose
    literal = ("For example::\n\n      this line is long enough to read as wrapped prose, nearly\n"
               "      so is this one, and both are indented under the colons")
    assert corpus.unwrap(literal) == literal
    # paragraph breaks survive, and unwrapping twice changes nothing more
    two = wrapped + "\n\n" + wrapped
    assert corpus.unwrap(two).count("\n\n") == 1 and corpus.unwrap(corpus.unwrap(two)) == corpus.unwrap(two)


def test_unwrapped_corpus_has_the_same_pieces_and_split(by_kind):
    unwrapped = corpus.documents_by_kind(unwrap_prose=True)
    assert {k: len(v) for k, v in unwrapped.items()} == {k: len(v) for k, v in by_kind.items()}
    assert unwrapped["code"] == by_kind["code"]                    # code is never unwrapped
    for kind in corpus.PROSE_KINDS:
        before = sum(d.count("\n") for d in by_kind[kind])
        after = sum(d.count("\n") for d in unwrapped[kind])
        assert after < 0.85 * before, kind                        # many line breaks inside paragraphs go
        # nothing but whitespace changes: the same characters, less the spaces, in the same order
        assert ["".join(d.split()) for d in unwrapped[kind]] == ["".join(d.split()) for d in by_kind[kind]], kind
