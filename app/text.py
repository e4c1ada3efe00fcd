"""Formatting of numbers and safe display of text that did not come from us."""
from __future__ import annotations

import re

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$:])")


def md_escape(text: str, limit: int = 80) -> str:
    """Text from a URL or a text box, made inert for st.markdown: control characters dropped,
    markdown and HTML metacharacters escaped, length capped."""
    text = "".join(ch for ch in str(text) if ch.isprintable())
    if len(text) > limit:
        text = text[:limit] + "…"
    return _MD_SPECIAL.sub(r"\\\1", text)


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


def token_text(piece: str, limit: int = 24) -> str:
    """A token piece as visible plain text for a code span or a chart label: newlines and tabs shown as
    symbols, other control characters dropped, backticks replaced (they would end a code span), capped."""
    names = {"\n": "↵", "\t": "⇥", "\r": "␍"}
    s = "".join(names.get(ch, ch) for ch in str(piece) if ch.isprintable() or ch in names).replace("`", "ˋ")
    if not s.strip():
        s = "␣" * max(1, len(s))
    return s[:limit] + ("…" if len(s) > limit else "")


def md_table(df, limit: int = 100_000) -> str:
    """A data frame as one Markdown table (GitHub style), every header and cell escaped with md_escape (and "&",
    so that an entity in a token stays as typed): for st.markdown, which draws it as one element, where st.table
    draws each cell as its own Markdown element (about 70 for an 8-row, 4-column table, each parsed and styled
    on every redraw). The index is not shown; no cell is cut (`limit` only guards against the absurd)."""
    def cell(v) -> str:
        return md_escape(v, limit).replace("&", "\\&") or "\u00a0"
    head = [cell(c) for c in df.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)
