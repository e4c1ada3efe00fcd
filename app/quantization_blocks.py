"""The MX formats by hand: every value of the E2M1 and E4M3 element grids with its bits, and the steps by which
one block of at most 32 values picks its power-of-two scale and is rounded (docs/ARCHITECTURE.md section 7), read
off the model's own quantiser (model/quant.py). Pure functions; the Quantization lab's first two sections."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from model.quant import FORMATS, block_scale_exponents, element_grid, mx_fake_quant, pack_mxfp4

BLOCK = 32
# Section 7 worked examples: (values, X, expected dequantised values)
EXAMPLES = {
    "e2m1": ([0.1, -0.25, 0.3, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -3.7, 7.9], 1.0,
             [0, -0.0, 0.5, 1, 1, 2, 2, 4, 4, -4, 6]),
    "e4m3": ([1000, 3.14159, 0.01, -100, 0.3], 2.0, [896, 3.25, 0.01171875, -96, 0.3125]),
}


# ---- the value grids ------------------------------------------------------------------------------

def grid_frame(fmt: str) -> pd.DataFrame:
    """Every non-negative value of an element format with its bit pattern (sign, exponent, mantissa)."""
    f = FORMATS[fmt]
    ebits = f.bits - 1 - f.mbits
    vals = element_grid(fmt).numpy()
    rows = []
    for i, v in enumerate(vals):
        if v < 2.0 ** f.emin:                          # zero and subnormals: exponent field 0
            field, mant, kind = 0, round(v / 2.0 ** (f.emin - f.mbits)), "zero" if v == 0 else "subnormal"
        else:
            e = math.frexp(v)[1] - 1                   # floor(log2 v), exact
            field, mant, kind = e - f.emin + 1, round((v / 2.0 ** e - 1) * 2 ** f.mbits), "normal"
        gap = vals[i + 1] - v if i + 1 < len(vals) else np.nan
        rows.append({"value": float(v), "kind": kind, "bits": f"0 {field:0{ebits}b} {mant:0{f.mbits}b}",
                     "gap to next": gap, "relative gap": gap / v if v else np.nan})
    return pd.DataFrame(rows)


def grid_counts(fmt: str) -> dict:
    """What the value grid of an element format holds, counted from element_grid (OCP MX v1.0): the positive
    values, the subnormals, how many values each power of two [2^e, 2^(e+1)) holds among the normals, and the
    relative step between neighbouring normals."""
    g = grid_frame(fmt)
    pos = g[g["value"] > 0]
    normal = pos[pos["kind"] == "normal"]
    per = normal.groupby(normal["value"].map(lambda v: math.frexp(v)[1] - 1)).size()
    full = 2 ** FORMATS[fmt].mbits
    whole = [int(e) for e, n in per.items() if n == full]
    gaps = normal["relative gap"].dropna()
    return {"positive": len(pos), "distinct": 2 * len(pos) + 1, "codes": 2 * len(g) if fmt == "e2m1" else None,
            "subnormals": int((pos["kind"] == "subnormal").sum()), "per_binade": full,
            "full_binades": (min(whole), max(whole)), "top_exp": int(per.index.max()), "top_count": int(per.iloc[-1]),
            "max": float(pos["value"].max()), "min_normal": float(normal["value"].min()),
            "gap_min": float(gaps.min()), "gap_max": float(gaps.max())}


# ---- one block ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BlockSteps:
    fmt: str
    values: np.ndarray        # the block as given
    amax: float
    floor_log2: int | None    # floor(log2 amax); None when the block is all zeros
    emax: int
    scale_exp: int            # E of X = 2^E, as the model picks it (clamped to E8M0)
    scaled: np.ndarray        # V / X
    grid: np.ndarray          # P: V / X rounded on the element grid (ties to even), clamped
    dequantised: np.ndarray   # X * P, what the model computes with

    @property
    def X(self) -> float:
        return 2.0 ** self.scale_exp

    @property
    def error(self) -> np.ndarray:
        return self.dequantised - self.values

    @property
    def unchanged(self) -> bool:
        return bool(np.array_equal(self.dequantised, self.values))


def explain_block(values, fmt: str) -> BlockSteps:
    """The steps of docs/ARCHITECTURE.md section 7 for one block (at most 32 values), read off the model's
    own quantiser: X from model.quant.block_scale_exponents, X * P from mx_fake_quant."""
    v = torch.as_tensor(np.asarray(values, dtype=np.float64))
    if v.numel() == 0 or v.numel() > BLOCK:
        raise ValueError(f"a block holds 1..{BLOCK} values, got {v.numel()}")
    if not bool(torch.isfinite(v).all()):
        raise ValueError("the block holds a NaN or an infinity")
    f = FORMATS[fmt]
    E = int(block_scale_exponents(v, fmt, BLOCK)[0])
    deq = mx_fake_quant(v, fmt, BLOCK).numpy()
    amax = float(v.abs().max())
    X = 2.0 ** E
    return BlockSteps(fmt, v.numpy(), amax, (math.frexp(amax)[1] - 1) if amax > 0 else None, f.emax, E,
                      v.numpy() / X, deq / X, deq)


def block_table(steps: BlockSteps, codes: list[str] | None = None) -> pd.DataFrame:
    df = pd.DataFrame({"element": np.arange(len(steps.values)), "value V": steps.values, "V / X": steps.scaled,
                       "on the grid P": steps.grid, "X · P": steps.dequantised, "error": steps.error})
    if codes is not None:
        df.insert(4, "4-bit code", codes)
    return df


def e2m1_codes(values) -> list[str]:
    """The 4-bit codes (sign, exponent, mantissa) the checkpoint stores for a block, via pack_mxfp4."""
    v = torch.as_tensor(np.asarray(values, dtype=np.float32))
    packed, _ = pack_mxfp4(v)
    nibbles = torch.stack([packed & 15, packed >> 4], 1).reshape(-1)[: v.numel()]
    return [f"{int(c) >> 3} {(int(c) >> 1) & 3:02b} {int(c) & 1}" for c in nibbles]
