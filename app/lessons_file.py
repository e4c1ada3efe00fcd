"""A lesson file's values, each checked where it is written: the line of every key (each Problem names one), the
author text a lesson may show, and a step's link values read by its page's own controls. app/lessons.py puts these
checks together into a Lesson (`parse`).
"""
from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass

from app.controls import Choice, link_text
from app.navigation import PageSpec


@dataclass(frozen=True)
class Problem:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


# ---- where a key is written: the line a problem names -----------------------------------------------------

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=""")
_INLINE_KEY = re.compile(r"""[{,]\s*([A-Za-z0-9_-]+|"[^"]*")\s*=""")


NESTED = 50                     # brackets deeper than any lesson's value: where a file too deep for tomllib goes wrong


def too_deep(text: str) -> int:
    """The line where brackets first nest deeper than NESTED (strings not told apart: only a rough place is needed,
    for a file the TOML reader could not read at all)."""
    depth = 0
    for n, line in enumerate(text.splitlines(), 1):
        for ch in line:
            depth += (ch in "[{") - (ch in "]}")
            if depth > NESTED:
                return n
    return 1


def _key_path(raw: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in raw.split("."))     # a dot inside a quoted key: not used here


class Lines:
    """The line of every table header and key of a lesson file, by its path: ("title",), ("steps", 2),
    ("steps", 2, "question", "answer"). Lines inside multi-line strings (a note's text) are not keys."""

    def __init__(self, text: str):
        self.at: dict[tuple, int] = {}
        table: tuple = ()
        steps = -1
        inside = None                                  # the delimiter of the multi-line string we are in
        for n, line in enumerate(text.splitlines(), 1):
            if inside is not None:
                if line.count(inside) % 2:
                    inside = None
                continue
            header = _HEADER.match(line)
            if header and not _KEY.match(line):
                path = _key_path(header.group(2))
                if header.group(1) == "[[" and path == ("steps",):
                    steps += 1
                    table = ("steps", steps)
                elif path[:1] == ("steps",) and steps >= 0:
                    table = ("steps", steps, *path[1:])
                else:
                    table = path
                self.at.setdefault(table, n)
                continue
            key = _KEY.match(line)
            if key is None:
                continue
            path = (*table, *_key_path(key.group(1)))
            self.at.setdefault(path, n)
            rest = line[key.end():]
            for inner in _INLINE_KEY.finditer(rest):                   # params = { layer = 46, k = 8 }
                self.at.setdefault((*path, inner.group(1).strip("\"'")), n)
            for delim in ('"""', "'''"):
                if rest.count(delim) % 2:
                    inside = delim
                    break

    def line(self, *path) -> int:
        """The line of the key at `path`, or of the nearest table or key above it that is written; 1 if none."""
        while path:
            if path in self.at:
                return self.at[path]
            path = path[:-1]
        return 1


# ---- what an author may write -------------------------------------------------------------------------------

# Markup that an author's Markdown may not hold: raw HTML (Streamlit would show it as text at best), pictures
# fetched from elsewhere, script links.
_HOSTILE = re.compile(r"<[A-Za-z/!?]|!\[|javascript:|data:text/html", re.I)


def text_problem(value, most: int, one_line: bool = False) -> str | None:
    """Why an author's text cannot be shown, or None."""
    if not isinstance(value, str):
        return f"must be text (in quotes), not {type(value).__name__}"
    if not value.strip():
        return "is empty"
    if len(value) > most:
        return f"is {len(value):,} characters long; at most {most:,} fit"
    if one_line and "\n" in value.strip():
        return "must be one line"
    if any(unicodedata.category(ch) == "Cc" and ch not in "\n\t" for ch in value):
        return "holds control characters (invisible, not text)"
    if _HOSTILE.search(value):
        return "holds HTML, a picture or a script link, which a lesson may not show (write plain Markdown)"
    return None


# ---- a step's link, read by its page's own controls ------------------------------------------------------------

def _raw_link_value(value) -> str | None:
    """A TOML value as the text a link would hold, or None when no link could hold it."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (int, str)):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, list) and all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in value):
        return ",".join(map(str, value))
    return None


def _reason(note: str) -> str:
    """A page's link notice as the reason a lesson value is wrong: what the page would do about it is cut."""
    s = re.sub(r"\\(.)", r"\1", note)                                       # md_escape's backslashes
    s = re.sub(r"^The link(?:'s| asks for)\s+", "", s)
    s = re.sub(r"(?:[:;,.]\s*|\s+)(?:showing|so it was|search for it|using|ignored)\b.*$", "", s, flags=re.I | re.S)
    return s.rstrip(" .:;,")


def check_params(spec: PageSpec, params, lines: Lines, i: int) -> tuple[tuple[tuple[str, str], ...], list[Problem]]:
    """A step's `params` as the link its page writes (defaults left out), or the problem of each value."""
    from app.page_controls import DeclarationError, link_controls  # imports Streamlit: only for a step with params
    page = spec.url_path
    where = ("steps", i, "params")
    if not isinstance(params, dict):
        return (), [Problem(lines.line(*where), f"step {i + 1}: params must be a table, such as {{ layer = 46 }}")]
    try:
        controls = link_controls(spec.path)
    except DeclarationError as e:
        return (), [Problem(lines.line(*where), f"step {i + 1}: {e}")]
    link, problems = [], []
    for name, value in params.items():
        at = lines.line(*where, name)
        c = controls.get(name)
        if c is None:
            problems.append(Problem(at, f"step {i + 1}: the page {page} has no link parameter {name!r}; its "
                                        f"parameters are {', '.join(sorted(controls))}"))
            continue
        raw = _raw_link_value(value)
        if raw is None:
            problems.append(Problem(at, f"step {i + 1}: {name} = {value!r} is not a value a link can hold"))
            continue
        parsed, note = c.parse(raw)
        if parsed is None or note:
            reason = _reason(note or "not a value this page takes")
            if isinstance(c, Choice) and "not one of" not in reason:
                reason += f"; it takes {', '.join(c.dump(o) for o in c.options[:12])}{' …' if len(c.options) > 12 else ''}"
            problems.append(Problem(at, f"step {i + 1}: {name} = {raw}: {reason}"))
            continue
        text = link_text(c, c.normal(parsed))
        if text is not None:
            link.append((name, text))
    return tuple(link), problems
