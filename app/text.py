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
