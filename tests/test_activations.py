"""SiTU-GLU against the properties the K3 report states (ARCHITECTURE.md section 4)."""
import torch

from model.activations import GLUFFN, situ_glu, swiglu


def test_bounded_by_100_where_swiglu_is_not():
    g = torch.linspace(-1e4, 1e4, 20001, dtype=torch.float64)
    grid_g, grid_u = torch.meshgrid(g[::100], g[::100], indexing="ij")
    out = situ_glu(grid_g, grid_u)
    assert out.abs().max() <= 100 and out.abs().max() > 99        # the cap is reached, never passed
    assert swiglu(grid_g, grid_u).abs().max() > 1e7


def test_gate_factor_minimum_matches_report():
    g = torch.linspace(-3, 0, 300001, dtype=torch.float64)
    gate = situ_glu(g, torch.full_like(g, 1e-6)) / (25 * torch.tanh(torch.tensor(1e-6 / 25, dtype=torch.float64)))
    i = gate.argmin()
    assert abs(gate[i].item() - (-0.2698)) < 5e-4 and abs(g[i].item() - (-1.22)) < 0.02
    swish = torch.nn.functional.silu(g)
    assert abs(swish.min().item() - (-0.2785)) < 5e-4             # Swish: -0.2785 at -1.28
    assert gate.max() < 4 + 1e-9


def test_first_order_match_with_swiglu_and_limit_of_large_caps():
    x = torch.randn(1000, dtype=torch.float64) * 1e-3
    y = torch.randn(1000, dtype=torch.float64) * 1e-3
    assert torch.allclose(situ_glu(x, y), swiglu(x, y), rtol=1e-3, atol=1e-12)
    g, u = torch.randn(1000, dtype=torch.float64) * 5, torch.randn(1000, dtype=torch.float64) * 50
    assert torch.allclose(situ_glu(g, u, 1e6, 1e6), swiglu(g, u), rtol=1e-6)
    assert not torch.allclose(situ_glu(g, u), swiglu(g, u), rtol=1e-2)


def test_fp32_compute_and_dtype_round_trip():
    g = torch.randn(64, dtype=torch.bfloat16) * 30
    out = situ_glu(g, g)
    assert out.dtype == torch.bfloat16 and out.float().abs().max() <= 100


def test_glu_ffn_shapes_and_activation_switch():
    torch.manual_seed(0)
    ffn = GLUFFN(8, 16)
    x = torch.randn(2, 5, 8) * 40
    assert ffn(x).shape == x.shape
    assert sum(p.numel() for p in ffn.parameters()) == 3 * 8 * 16
    assert not torch.allclose(ffn(x), ffn(x, activation="swiglu"))
