"""Formatting of numbers and safe display of text that did not come from us."""
from __future__ import annotations

import re
import unicodedata

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$:])")


def md_escape(text: str, limit: int = 80) -> str:
    """Text from a URL or a text box, made inert for st.markdown: control characters dropped,
    markdown and HTML metacharacters escaped, length capped."""
    text = "".join(ch for ch in str(text) if ch.isprintable())
    if len(text) > limit:
        text = text[:limit] + "…"
    return _MD_SPECIAL.sub(r"\\\1", text)


def code_span(text, limit: int = 40) -> str:
    """Text from a URL or a text box as a Markdown code span, shown exactly as typed: inside a code span
    Markdown escapes are not read, so md_escape's backslashes would show (`\\-7`). Control characters are
    dropped, the length capped; the fence is one backtick longer than any run of backticks inside."""
    text = "".join(ch for ch in str(text) if ch.isprintable())
    if len(text) > limit:
        text = text[:limit] + "…"
    if not text:
        return "(empty)"
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


LONE_SURROGATE_NOTE = ("Half of a character (a lone UTF-16 surrogate, as when half an emoji is pasted) was "
                       "replaced by �.")


def clean_text(text, most: int) -> tuple[str, list[str]]:
    """Typed or linked text made safe to tokenise, store and put in a link, and what was changed, said
    for the page: lone surrogates become U+FFFD (they cannot be UTF-8 encoded), control characters other
    than line breaks and tabs are dropped, and the text is cut to `most` characters."""
    raw = "" if text is None else str(text)
    notes = []
    s = raw.encode("utf-16", "surrogatepass").decode("utf-16", "replace")   # pairs kept, halves replaced
    if s != raw:
        notes.append(LONE_SURROGATE_NOTE)
    s = s.replace("\r\n", "\n").replace("\r", "\n")
    kept = "".join(ch for ch in s if ch in "\n\t" or unicodedata.category(ch) != "Cc")
    if kept != s:
        notes.append(f"{len(s) - len(kept):,} control character{'s' if len(s) - len(kept) != 1 else ''} "
                     "(invisible, not text) removed.")
    if len(kept) > most:
        notes.append(f"The text was cut to its first {most:,} characters (of {len(kept):,}).")
        kept = kept[:most]
    return kept, notes


def fmt_params(n: float, digits: int = 1) -> str:
    """1.2e12 -> '1.2T', 104_189_530_208 -> '104.2B', 35_384_602 -> '35.4M'."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= scale:
            return f"{n / scale:,.{digits}f}{unit}"
    return f"{n:,.0f}"


def fmt_int(n: int) -> str:
    return f"{n:,}"


def fmt_bytes(n: float) -> str:
    """Decimal units (1 GB = 10^9 bytes), as memory vendors quote them."""
    for scale, unit in ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB")):
        if abs(n) >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} B"


def fmt_tokens(n: int) -> str:
    if n >= 2 ** 20 and n % 2 ** 20 == 0:
        return f"{n // 2 ** 20}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}K"
    return str(n)


SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")     # "2" + "20".translate(SUPERSCRIPT): 2²⁰


_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def visible(piece: str) -> str:
    """A token piece with whitespace and invisible characters made visible (the one display of a piece: chips,
    tables, charts and captions all go through it)."""
    if piece == "":
        return "∅"
    return "".join(_VISIBLE.get(ch) or (ch if ch.isprintable() else f"⟨U+{ord(ch):04X}⟩") for ch in str(piece))


def text_line(text: str, limit: int = 60) -> str:
    """A whole text (a prompt, not a piece) on one line: line breaks and tabs as symbols, other invisible
    characters named, spaces between words kept as spaces (␣ everywhere would make a sentence hard to read)."""
    s = "".join(ch if ch == " " else visible(ch) for ch in str(text)).replace("`", "ˋ")
    return s[:limit] + ("…" if len(s) > limit else "")


def token_text(piece: str, limit: int = 24) -> str:
    """visible(piece) for a Markdown code span: backticks replaced (they would end the span), capped."""
    s = visible(piece).replace("`", "ˋ")
    return s[:limit] + ("…" if len(s) > limit else "")


def md_table(df, limit: int = 100_000, right=()) -> str:
    """A data frame as one Markdown table (GitHub style), every header and cell escaped with md_escape (and "&",
    so that an entity in a token stays as typed): for st.markdown, which draws it as one element, where st.table
    draws each cell as its own Markdown element (about 70 for an 8-row, 4-column table, each parsed and styled
    on every redraw) and st.dataframe's grid costs the browser ~0.35-0.45 s of a page load. The index is not
    shown; no cell is cut (`limit` only guards against the absurd); the columns named in `right` are aligned
    right (numbers)."""
    def cell(v) -> str:
        return md_escape(v, limit).replace("&", "\\&") or "\u00a0"
    head = [cell(c) for c in df.columns]
    rule = [" ---: " if c in right else " --- " for c in df.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def cell_text(value, spec=None) -> str:
    """One table cell as text: `spec` a format spec (",d", ".3f", ".1%") or a function of the value; a missing
    value (None, NaN) is "–", a flag yes/no, a whole float without ".0"."""
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        value = value.item()                        # a numpy scalar as the Python number it holds
    if value is None or type(value).__name__ == "NAType" or (isinstance(value, float) and value != value):
        return "–"
    if callable(spec):
        return str(spec(value))
    if spec is not None:
        if spec.endswith("d") and isinstance(value, float) and value.is_integer():
            value = int(value)
        return format(value, spec)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def text_table(df, formats: dict | None = None):
    """A copy of `df` with every cell as text (cell_text; `formats`: column -> spec) for md_table, and the
    columns that held numbers (to align right). Returns (table, right)."""
    formats = formats or {}
    right = [c for c in df.columns if df[c].dtype.kind in "iuf"]
    out = df.reset_index(drop=True).copy()
    for c in out.columns:
        out[c] = [cell_text(v, formats.get(c)) for v in df[c].tolist()]
    return out, right


def chip_label(piece: str, limit: int = 24) -> str:
    """Label of a token chip: the piece as every page shows it (app.text.token_text), escaped, since chip labels
    render Markdown."""
    return md_escape(token_text(piece, limit), limit + 1)


def chip_labels(pieces, limit: int = 24) -> list[str]:
    """Chip labels for a whole prompt, each one distinct: st.pills keeps its value as the chip's label,
    so two equal labels ("the" twice) would make a rerun select the other chip. A repeat says which
    occurrence it is, visibly ("the (2)"): no hidden character comes along when a label is copied."""
    seen: dict[str, int] = {}
    taken: set[str] = set()
    labels = []
    for piece in pieces:
        label = chip_label(piece, limit)
        n = seen.get(label, 0) + 1
        while n > 1 and f"{label} ({n})" in taken:
            n += 1
        seen[label] = n
        labels.append(label if n == 1 else f"{label} ({n})")
        taken.add(labels[-1])
    return labels
