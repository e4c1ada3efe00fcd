"""The training text: Python's own documentation and code, which any machine can rebuild offline.

Four kinds of text, so that experts have something to specialise on: docstrings of the standard
library, the reference-manual topics in pydoc_data, the standard library's source code (all three
ship with every CPython), and the pages of the Python documentation (tutorial, HOWTOs, FAQ, library
reference, setup and usage) as reStructuredText, from Debian's package python3.X-doc
(`apt-get install python3.11-doc`; its `html/_sources` folder). Licence of all four: the Python
Software Foundation License. Deterministic: files are read in sorted order.

The documentation pages came last (a larger corpus for a longer training run): the first three kinds
keep the order and the held-out split they had before, so the earlier validation split is still held
out and still measurable (`split(documents(kinds=OLD_KINDS))`).
"""
from __future__ import annotations

import ast
import gzip
import hashlib
import re
import sys
import sysconfig
import textwrap
from pathlib import Path

SKIP = {"site-packages", "test", "tests", "idlelib", "lib2to3", "tkinter", "turtledemo", "ensurepip"}
SEPARATOR = "\n\n"
SAMPLE_PATH = Path(__file__).resolve().parent.parent / "assets" / "heldout_sample.txt"


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return [p for p in sorted(root.rglob("*.py")) if not SKIP & set(p.relative_to(root).parts)]


def docstrings() -> list[str]:
    out = []
    for path in _stdlib_files():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 40:
                    out.append(doc)
    return out


def manual_topics() -> list[str]:
    from pydoc_data.topics import topics
    return [topics[k] for k in sorted(topics)]


def source_code(max_chars: int = 2_000_000) -> list[str]:
    out, total = [], 0
    for path in _stdlib_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        out.append(text)
        total += len(text)
        if total >= max_chars:
            break
    return out


# Debian's python3.X-doc keeps the reStructuredText source of every page of the documentation here
DOC_ROOT = Path("/usr/share/doc")
PYTHON = f"python{sys.version_info.major}.{sys.version_info.minor}"
GUIDE_PACKAGE = f"{PYTHON}-doc"
GUIDE_ROOT = DOC_ROOT / PYTHON / "html" / "_sources"
GUIDE_PARTS = ("tutorial", "howto", "faq", "library", "using")
# pages whose text pydoc_data's topics (the "manual" kind) already hold: left out, so that a held-out
# manual topic is not training text under another name
GUIDE_SKIP = {"library/stdtypes.rst.txt", "library/pdb.rst.txt", "library/string.rst.txt"}
ROLE = re.compile(r":(?:[a-z]+:)?[a-z]+:`")        # :func:`len`, :c:func:`x` -> `len`, `x`


def guide_package() -> str | None:
    """The Debian package the documentation pages come from and its version, e.g. "python3.11-doc
    3.11.2-6+deb12u8" (from its changelog; None where it is not installed). Debian's updates of the
    package change a few pages, and so the corpus and its fingerprint: a card records which it read."""
    changelog = DOC_ROOT / GUIDE_PACKAGE / "changelog.Debian.gz"
    try:
        with gzip.open(changelog, "rt", encoding="utf-8") as f:
            m = re.match(r"\S+ \(([^)]+)\)", f.readline())
    except (OSError, EOFError, UnicodeDecodeError):
        return None
    return f"{changelog.parent.name} {m.group(1)}" if m else None


class CorpusMissing(RuntimeError):
    """The documentation pages are not on this machine."""


def guide_pages() -> list[str]:
    """The documentation pages in sorted order, Sphinx roles reduced to their backquoted name, less
    every paragraph that is also a paragraph of the other three kinds (a docstring the library
    reference repeats word for word, say): so no held-out text of one kind is training text of another."""
    if not GUIDE_ROOT.is_dir():
        raise CorpusMissing(f"{GUIDE_ROOT} is missing: the corpus needs Debian's Python documentation "
                            f"(apt-get install -y {GUIDE_PACKAGE})")
    known = {p for kind in OLD_KINDS for text in SOURCES[kind]() for p in paragraphs(text)}
    out = []
    for part in GUIDE_PARTS:
        for path in sorted((GUIDE_ROOT / part).rglob("*.rst.txt")):
            if path.relative_to(GUIDE_ROOT).as_posix() not in GUIDE_SKIP:
                out.append(without_paragraphs(ROLE.sub("`", path.read_text(encoding="utf-8")), known))
    return out


