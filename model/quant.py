"""MXFP4 / MXFP8 fake quantisation (ARCHITECTURE.md section 7; OCP Microscaling spec v1.0).

A block of 32 consecutive values shares one power-of-two scale X (E8M0); each value is stored on a
small floating-point grid (E2M1 for MXFP4, E4M3 for MXFP8). Fake quantisation returns X * P, the
value the hardware would see after dequantising, so the rest of the model stays in float.
K3 runs routed-expert weights in MXFP4 and expert activations in MXFP8. This project's training passes
gradients straight through (the rounding is treated as identity); K3 quantises only in post-training and
the report names no gradient estimator (docs/ARCHITECTURE.md section 7).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from model.formats import E2M1_GRID, E8M0_MAX, E8M0_MIN, FORMATS, bits_per_value  # noqa: F401 - named here too


def element_grid(fmt: str) -> torch.Tensor:
    """Every non-negative finite value of the element format, ascending (for the Quantization lab)."""
    f = FORMATS[fmt]
    sub = [i * 2.0 ** (f.emin - f.mbits) for i in range(2 ** f.mbits)]             # 0 and subnormals
    normal = [(1 + m / 2 ** f.mbits) * 2.0 ** e for e in range(f.emin, f.emax + 1)
              for m in range(2 ** f.mbits)]
    return torch.tensor([v for v in sub + normal if v <= f.max], dtype=torch.float64)


def _pow2(e: torch.Tensor) -> torch.Tensor:
    # Exact 2^e for integer e in [-1022, 1023], built from float64 bits (exp2 need not be exact).
    return ((e.to(torch.int64) + 1023) << 52).view(torch.float64)


def _blocks(x: torch.Tensor, block: int, per_row: bool) -> torch.Tensor:
    # Row-major flattening cut into blocks, tail padded with zeros (zeros never change amax).
    # per_row: each row of the last dim is padded on its own, so rows (tokens) never share a scale.
    v = x.detach().to(torch.float64)
    rows = v.reshape(-1, x.shape[-1]) if (per_row and x.dim() > 0) else v.reshape(1, -1)
    block = min(block, rows.shape[1]) if per_row else block   # a short row is one block, unpadded
    pad = (-rows.shape[1]) % block
    if pad:
        rows = F.pad(rows, (0, pad))
    return rows.reshape(-1, block)                                      # [n_blocks, block]


def _quantise_blocks(blocks: torch.Tensor, fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(P on the element grid [n_blocks, block], scale exponent [n_blocks, 1]) in float64."""
    f = FORMATS[fmt]
    amax = blocks.abs().amax(1, keepdim=True)                           # [n_blocks, 1]
    # frexp: amax = m 2^e with m in [0.5, 1), so floor(log2 amax) = e - 1 exactly (no log2 rounding).
    # amax = 0 is lifted to 2^-126, which lands on the clamp at 2^-127; its P is 0 either way.
    _, e = torch.frexp(amax.clamp_min(2.0 ** -126))
    scale_exp = (e - (1 + f.emax)).clamp(E8M0_MIN, E8M0_MAX)             # [n_blocks, 1]
    y = blocks / _pow2(scale_exp)                                       # exact: division by 2^k
    # Grid spacing at |y|: 2^(floor(log2|y|) - mbits), floored at the subnormal spacing.
    _, ey = torch.frexp(y)
    step = _pow2(ey.clamp_min(f.emin + 1) - (1 + f.mbits))
    p = (torch.round(y / step) * step).clamp(-f.max, f.max)           # round() is half-to-even
    return p, scale_exp


def _fake_quant(x: torch.Tensor, fmt: str, block: int, per_row: bool) -> torch.Tensor:
    p, scale_exp = _quantise_blocks(_blocks(x, block, per_row), fmt)
    out = p * _pow2(scale_exp)                                          # [n_blocks, block]
    row = x.shape[-1] if (per_row and x.dim() > 0) else x.numel()
    rows = x.numel() // row if row else 0
    out = out.reshape(rows, -1)[:, :row]                               # drop each row's padding
    return out.reshape(x.shape).to(x.dtype)


