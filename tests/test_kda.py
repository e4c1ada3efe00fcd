"""Kimi Delta Attention (ARCHITECTURE.md section 2): kernels against the worked example and each other,
the layer against its own decode path, its parameter count against the closed form."""
import itertools
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from model import accounting, fast
from model import kda as kda_mod
from model.config import K3Config
from model.kda import KDACache, KimiDeltaAttention, kda_chunked, kda_recurrent

KERNELS = [kda_recurrent, kda_chunked]
f64 = torch.float64


def random_inputs(B=2, T=7, H=2, K=8, V=4, dtype=f64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen, dtype=dtype)
    k = F.normalize(torch.randn(B, T, H, K, generator=gen, dtype=dtype), dim=-1)
    v = torch.randn(B, T, H, V, generator=gen, dtype=dtype)
    g = -5 * torch.rand(B, T, H, K, generator=gen, dtype=dtype)          # log decay in (-5, 0)
    beta = torch.rand(B, T, H, generator=gen, dtype=dtype)
    s0 = torch.randn(B, H, K, V, generator=gen, dtype=dtype)
    return q, k, v, g, beta, s0


# ---- kernels ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kernel", KERNELS)
def test_worked_example(kernel):
    # ARCHITECTURE.md section 2: H = 1, d_k = 2, d_v = 1, scale 1.
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=f64).view(1, 2, 1, 2)
    k = torch.tensor([[1.0, 0.0], [0.6, 0.8]], dtype=f64).view(1, 2, 1, 2)
    v = torch.tensor([[2.0], [3.0]], dtype=f64).view(1, 2, 1, 1)
    g = torch.tensor([[0.5, 0.5], [0.5, 0.25]], dtype=f64).log().view(1, 2, 1, 2)
    beta = torch.tensor([1.0, 0.5], dtype=f64).view(1, 2, 1)
    o, S = kernel(q, k, v, g, beta, scale=1.0)
    assert o.shape == (1, 2, 1, 1) and S.shape == (1, 1, 2, 1)
    torch.testing.assert_close(o.flatten(), torch.tensor([2.0, 0.96], dtype=f64), rtol=0, atol=1e-14)
    torch.testing.assert_close(S.flatten(), torch.tensor([1.72, 0.96], dtype=f64), rtol=0, atol=1e-14)


def test_worked_example_in_chunks_of_one():
    # Same example with chunk_size 1: every token crosses a chunk boundary (the state hand-over).
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=f64).view(1, 2, 1, 2)
    k = torch.tensor([[1.0, 0.0], [0.6, 0.8]], dtype=f64).view(1, 2, 1, 2)
    v = torch.tensor([[2.0], [3.0]], dtype=f64).view(1, 2, 1, 1)
    g = torch.tensor([[0.5, 0.5], [0.5, 0.25]], dtype=f64).log().view(1, 2, 1, 2)
    beta = torch.tensor([1.0, 0.5], dtype=f64).view(1, 2, 1)
    o, S = kda_chunked(q, k, v, g, beta, scale=1.0, chunk_size=1)
    torch.testing.assert_close(o.flatten(), torch.tensor([2.0, 0.96], dtype=f64), rtol=0, atol=1e-14)
    torch.testing.assert_close(S.flatten(), torch.tensor([1.72, 0.96], dtype=f64), rtol=0, atol=1e-14)


def naive_delta_rule(q, k, v, g, beta, scale, s0):
    # Independent reference for one head, written as the section 2 equations with explicit matrices:
    # S <- diag(alpha) S; S <- (I - beta k k^T) S + beta k v^T; o = S^T q.
    K = q.shape[-1]
    S, outs = s0.clone(), []
    for t in range(q.shape[0]):
        S = torch.diag(g[t].exp()) @ S
        S = (torch.eye(K, dtype=f64) - beta[t] * torch.outer(k[t], k[t])) @ S + beta[t] * torch.outer(k[t], v[t])
        outs.append(S.T @ (scale * q[t]))
    return torch.stack(outs), S


