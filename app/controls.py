"""What a control is: a link parameter with its default, its range, the parse of a link value (with the notice a
bad one gets) and the range its widget takes. Pure (no Streamlit): app/state.py keeps a control's value in the
session and the link; app/lessons.py checks a lesson step's values with the same `parse`.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.text import clean_text, code_span, md_escape

_INT = re.compile(r"^[+-]?\d{1,9}$")
_OPTION_WIDGETS = {"select_slider", "segmented_control", "pills", "selectbox", "radio"}   # take (label, options)
TRUE_WORDS, FALSE_WORDS = {"1", "true", "on", "yes"}, {"0", "false", "off", "no"}     # what a Flag reads as on, off


def shown(raw) -> str:
    """A link value as a notice shows it (Markdown escaped, cut short)."""
    return md_escape(raw, 40)


def as_typed(raw) -> str:
    """A rejected value quoted as typed (a code span: no escapes shown)."""
    return code_span(raw, 40)

@dataclass(frozen=True)
class Control:
    param: str
    default: Any
    label: str                         # how a notice names it ("top-k", "layer")
    shared: bool = False               # one value for every page (the prompt, the token)
    key: str | None = None             # the widget key, when it is not "<page prefix>_<param>"
    link: bool = True                  # False: kept in the session only (a running animation)

    def parse(self, raw: str) -> tuple[Any, str | None]:
        """(the value to use, or None to keep the current one; a notice for the page, or None)."""
        raise NotImplementedError

    def dump(self, value) -> str:
        return str(value)

    def normal(self, value):
        """The stored form of a value (e.g. a set of experts kept sorted)."""
        return value

    def widget_range(self, widget: str) -> tuple:
        """The positional range a widget of this name takes, read from the declaration (so a draw call does not
        repeat it): (lo, hi) for a slider of an Int, the options for a Choice. () when it has none."""
        return ()

    def fit(self, value, options: Sequence | None):
        """The value moved into `options` (a range that depends on the page, e.g. the prompt's tokens)."""
        if options is None or value in options:
            return value
        return _nearest(value, list(options), self.default)


def _nearest(value, options: list, fallback):
    if not options:
        return fallback
    if isinstance(value, (int, float)) and not isinstance(value, bool) and all(
            isinstance(o, (int, float)) and not isinstance(o, bool) for o in options):
        return min(options, key=lambda o: (abs(o - value), o))
    return fallback if fallback in options else options[0]


@dataclass(frozen=True)
class Int(Control):
    lo: int = 0
    hi: int = 0

    def widget_range(self, widget: str) -> tuple:
        return (self.lo, self.hi) if widget == "slider" else ()

    def parse(self, raw, whose: str = "The link's", hi: int | None = None):
        """`hi`: a tighter upper end that the page knows now (the blocks of the matrix shown)."""
        hi = self.hi if hi is None else min(hi, self.hi)
        raw = str(raw).strip()
        if not _INT.match(raw):
            return None, f"{whose} {self.label} {as_typed(raw)} is not a whole number, so it was ignored."
        v = int(raw)
        if v < self.lo or v > hi:
            c = min(max(v, self.lo), hi)
            return c, f"{whose} {self.label} {v} is outside {self.lo}–{hi}: showing {c} instead."
        return v, None


@dataclass(frozen=True)
class Index(Control):
    """A position whose range depends on the page (a token of the prompt): any whole number >= 0 is
    read; `fit` clamps it to the range and the draw says so when the link's value moved."""

    def parse(self, raw, whose: str = "The link's", hi: int | None = None):
        raw = str(raw).strip()
        if not _INT.match(raw):
            return None, f"{whose} {self.label} {as_typed(raw)} is not a position (0, 1, 2 …), so it was ignored."
        if int(raw) < 0:
            return 0, f"{whose} {self.label} {int(raw)} is before the first: positions start at 0, showing 0."
        if hi is not None and int(raw) > hi:
            return hi, f"{whose} {self.label} {int(raw)} is outside 0–{hi}: showing {hi} instead."
        return int(raw), None


@dataclass(frozen=True)
class Choice(Control):
    """One of a fixed list: names (matched without case) or numbers (the nearest is taken)."""
    options: tuple = ()

    def widget_range(self, widget: str) -> tuple:
        return (list(self.options),) if widget in _OPTION_WIDGETS else ()

    def parse(self, raw):
        raw_s = str(raw).strip()
        opts = list(self.options)
        if all(isinstance(o, str) for o in opts):
            for o in opts:
                if o.lower() == raw_s.lower():
                    return o, None
            return None, (f"The link's {self.label} {as_typed(raw_s)} is not one of "
                          f"{', '.join(map(str, opts[:8]))}{' …' if len(opts) > 8 else ''}, so it was ignored.")
        try:
            v = float(raw_s)
        except ValueError:
            v = math.nan
        if not math.isfinite(v):
            return None, f"The link's {self.label} {as_typed(raw_s)} is not a number, so it was ignored."
        for o in opts:
            if float(o) == v:
                return o, None
        near = _nearest(v, opts, self.default)
        return near, f"The link's {self.label} {shown(raw_s)} is not available here; showing {near} instead."

    def dump(self, value):
        return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Flag(Control):
    def parse(self, raw):
        raw_s = str(raw).strip().lower()
        if raw_s in TRUE_WORDS:
            return True, None
        if raw_s in FALSE_WORDS:
            return False, None
        return None, f"The link's {self.label} setting {as_typed(raw_s)} is not on/off, so it was ignored."

    def dump(self, value):
        return "on" if value else "off"


@dataclass(frozen=True)
class Ints(Control):
    """A list of distinct whole numbers in lo..hi (experts to knock out), at most `most` of them."""
    lo: int = 0
    hi: int = 0
    most: int = 64
    ordered: bool = False              # True: the order means something (kept as given)

    def normal(self, value):
        return list(value) if self.ordered else sorted(value)

    def parse(self, raw, whose: str = "The link's"):
        items = [x.strip() for x in str(raw).replace(";", ",").replace(" ", ",").split(",") if x.strip()]
        good, junk, outside, notes = [], [], [], []
        for x in items:
            if not _INT.match(x):
                junk.append(x)
            elif not self.lo <= int(x) <= self.hi:
                outside.append(x)
            elif int(x) not in good:
                good.append(int(x))
        if junk:
            notes.append(f"{whose} {self.label} list had entries that are not whole numbers "
                         f"({shown(', '.join(junk[:5]))}): ignored.")
        if outside:
            notes.append(f"{whose} {self.label} list named values outside {self.lo}–{self.hi} "
                         f"({shown(', '.join(outside[:5]))}): ignored.")
        if len(good) > self.most:
            notes.append(f"{whose} {self.label} list was cut to its first {self.most} entries.")
            good = good[:self.most]
        return good, " ".join(notes) or None

    def dump(self, value):
        return ",".join(map(str, value))


@dataclass(frozen=True)
class Choices(Control):
    """Several of a fixed list of names (a filter), written as a comma-separated list."""
    options: tuple = ()

    def parse(self, raw):
        by_name = {o.lower(): o for o in self.options}
        parts = [p.strip().lower() for p in str(raw).split(",") if p.strip()]
        good = [by_name[p] for p in dict.fromkeys(parts) if p in by_name]
        bad = [p for p in parts if p not in by_name]
        note = (f"The link's {self.label} has parts this page does not know ({shown(', '.join(bad[:5]))}); "
                f"it knows {', '.join(self.options)}.") if bad else None
        if not good and bad:
            return None, note
        return good, note

    def dump(self, value):
        return ",".join(value)


@dataclass(frozen=True)
class Text(Control):
    most: int = 200

    def parse(self, raw):
        text, notes = clean_text(raw, self.most)
        if notes:
            return text, f"The link's {self.label}: " + " ".join(notes)
        return text, None



def link_text(c: Control, value) -> str | None:
    """What the link holds for a control's value: None for the default (left out, so links stay short)."""
    return None if value is None or value == c.default else c.dump(value)
