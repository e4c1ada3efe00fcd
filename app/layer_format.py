"""Numbers as the Inside-one-layer page prints them in its equations, shapes and prose."""
from __future__ import annotations

import math

import numpy as np


def tex(x: float, digits: int = 3) -> str:
    """A number for LaTeX: 3 significant figures, a real minus sign, powers of ten written out."""
    x = float(x)
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return r"\infty" if x > 0 else r"-\infty"
    e = math.floor(math.log10(abs(x)))
    if -3 <= e < 5:
        return f"{x:.{max(digits - 1 - e, 0)}f}"
    m = x / 10 ** e
    return rf"{m:.{digits - 1}f}\times 10^{{{e}}}"


def dims(*ds: int) -> str:
    """[2 × 16 × 16]: dimensions joined by ×, so a thousands comma never reads as a second axis."""
    return "[" + " × ".join(f"{int(d):,}" for d in ds) + "]"


def norm(v: np.ndarray) -> float:
    return float(np.sqrt(np.sum(np.asarray(v, dtype=np.float64) ** 2)))