def test_recurrent_matches_matrix_form():
    q, k, v, g, beta, s0 = random_inputs(B=1, T=9, H=2)
    o, S = kda_recurrent(q, k, v, g, beta, scale=0.7, initial_state=s0)
    for h in range(2):
        o_ref, S_ref = naive_delta_rule(q[0, :, h], k[0, :, h], v[0, :, h], g[0, :, h], beta[0, :, h],
                                        0.7, s0[0, h])
        torch.testing.assert_close(o[0, :, h], o_ref, rtol=0, atol=1e-12)
        torch.testing.assert_close(S[0, h], S_ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("T,chunk,with_state",
                         list(itertools.product([1, 5, 63, 64, 65, 130], [16, 64], [False, True])))
def test_chunked_equals_recurrent_float64(T, chunk, with_state):
    q, k, v, g, beta, s0 = random_inputs(B=2, T=T, H=2, K=8, V=4, seed=T)
    init = s0 if with_state else None
    o_r, S_r = kda_recurrent(q, k, v, g, beta, initial_state=init)
    o_c, S_c = kda_chunked(q, k, v, g, beta, initial_state=init, chunk_size=chunk)
    assert o_c.shape == (2, T, 2, 4) and S_c.shape == (2, 2, 8, 4)
    assert (o_r - o_c).abs().max() < 1e-12            # measured ~1e-14
    assert (S_r - S_c).abs().max() < 1e-12


@pytest.mark.parametrize("dtype,tol", [(f64, 1e-12), (torch.float32, 2e-5)])
def test_factorised_and_pairwise_decays_agree(monkeypatch, dtype, tol):
    # kda_chunked forms the intra-chunk decays e^(G_i - G_j) either as two factors around the chunk's middle
    # token (a chunk that decays by at most FACTOR_SPAN) or pairwise with the masked entries at -inf. Each is
    # checked against the recurrent reference, with decays up to the span's limit and tiny q and k (the
    # factors' denormal risk).
    q, k, v, _, beta, s0 = random_inputs(B=1, T=48, H=2, dtype=dtype, seed=3)
    g = torch.full_like(q, -kda_mod.FACTOR_SPAN / 16 * 0.999)     # each chunk of 16 decays just under the limit
    q, k = q * 1e-3, k * 1e-3
    o_r, S_r = kda_recurrent(q, k, v, g, beta, initial_state=s0)
    for span in (kda_mod.FACTOR_SPAN, -1.0):                       # factorised, then pairwise
        monkeypatch.setattr(kda_mod, "FACTOR_SPAN", span)
        o_c, S_c = kda_chunked(q, k, v, g, beta, initial_state=s0, chunk_size=16)
        assert torch.isfinite(o_c).all()
        assert (o_c - o_r).abs().max() < tol * o_r.abs().max() and (S_c - S_r).abs().max() < tol * S_r.abs().max()


def test_the_trained_models_decays_take_the_factorised_form(monkeypatch):
    # the factorised form's speed only counts if the live model's own decays use it: every chunk of 16 of the
    # shipped checkpoint's 69 KDA layers, over 128 tokens of the held-out text, decays by at most FACTOR_SPAN
    from model.checkpoint import load_pretrained
    model, tok = load_pretrained()
    spans, kernel = [], kda_mod.kda_chunked

    def spy(q, k, v, g, beta, scale=None, initial_state=None, chunk_size=64):
        C = min(chunk_size, g.shape[1])
        padded = F.pad(g, (0, 0, 0, 0, 0, -g.shape[1] % C))
        spans.append(float((-padded.unflatten(1, (-1, C))[:, :, 1:].sum(2)).max()))   # G_0 - G_last
        return kernel(q, k, v, g, beta, scale, initial_state, chunk_size)

    monkeypatch.setattr(kda_mod, "kda_chunked", spy)
    text = (Path(__file__).resolve().parent.parent / "assets" / "heldout_sample.txt").read_text()
    with torch.inference_mode(), fast.off():       # the torch path (training; a server before its kernels load)
        model(torch.tensor([tok.encode(text)[:128]]), record=False)
    assert len(spans) == 69 and max(spans) <= kda_mod.FACTOR_SPAN


def test_strong_decay_stays_finite():
    # g at the bound over a 64-token chunk: exp(-5 * 64) underflows and exp(+320) would overflow in
    # float32; only masked differences are exponentiated, so nothing becomes inf or nan.
    q, k, v, _, beta, s0 = random_inputs(B=1, T=64, H=1, dtype=torch.float32)
    g = torch.full_like(q, -4.999)
    o_r, S_r = kda_recurrent(q, k, v, g, beta, initial_state=s0)
    o_c, S_c = kda_chunked(q, k, v, g, beta, initial_state=s0, chunk_size=64)
    assert torch.isfinite(o_c).all() and torch.isfinite(S_c).all()
    torch.testing.assert_close(o_c, o_r, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(S_c, S_r, rtol=1e-4, atol=1e-4)


def test_dtypes():
    q, k, v, g, beta, s0 = random_inputs(T=20, dtype=torch.float32)
    o_r, _ = kda_recurrent(q, k, v, g, beta)
    o_c, S_c = kda_chunked(q, k, v, g, beta, chunk_size=8)
    assert o_c.dtype == torch.float32 and S_c.dtype == torch.float32
    torch.testing.assert_close(o_c, o_r, rtol=1e-4, atol=1e-5)
    bf = [t.bfloat16() for t in (q, k, v, g, beta)]
    o_b, S_b = kda_chunked(*bf, chunk_size=8)
    assert o_b.dtype == torch.bfloat16 and S_b.dtype == torch.float32   # computed in float32


def test_state_size_is_fixed():
    sizes = set()
    for T in (1, 17, 300):
        q, k, v, g, beta, _ = random_inputs(B=1, T=T, H=2, K=8, V=4)
        for kernel in KERNELS:
            sizes.add(tuple(kernel(q, k, v, g, beta)[1].shape))
    assert sizes == {(1, 2, 8, 4)}


def test_gradients_finite():
    q, k, v, g, beta, s0 = random_inputs(T=40, dtype=torch.float32)
    g = g.clone().requires_grad_()
    q = q.clone().requires_grad_()
    o, S = kda_chunked(q, k, v, g, beta, initial_state=s0, chunk_size=16)
    (o.square().sum() + S.sum()).backward()
    assert torch.isfinite(g.grad).all() and torch.isfinite(q.grad).all() and g.grad.abs().sum() > 0


# ---- the layer ----------------------------------------------------------------------------------

def make_layer(cfg, seed=0, dtype=f64):
    torch.manual_seed(seed)
    return KimiDeltaAttention(cfg).to(dtype)


@pytest.mark.parametrize("cfg", [K3Config.tiny(), K3Config.micro()], ids=["tiny", "micro"])
def test_param_count_matches_accounting(cfg):
    layer = KimiDeltaAttention(cfg)
    assert sum(p.numel() for p in layer.parameters()) == accounting.kda_layer(cfg)


def test_init_is_deterministic():
    a, b = make_layer(K3Config.micro(), seed=3), make_layer(K3Config.micro(), seed=3)
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert na == nb and torch.equal(pa, pb)


@pytest.mark.parametrize("chunked", [True, False])
@pytest.mark.parametrize("prefill", [0, 1, 2, 7])
def test_decode_equals_full_forward(prefill, chunked):
    cfg = K3Config.micro()
    layer = make_layer(cfg)
    x = torch.randn(2, 12, cfg.d_model, dtype=f64)
    y_full, cache_full = layer(x)
    ys, cache = [], None
    if prefill:
        y, cache = layer(x[:, :prefill], chunked=chunked)
        ys.append(y)
    for t in range(prefill, 12):                          # token by token, prefill of 2 < conv - 1
        y, cache = layer(x[:, t:t + 1], cache, chunked=chunked)
        ys.append(y)
    assert (torch.cat(ys, 1) - y_full).abs().max() < 1e-10
    assert (cache.state - cache_full.state).abs().max() < 1e-10
    torch.testing.assert_close(cache.conv_tail, cache_full.conv_tail, rtol=0, atol=1e-12)


def test_multi_token_continuation():
    cfg = K3Config.tiny()
    layer = make_layer(cfg)
    x = torch.randn(1, 40, cfg.d_model, dtype=f64)
    y_full, _ = layer(x)
    y1, cache = layer(x[:, :23])
    y2, _ = layer(x[:, 23:], cache)
    assert (torch.cat([y1, y2], 1) - y_full).abs().max() < 1e-10


def test_module_chunked_equals_recurrent():
    cfg = K3Config.tiny()
    layer = make_layer(cfg)
    x = torch.randn(2, 37, cfg.d_model, dtype=f64)
    y_c, c_c = layer(x, chunked=True)
    y_r, c_r = layer(x, chunked=False)
    assert (y_c - y_r).abs().max() < 1e-10 and (c_c.state - c_r.state).abs().max() < 1e-10
    layer32 = make_layer(cfg, dtype=torch.float32)
    x32 = x.float()
    torch.testing.assert_close(layer32(x32)[0], layer32(x32, chunked=False)[0], rtol=1e-4, atol=1e-5)


def test_cache_size_is_fixed():
    cfg = K3Config.micro()
    layer = make_layer(cfg)
    numels = {layer(torch.randn(1, T, cfg.d_model, dtype=f64))[1].numel() for T in (1, 3, 50)}
    H, dk, P = cfg.kda_heads, cfg.kda_head_dim, cfg.kda_proj
    assert numels == {H * dk * dk + (cfg.kda_conv - 1) * 3 * P}


def test_gate_and_beta_ranges_and_normalised_qk():
    cfg = K3Config.tiny()
    layer = make_layer(cfg)
    q, k, v, g, beta = layer.kernel_inputs(3 * torch.randn(2, 30, cfg.d_model, dtype=f64))
    H, dk = cfg.kda_heads, cfg.kda_head_dim
    assert q.shape == k.shape == v.shape == g.shape == (2, 30, H, dk) and beta.shape == (2, 30, H)
    assert (g > cfg.kda_gate_bound).all() and (g < 0).all()
    assert (beta > 0).all() and (beta < 1).all()
    for t in (q, k):   # x / sqrt(sum x^2 + 1e-6): unit norm up to the epsilon
        n2 = t.square().sum(-1)
        assert (n2 < 1).all() and (n2 > 0.99).all()


def test_kernel_inputs_follow_equations():
    # Recompute v and the gate from the named slices of the fused projection, with the conv written
    # as an explicit sum over taps (current token on the last tap, zeros before the start).
    cfg = K3Config.micro()
    layer = make_layer(cfg)
    x = torch.randn(1, 6, cfg.d_model, dtype=f64)
    _, _, v, g, beta = layer.kernel_inputs(x)
    W = layer.in_proj.weight
    H, dk, P, c = cfg.kda_heads, cfg.kda_head_dim, cfg.kda_proj, cfg.kda_conv
    # the fused projection's rows, in the order the module's comment gives: W_q|W_k|W_v|W_fa|W_b|W_g
    lay = {"W_v": (2 * P, 3 * P), "W_fa": (3 * P, 3 * P + dk), "W_b": (3 * P + dk, 3 * P + dk + H)}
    xv = x[0] @ W[slice(*lay["W_v"])].T                                # [T, P]
    w = layer.conv.weight[2 * P:, 0]                                   # [P, c] the v channels
    for t in range(6):
        acc = sum(w[:, c - 1 - s] * xv[t - s] for s in range(c) if t - s >= 0)
        torch.testing.assert_close(v[0, t].flatten(), F.silu(acc), rtol=0, atol=1e-12)
    z = (x[0] @ W[slice(*lay["W_fa"])].T) @ layer.W_fb.weight.T         # [T, P]
    g_ref = -5 * torch.sigmoid(layer.A_log.exp()[:, None] * (z.view(6, H, dk) + layer.dt_bias))
    torch.testing.assert_close(g[0], g_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(beta[0], torch.sigmoid(x[0] @ W[slice(*lay["W_b"])].T), rtol=0, atol=1e-12)


def test_layer_is_causal():
    cfg = K3Config.tiny()
    layer = make_layer(cfg)
    x = torch.randn(1, 40, cfg.d_model, dtype=f64)
    x2 = x.clone()
    x2[:, 25] += 1.0
    for chunked in (True, False):
        y, y2 = layer(x, chunked=chunked)[0], layer(x2, chunked=chunked)[0]
        assert (y[:, :25] - y2[:, :25]).abs().max() < 1e-12
        assert (y[:, 25] - y2[:, 25]).abs().max() > 1e-6


def test_cache_numel():
    cache = KDACache(state=torch.zeros(2, 3, 4, 5), conv_tail=torch.zeros(2, 3, 6))
    assert cache.numel() == 2 * 3 * 4 * 5 + 2 * 3 * 6