def without_paragraphs(text: str, drop: set[str]) -> str:
    """`text` less the paragraphs (blank-line separated, compared stripped) that are in `drop`."""
    parts = re.split(r"(\n\s*\n)", text)           # paragraph, separator, paragraph, ...
    keep = [(para, sep) for para, sep in zip(parts[::2], parts[1::2] + [""]) if para.strip() not in drop]
    return "".join(para + sep for para, sep in keep)


PIECE_CHARS = 3000
HOLD_OUT_EVERY = 12


def pieces(text: str, max_chars: int = PIECE_CHARS) -> list[str]:
    """Cut `text` at the first blank line after every `max_chars` characters (no text is lost)."""
    out, cur, size = [], [], 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        size += len(line)
        if size >= max_chars and not line.strip():
            out.append("".join(cur))
            cur, size = [], 0
    if cur:
        out.append("".join(cur))
    return out


KINDS = ("docstring", "manual", "code", "guide")
OLD_KINDS = KINDS[:3]          # the corpus of the instances trained before the documentation pages
SOURCES = {"docstring": docstrings, "manual": manual_topics, "code": source_code, "guide": guide_pages}


PROSE_KINDS = ("docstring", "manual", "guide")   # the kinds whose hard-wrapped paragraphs unwrap() joins


def documents_by_kind(kinds: tuple[str, ...] = KINDS, unwrap_prose: bool = False) -> dict[str, list[str]]:
    """Each kind of text, in KINDS order, each long text cut into pieces of about PIECE_CHARS characters.
    With `unwrap_prose`, the prose paragraphs of each piece of documentation are joined into one line
    (unwrap); the pieces are cut first, so a piece holds the same text either way and the held-out
    split is the same documents."""
    out = {kind: [p for d in SOURCES[kind]() for p in pieces(d)] for kind in KINDS if kind in kinds}
    if unwrap_prose:
        out = {kind: [unwrap(d) for d in docs] if kind in PROSE_KINDS else docs for kind, docs in out.items()}
    return out


WRAPPED_LINE = 40                   # most lines of a hard-wrapped paragraph (its last aside) are at least this long
NOT_PROSE = re.compile(r"(>>>|\.\.\.|\.\. |[-*+\u2022]\s|[|+=#~^]|\d+[.)]\s|:\w+:|[A-Za-z_][\w.]*\()")
PARAGRAPH_BREAK = re.compile(r"(\n[ \t]*\n)")


def unwrap(text: str) -> str:
    """`text` with each hard-wrapped prose paragraph on one line: the line breaks inside it (and the
    indentation after them) become single spaces, a break after a hyphenated word none. The documentation
    is wrapped at about 72 columns, so a model trained on it as written learns that a newline follows
    about one word in ten, and after "the value of the" ranks a line break above every word. Left as
    written: lists, tables, doctests, directives, paragraphs whose lines differ in indentation or are
    short or not mostly letters (code, signatures, examples), and every paragraph indented deeper under
    one that ends in "::" (a reStructuredText literal block)."""
    parts = PARAGRAPH_BREAK.split(text)
    literal_from = None             # indentation of the paragraph that opened an example, while inside it
    for i in range(0, len(parts), 2):
        para = parts[i]
        lines = para.split("\n")
        first = next((line for line in lines if line.strip()), "")
        indent = len(first) - len(first.lstrip())
        if literal_from is not None and indent > literal_from:
            continue
        literal_from = None
        if _wrapped_prose(lines):
            joined = lines[0].rstrip()
            for line in lines[1:]:
                word = line.strip()
                joined += word if re.search(r"[a-z]-$", joined) else " " + word
            parts[i] = para = joined
        stripped = para.strip()
        if stripped.endswith("::") and not stripped.startswith(".. "):     # reST: a literal block follows
            literal_from = indent
    return "".join(parts)


def _wrapped_prose(lines: list[str]) -> bool:
    if len(lines) < 2 or not all(line.strip() for line in lines):
        return False
    indents = {len(line) - len(line.lstrip()) for line in lines}
    words = [line.strip() for line in lines]
    text = " ".join(words)
    long = sum(len(w) >= WRAPPED_LINE for w in words[:-1])
    return (len(indents) == 1 and long >= 0.75 * (len(words) - 1)
            and not any(NOT_PROSE.match(w) for w in words)
            and sum(c.isalpha() or c == " " for c in text) >= 0.8 * len(text))


