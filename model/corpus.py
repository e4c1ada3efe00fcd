"""The training text: documentation that ships with every CPython, so any machine can rebuild it offline.

Three kinds of text, so that experts have something to specialise on: prose (docstrings of the
standard library and the reference-manual topics in pydoc_data), and Python source code. Licence:
the Python Software Foundation License (the standard library's own); see assets/tokenizer.json's
card in model/tokenizer.py. Deterministic: files are read in sorted order.
"""
from __future__ import annotations

import ast
import hashlib
import sysconfig
from pathlib import Path

SKIP = {"site-packages", "test", "tests", "idlelib", "lib2to3", "tkinter", "turtledemo", "ensurepip"}
SEPARATOR = "\n\n"


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


def documents() -> list[str]:
    """Every document, in a fixed order: docstrings, manual topics, then source files."""
    return docstrings() + manual_topics() + source_code()


def split(docs: list[str], every: int = 50) -> tuple[list[str], list[str]]:
    """(train, validation): every 50th document is held out, so both see all three kinds of text."""
    val = [d for i, d in enumerate(docs) if i % every == every - 1]
    train = [d for i, d in enumerate(docs) if i % every != every - 1]
    return train, val


def fingerprint(docs: list[str]) -> str:
    h = hashlib.sha256()
    for d in docs:
        h.update(d.encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:16]
