"""The MX element formats and their storage cost, torch-free (OCP Microscaling spec v1.0), so that a
page that only names them (the glossary, the tour) needs no torch. model.quant quantises with them."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ElementFormat:
    name: str
    mbits: int      # explicit mantissa bits
    emin: int       # exponent of the smallest normal; subnormals share its spacing
    emax: int       # exponent of the largest normal: X = 2^(floor(log2 amax) - emax)
    max: float      # largest finite magnitude; values beyond it saturate
    bits: int       # storage bits per element


# OCP MX v1.0 Table 1: E2M1 (bias 1, no inf/nan), E4M3 (bias 7, only S.1111.111 is NaN, max 448).
FORMATS = {
    "e2m1": ElementFormat("e2m1", mbits=1, emin=0, emax=2, max=6.0, bits=4),
    "e4m3": ElementFormat("e4m3", mbits=3, emin=-6, emax=8, max=448.0, bits=8),
}
SCALE_BITS = 8                        # one E8M0 byte per block
E8M0_MIN, E8M0_MAX = -127, 127        # 2^(E - 127), E in 0..254 (255 is NaN)
# The 8 non-negative E2M1 values in code order: code = sign << 3 | index into this list.
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def bits_per_value(fmt: str, block: int = 32) -> float:
    # element bits plus the block's scale byte spread over its values: 4.25 (MXFP4), 8.25 (MXFP8)
    return FORMATS[fmt].bits + SCALE_BITS / block