def documents(kinds: tuple[str, ...] = KINDS) -> list[str]:
    """Every document, in a fixed order: docstrings, manual topics, source files, then documentation
    pages, each long text cut into pieces of about PIECE_CHARS characters. Whole files would make a
    held-out split of a few dozen documents dominated by two or three large modules (difflib alone was
    half of the first one). `kinds=OLD_KINDS` gives the earlier corpus, a prefix of today's."""
    return [d for docs in documents_by_kind(kinds).values() for d in docs]


def split(docs: list[str], every: int = HOLD_OUT_EVERY) -> tuple[list[str], list[str]]:
    """(train, validation): every 12th document (piece) is held out, so the held-out text has about
    the training mix of docstrings, manual prose and code (checked in tests/test_corpus.py)."""
    val = [d for i, d in enumerate(docs) if held_out(i, every)]
    train = [d for i, d in enumerate(docs) if not held_out(i, every)]
    return train, val


def held_out(i: int, every: int = HOLD_OUT_EVERY) -> bool:
    """Whether document i (in the order of documents()) belongs to the validation split."""
    return i % every == every - 1


def fingerprint(docs: list[str], every: int = HOLD_OUT_EVERY) -> str:
    """Hash of the documents, their boundaries and the split rule (a cache key for their tokens)."""
    h = hashlib.sha256(f"split every {every}".encode())
    for d in docs:
        b = d.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()[:16]


def paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def _functions(code: str) -> list[str]:
    """`def` blocks of a piece of source: a def line and every following line indented deeper (or blank)."""
    lines, out = code.splitlines(), []
    for i, line in enumerate(lines):
        m = re.match(r"( *)def ", line)
        if not m:
            continue
        j = i + 1
        while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > len(m.group(1))):
            j += 1
        out.append(textwrap.dedent("\n".join(lines[i:j]).rstrip()))
    return out


def heldout_sample(by_kind: dict[str, list[str]] | None = None) -> str:
    """The short held-out text the app's pages run (assets/heldout_sample.txt, about 3,000 characters):
    four docstrings that contain numbers, the opening of a reference-manual topic (its title
    underlined) and two functions of standard-library code, spread over the validation split of the
    first three kinds (OLD_KINDS; the documentation pages, added later, are not looked at, so the
    pages keep the text they have always run). Only text none of whose paragraphs occurs anywhere in
    that training split is taken (a docstring also sits inside its module's source, which may be
    training text); tests/test_corpus.py checks that none occurs in today's whole training split
    either. Deterministic: `python -m model.corpus` rewrites the same file."""
    by_kind = {k: v for k, v in (by_kind or documents_by_kind(OLD_KINDS)).items() if k in OLD_KINDS}
    docs = [d for v in by_kind.values() for d in v]
    kinds = [k for k, v in by_kind.items() for _ in v]
    train, _ = split(docs)
    seen = "\n".join(train)
    held = [(k, d) for i, (k, d) in enumerate(zip(kinds, docs)) if held_out(i)]

    def unseen(text: str) -> bool:
        return all(p not in seen for p in paragraphs(text))

    def spread(items: list[str], n: int) -> list[str]:
        return items[:: max(1, len(items) // n)][:n]

    def opening(topic: str) -> str:                                  # whole paragraphs, just over 600 characters
        out = []
        for para in paragraphs(topic):
            out.append(para)
            if sum(map(len, out)) > 600:
                break
        return "\n\n".join(out)

    numbered = [d for k, d in held if k == "docstring" and 150 <= len(d) <= 700 and re.search(r"\d", d)]
    titled = re.compile(r"[^\n]+\n\*+\n")                             # a topic's first piece
    topic = next(d for k, d in held if k == "manual" and len(d) > 1000 and titled.match(d) and unseen(opening(d)))
    functions = [f for k, d in held if k == "code" for f in _functions(d) if 300 <= len(f) <= 900]
    parts = [d.strip() for d in spread([d for d in numbered if unseen(d)], 4)]
    parts.append(opening(topic))
    parts += spread([f for f in functions if unseen(f)], 2)
    return "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    by_kind = documents_by_kind()
    SAMPLE_PATH.write_text(heldout_sample(by_kind), encoding="utf-8")
    docs = [d for v in by_kind.values() for d in v]
    train, val = split(docs)
    print(f"{len(docs):,} documents: {len(train):,} for training, {len(val):,} held out; "
          f"wrote {SAMPLE_PATH} ({len(SAMPLE_PATH.read_text(encoding='utf-8')):,} characters)")