def block_scale_exponents(x: torch.Tensor, fmt: str, block: int = 32) -> torch.Tensor:
    """E of every block's shared scale X = 2^E (the E8M0 byte minus 127), int64 [n_blocks], for the
    blocks of the row-major flattening that mx_fake_quant uses (for the Quantization lab)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown MX element format {fmt!r}; use one of {sorted(FORMATS)}")
    _, scale_exp = _quantise_blocks(_blocks(x, block, per_row=False), fmt)
    return scale_exp.reshape(-1).to(torch.int64)


class _StraightThrough(torch.autograd.Function):
    # Forward: the quantised value. Backward: identity (straight-through estimator): this project's choice; the
    # K3 report names no estimator (K3 quantises in post-training, SFT and RL, report section 4.1).
    @staticmethod
    def forward(ctx, x, fmt, block, per_row):
        return _fake_quant(x, fmt, block, per_row)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None, None


def mx_fake_quant(x: torch.Tensor, fmt: str, block: int = 32, *, per_row: bool = False) -> torch.Tensor:
    """Quantise to MX (fmt "e2m1" = MXFP4, "e4m3" = MXFP8) and dequantise; same shape and dtype.

    Blocks are `block` consecutive elements of the row-major flattening (tail padded). With
    per_row=True every row of the last dimension starts new blocks, e.g. one token's activations.
    NaN/inf inputs are not handled (MX would mark the block NaN); they propagate as NaN.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown MX element format {fmt!r}; use one of {sorted(FORMATS)}")
    if x.numel() == 0:
        return x.clone()
    if x.requires_grad and torch.is_grad_enabled():
        return _StraightThrough.apply(x, fmt, block, per_row)
    return _fake_quant(x, fmt, block, per_row)


# ---- real storage of MXFP4: 4-bit codes two per byte + one E8M0 byte per block ----------------------

def pack_mxfp4(x: torch.Tensor, block: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes uint8 [ceil(n/2)], scales uint8 [n_blocks]) for the row-major flattening of x.

    Code = sign << 3 | index in E2M1_GRID; element 2i sits in the low nibble of byte i.
    Scale byte = E + 127 (E8M0 biased exponent).
    """
    n = x.numel()
    p, scale_exp = _quantise_blocks(_blocks(x, block, per_row=False), "e2m1")
    grid = torch.tensor(E2M1_GRID, dtype=torch.float64)
    mag = torch.searchsorted(grid, p.abs().reshape(-1)[:n])            # exact hits: p is on the grid
    code = mag | (torch.signbit(p.reshape(-1)[:n]).to(torch.int64) << 3)   # [n], keeps -0 as code 8
    if n % 2:
        code = F.pad(code, (0, 1))
    pairs = code.reshape(-1, 2)                                         # [ceil(n/2), 2]
    codes = (pairs[:, 0] | (pairs[:, 1] << 4)).to(torch.uint8)
    scales = (scale_exp.reshape(-1) + 127).to(torch.uint8)             # [n_blocks]
    return codes, scales


def unpack_mxfp4(codes: torch.Tensor, scales: torch.Tensor, shape, block: int = 32,
                 dtype: torch.dtype = torch.float32) -> torch.Tensor:
    shape = tuple(shape)
    n = 1
    for s in shape:
        n *= s
    # E2M1 values (3 significant bits) times 2^(E - 127), E < 255, are exact in float32 as in float64
    work = torch.float64 if dtype == torch.float64 else torch.float32
    grid = torch.tensor(E2M1_GRID, dtype=work)
    lut = torch.cat([grid, -grid])                                      # [16] code -> value
    pair = torch.stack([lut.repeat(16), lut.repeat_interleave(16)], 1)  # [256, 2] byte -> (low, high nibble)
    vals = pair.index_select(0, codes.to(torch.int32)).reshape(-1)[:n]  # [n]
    pad = (-n) % block
    if pad:
        vals = F.pad(vals, (0, pad))
    scale = _pow2(scales.to(torch.int64) - 127).to(work).unsqueeze(1)  # [n_blocks, 1]
    out = (vals.reshape(-1, block) * scale).reshape(-1)[:n]
    return out.reshape(shape).to(dtype)


def packed_bytes(n: int, block: int = 32) -> int:
    # bytes of pack_mxfp4 for n values: ceil(n/2) code bytes + ceil(n/block) scale bytes
    return (n + 1) // 2 + (n + block - 1) // block
