"""MX fake quantisation against ARCHITECTURE.md section 7's worked examples and a brute-force
nearest-grid-point reference written here with numpy."""
import math

import numpy as np
import pytest
import torch

from model.quant import bits_per_value, element_grid, mx_fake_quant, pack_mxfp4, packed_bytes, unpack_mxfp4

# Non-negative values in code order, enumerated from the bit layouts (OCP MX v1.0):
# E2M1: bias 1, 1 mantissa bit. E4M3: bias 7, 3 mantissa bits, S.1111.111 is NaN.
E2M1_REF = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)
E4M3_REF = np.array([(m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
                     for e in range(16) for m in range(8) if not (e == 15 and m == 7)])
REF = {"e2m1": (E2M1_REF, 2), "e4m3": (E4M3_REF, 8)}   # grid, emax


def brute_force(x: np.ndarray, fmt: str, block: int = 32) -> np.ndarray:
    """Blocks of the flattening; X from frexp; nearest grid point, ties to the even code."""
    grid, emax = REF[fmt]
    signed = np.concatenate([-grid[::-1], grid])                # ascending, codes mirrored
    codes = np.concatenate([np.arange(len(grid))[::-1], np.arange(len(grid))])
    flat = x.astype(np.float64).reshape(-1)
    out = np.zeros_like(flat)
    for start in range(0, len(flat), block):
        v = flat[start:start + block]
        amax = np.abs(v).max()
        if amax == 0:
            continue
        _, e = math.frexp(amax)                                  # amax = m 2^e, m in [0.5, 1)
        X = 2.0 ** min(max(e - 1 - emax, -127), 127)
        for i, val in enumerate(v / X):
            dist = np.abs(signed - val)
            best = np.flatnonzero(dist == dist.min())
            if len(best) > 1:                                    # a tie: take the even code
                best = [b for b in best if codes[b] % 2 == 0]
            out[start + i] = signed[best[0]] * X
    return out.reshape(x.shape)


def test_e2m1_worked_example():
    x = torch.tensor([0.1, -0.25, 0.3, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -3.7, 7.9])
    y = mx_fake_quant(x, "e2m1")
    assert y.tolist() == [0, -0.0, 0.5, 1, 1, 2, 2, 4, 4, -4, 6]
    assert math.copysign(1, y[1].item()) == -1                  # -0.25 -> -0, sign kept


def test_e4m3_worked_example():
    x = torch.tensor([1000, 3.14159, 0.01, -100, 0.3])
    assert mx_fake_quant(x, "e4m3").tolist() == [896, 3.25, 0.01171875, -96, 0.3125]


def test_ties_go_to_even():
    # amax 5 -> X = 2^(2 - 2) = 1, so these are the E2M1 ties of ARCHITECTURE sec 7
    x = torch.tensor([0.75, 1.25, 2.5, 5.0, -0.75, -2.5, 0.25, 1.75])
    assert mx_fake_quant(x, "e2m1").tolist() == [1, 1, 2, 4, -1, -2, 0, 2]
    # E4M3, X = 1 (amax 300): 1.0625 between 1 and 1.125 -> 1; 1.1875 between 1.125 and 1.25 -> 1.25
    x = torch.tensor([1.0625, 1.1875, 300.0, 2.0 ** -10])     # 2^-10: half the smallest subnormal -> 0
    assert mx_fake_quant(x, "e4m3").tolist() == [1.0, 1.25, 288.0, 0.0]


def _random_blocks(seed: int, shape=(5, 37)) -> torch.Tensor:
    # blocks at very different magnitudes, including a tail block and exact zeros
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.pow(10.0, torch.empty(shape[0], 1).uniform_(-4, 4, generator=g))
    x[0, :3] = 0
    return x


@pytest.mark.parametrize("fmt", ["e2m1", "e4m3"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_brute_force(fmt, seed):
    x = _random_blocks(seed)
    ref = brute_force(x.numpy(), fmt)
    assert np.array_equal(mx_fake_quant(x, fmt).numpy(), ref.astype(np.float32))
    # float64 input takes the same path and stays float64
    y64 = mx_fake_quant(x.double(), fmt)
    assert y64.dtype == torch.float64 and np.array_equal(y64.numpy(), ref)


@pytest.mark.parametrize("fmt", ["e2m1", "e4m3"])
def test_per_row_blocks_never_cross_rows(fmt):
    x = _random_blocks(3, (6, 40))                              # rows of 40: 32 + a tail of 8
    ref = np.stack([brute_force(r, fmt) for r in x.numpy()])
    assert np.array_equal(mx_fake_quant(x, fmt, per_row=True).numpy(), ref.astype(np.float32))
    short = _random_blocks(4, (6, 12))                          # rows shorter than a block: one each
    ref = np.stack([brute_force(r, fmt) for r in short.numpy()])
    assert np.array_equal(mx_fake_quant(short, fmt, per_row=True).numpy(), ref.astype(np.float32))


@pytest.mark.parametrize("fmt", ["e2m1", "e4m3"])
def test_outputs_on_grid_times_power_of_two(fmt):
    grid, emax = REF[fmt]
    x = _random_blocks(5, (8, 32))
    y = mx_fake_quant(x, fmt).double().numpy()
    for xb, yb in zip(x.double().numpy(), y):                   # one row = one block
        amax = np.abs(xb).max()
        if amax == 0:
            assert not yb.any()
            continue
        X = 2.0 ** (math.frexp(amax)[1] - 1 - emax)
        assert np.isin(np.abs(yb) / X, grid).all()


@pytest.mark.parametrize("fmt", ["e2m1", "e4m3"])
def test_idempotent(fmt):
    y = mx_fake_quant(_random_blocks(6, (4, 50)), fmt)
    assert torch.equal(mx_fake_quant(y, fmt), y)


def test_zeros_and_dtypes():
    for fmt in ("e2m1", "e4m3"):
        assert torch.equal(mx_fake_quant(torch.zeros(3, 40), fmt), torch.zeros(3, 40))
        xb = torch.randn(2, 3, 33).to(torch.bfloat16)
        yb = mx_fake_quant(xb, fmt)
        assert yb.dtype == torch.bfloat16 and yb.shape == xb.shape
    with pytest.raises(ValueError):
        mx_fake_quant(torch.ones(4), "e3m2")


def test_scale_clamped_to_e8m0_range():
    # amax far below 2^-127: the scale stops at 2^-127, so small values flush to zero, never NaN
    x = torch.tensor([2.0 ** -140, -(2.0 ** -141)], dtype=torch.float64)
    assert mx_fake_quant(x, "e2m1").tolist() == [0.0, -0.0]
    x = torch.tensor([2.0 ** -126, 2.0 ** -127], dtype=torch.float64)     # X = 2^-127 exactly
    assert mx_fake_quant(x, "e2m1").tolist() == [2.0 ** -126, 2.0 ** -127]


def test_element_grids():
    assert np.array_equal(element_grid("e2m1").numpy(), E2M1_REF)
    assert np.array_equal(element_grid("e4m3").numpy(), E4M3_REF)
    assert element_grid("e4m3").max().item() == 448


@pytest.mark.parametrize("shape", [(11,), (37,), (3, 64), (5, 7), (2, 16, 8)])
def test_pack_unpack_round_trip(shape):
    x = torch.randn(shape) * 3
    codes, scales = pack_mxfp4(x)
    n = x.numel()
    assert codes.dtype == torch.uint8 and scales.dtype == torch.uint8
    assert codes.numel() == (n + 1) // 2 and scales.numel() == -(-n // 32)
    assert codes.numel() + scales.numel() == packed_bytes(n)
    assert torch.equal(unpack_mxfp4(codes, scales, shape), mx_fake_quant(x, "e2m1"))


def test_unpack_every_code_at_every_scale():
    """Each byte holds two codes (low nibble first), each block one E8M0 scale: every (byte, scale) pair decodes to
    the E2M1 grid value times 2^(scale - 127), built here from the OCP MX tables with Python's exact floats."""
    codes = torch.arange(256, dtype=torch.uint8).repeat(254)            # 16 blocks of 32 values per scale
    scales = torch.arange(1, 255, dtype=torch.uint8).repeat_interleave(16)
    n = codes.numel() * 2
    grid = list(E2M1_REF) + [-v for v in E2M1_REF]
    want = [grid[(b >> (4 * half)) & 15] * 2.0 ** (int(scales[i // 32]) - 127)
            for i, (b, half) in enumerate((b, h) for b in codes.tolist() for h in (0, 1))]
    for dtype in (torch.float32, torch.float64):
        got = unpack_mxfp4(codes, scales, (n,), dtype=dtype)
        assert got.dtype == dtype
        assert torch.equal(got, torch.tensor(want, dtype=torch.float64).to(dtype))


def test_pack_codes_of_worked_example():
    x = torch.tensor([0.1, -0.25, 0.3, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -3.7, 7.9])
    codes, scales = pack_mxfp4(x)
    assert scales.tolist() == [127]                              # X = 2^0, E8M0 bias 127
    # values 0, -0 | 0.5, 1 | 1, 2 | 2, 4 | 4, -4 | 6 -> codes (0, 8) (1, 2) (2, 4) (4, 6) (6, 14) (7, pad)
    assert codes.tolist() == [0 | 8 << 4, 1 | 2 << 4, 2 | 4 << 4, 4 | 6 << 4, 6 | 14 << 4, 7]


def test_bits_per_value():
    assert bits_per_value("e2m1") == 4.25 and bits_per_value("e4m3") == 8.25
    n = 64 * 32
    assert packed_bytes(n) * 8 / n == 4.25


@pytest.mark.parametrize("fmt", ["e2m1", "e4m3"])
def test_straight_through_gradient(fmt):
    x = torch.randn(3, 40, requires_grad=True)
    y = mx_fake_quant(x, fmt)
    assert torch.equal(y, mx_fake_quant(x.detach(), fmt))
    (y * 1.0).sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))
