"""Attention Residuals (ARCHITECTURE.md section 1): closed forms vs instrumented reads, the Pre-Norm
identity at zero queries, the Block/Full relation, convexity of the read, parameter accounting."""
from __future__ import annotations

import math

import pytest
import torch

from model import accounting
from model.attnres import AttnResQuery, DepthState, block_sizes, link_count, vectors_alive
from model.config import K3Config

D, T = 4, 3
LAYERS = (1, 2, 5, 12, 13, 25, 93)
BLOCKS = (1, 2, 3, 12, None)        # None = Full


def plain_rms(x, eps):
    # Independent reference RMSNorm without gain.
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def make_modules(L, modules_per_layer=2, d=D, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    Ws = torch.randn(L, modules_per_layer, d, d, generator=g, dtype=dtype) / math.sqrt(d)
    # Non-linear so that the order and mix of the sources matter.
    return [[(lambda x, W=Ws[i, j]: torch.tanh(x @ W)) for j in range(modules_per_layer)] for i in range(L)]


def make_queries(L, modules_per_layer=2, d=D, scale=0.0, seed=1, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    qs = [[AttnResQuery(d).to(dtype) for _ in range(modules_per_layer)] for _ in range(L)]
    out = AttnResQuery(d).to(dtype)
    if scale:
        with torch.no_grad():
            for q in [q for row in qs for q in row] + [out]:
                q.proj.copy_(scale * torch.randn(d, generator=g, dtype=dtype))
                q.gain.copy_(1 + 0.5 * torch.randn(d, generator=g, dtype=dtype))
    return qs, out


def run_stack(emb, modules, queries, out_query, mode, block_size, eps=1e-5):
    """The per-layer recipe of DepthState's docstring. Returns (state, module inputs, final y)."""
    state = DepthState(emb, mode, block_size if block_size else 1)
    inputs = []
    for i, (mods, qs) in enumerate(zip(modules, queries)):
        state.begin_layer(i)
        for f, q in zip(mods, qs):
            h, _ = state.read(q)
            inputs.append(h)
            state.add(f(plain_rms(h, eps)))
    y, _ = state.read(out_query, "out")
    return state, inputs, y


# ---- closed forms -------------------------------------------------------------------------------

def test_closed_forms_at_k3_scale():
    assert link_count(93) == 4_371
    assert link_count(93, None, 2, True) == 17_578
    assert link_count(93, 12, 1) == 493
    assert link_count(93, 12, 2, True) == 1_003
    assert block_sizes(93, 12) == [12] * 7 + [9] == K3Config.full().attnres_blocks
    assert vectors_alive(93) == 187 and vectors_alive(93, 12) == 9


def test_table_formulas():
    # The table's own forms: L(L+1)/2, L(2L+1) + (2L+1), sum over 1-based n of n + (S_n - 1)(n + 1).
    for L in LAYERS:
        assert link_count(L) == L * (L + 1) // 2
        assert link_count(L, None, 2, True) == L * (2 * L + 1) + 2 * L + 1
        for S in (1, 2, 3, 12):
            sizes = block_sizes(L, S)
            assert sum(sizes) == L
            assert link_count(L, S, 1) == sum(n + (s - 1) * (n + 1) for n, s in enumerate(sizes, 1))


@pytest.mark.parametrize("L", LAYERS)
def test_trace_counts_equal_closed_forms(L):
    emb = torch.randn(1, T, D, dtype=torch.float64)
    mods = make_modules(L)
    qs, out = make_queries(L, scale=1.0)
    mods1, (qs1, out1) = make_modules(L, 1), make_queries(L, 1, scale=1.0)
    for S in BLOCKS:
        mode = "full" if S is None else "block"
        state, _, _ = run_stack(emb, mods, qs, out, mode, S)
        assert state.links == link_count(L, S, 2, True), (L, S)
        assert len(state.reads) == 2 * L + 1
        assert sum(a.shape[-1] for _, a, _ in state.reads) == state.links
        # The widest read is the output read, and it holds every vector kept alive.
        assert max(a.shape[-1] for _, a, _ in state.reads) == state.reads[-1][1].shape[-1] \
            == vectors_alive(L, S)
        # One module (one read) per layer, the usual picture, without the output read.
        state1, _, _ = run_stack(emb, mods1, qs1, out1, mode, S)
        assert state1.links - state1.reads[-1][1].shape[-1] == link_count(L, S, 1)
        assert state1.links == link_count(L, S, 1, True)
        assert state1.reads[-1][1].shape[-1] == vectors_alive(L, S, modules_per_layer=1)


def test_block_bookkeeping_by_hand():
    # L = 3, S_b = 2, worked from section 1: layer 0 reads the embedding alone, then seals it; layer 2
    # reads before sealing block 1 (layers 0..1).
    L = 3
    emb = torch.randn(2, T, D, dtype=torch.float64)
    outs = []
    mods = [[(lambda x, k=k: (outs.append(torch.full_like(x, float(k + 1))) or outs[-1]))
             for k in (2 * i, 2 * i + 1)] for i in range(L)]
    qs, out = make_queries(L, scale=1.0)
    state, inputs, _ = run_stack(emb, mods, qs, out, "block", 2)
    assert [r[0] for r in state.reads] == ["L0.attn", "L0.ffn", "L1.attn", "L1.ffn", "L2.attn",
                                           "L2.ffn", "out"]
    assert [r[2] for r in state.reads] == [["emb"], ["emb", "partial"], ["emb", "partial"],
                                           ["emb", "partial"], ["emb", "partial"],
                                           ["emb", "block 1", "partial"], ["emb", "block 1", "partial"]]
    assert state.links == 15 == link_count(3, 2, 2, True)
    assert torch.equal(inputs[0], emb)                        # h = partial when no block is sealed
    assert torch.equal(state.blocks[0], emb)
    assert torch.allclose(state.blocks[1], torch.full_like(emb, 1 + 2 + 3 + 4))   # layers 0 and 1
    assert torch.allclose(state.partial, torch.full_like(emb, 5 + 6))           # layer 2


def test_full_labels():
    emb = torch.randn(1, T, D, dtype=torch.float64)
    qs, out = make_queries(2, scale=1.0)
    state, _, _ = run_stack(emb, make_modules(2), qs, out, "full", None)
    assert state.reads[-1][2] == ["emb", "L0.attn", "L0.ffn", "L1.attn", "L1.ffn"]
    assert state.reads[3][2] == ["emb", "L0.attn", "L0.ffn", "L1.attn"]


# ---- the Pre-Norm identity at zero queries ------------------------------------------------------

def plain_prenorm(emb, modules, eps):
    # The standard residual stream h = h + f(RMSNorm(h)), written without AttnRes.
    h, inputs = emb, []
    for mods in modules:
        for f in mods:
            inputs.append(plain_rms(h, eps))
            h = h + f(plain_rms(h, eps))
    return inputs, plain_rms(h, eps)


@pytest.mark.parametrize("mode,S", [("full", None), ("block", 1), ("block", 3), ("block", 12)])
def test_zero_queries_equal_prenorm_residual(mode, S):
    # Uniform weights give h = (sum of sources) / S, and RMSNorm(x / S) = RMSNorm(x) exactly when the
    # norm has eps = 0; the sources always sum to the plain residual stream.
    L, eps = 13, 0.0
    emb = torch.randn(2, T, D, dtype=torch.float64)
    mods = make_modules(L)
    qs, out = make_queries(L)                                  # proj = 0: the initialisation
    state, inputs, y = run_stack(emb, mods, qs, out, mode, S, eps)
    ref_inputs, ref_y = plain_prenorm(emb, mods, eps)
    for a, b in zip(inputs, ref_inputs):
        torch.testing.assert_close(plain_rms(a, eps), b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(plain_rms(y, eps), ref_y, rtol=1e-12, atol=1e-12)
    for _, a, _ in state.reads:
        torch.testing.assert_close(a, torch.full_like(a, 1 / a.shape[-1]))


def test_zero_queries_with_eps_close_to_prenorm():
    # With the model's eps = 1e-5 the identity holds only up to O(eps * S^2 / mean(h^2)).
    L, eps = 12, 1e-5
    emb = torch.randn(2, T, D, dtype=torch.float64)
    mods = make_modules(L)
    qs, out = make_queries(L)
    _, _, y = run_stack(emb, mods, qs, out, "block", 12, eps)
    torch.testing.assert_close(plain_rms(y, eps), plain_prenorm(emb, mods, eps)[1], rtol=1e-3, atol=1e-3)


# ---- Block with one module per block is Full ----------------------------------------------------

def test_block_of_one_module_is_full():
    # Section 1 seals per layer, so the finest Block keeps one *layer* (attn + ffn summed) per source.
    # It equals Full exactly when each layer has one module: the same sources, reads and weights.
    L = 7
    emb = torch.randn(2, T, D, dtype=torch.float64)
    mods = make_modules(L, 1)
    qs, out = make_queries(L, 1, scale=1.0)
    sb, ib, yb = run_stack(emb, mods, qs, out, "block", 1)
    sf, i_f, yf = run_stack(emb, mods, qs, out, "full", None)
    assert sb.links == sf.links == link_count(L, 1, 1, True) == link_count(L, None, 1, True)
    for a, b in zip(ib + [yb], i_f + [yf]):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)
    for (_, a, _), (_, b, _) in zip(sb.reads, sf.reads):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)


def test_block_of_one_layer_is_not_full_with_two_modules():
    # With attention + FFN per layer a block of one layer merges two module outputs into one source.
    L = 4
    emb = torch.randn(2, T, D, dtype=torch.float64)
    mods = make_modules(L)
    qs, out = make_queries(L, scale=1.0)
    sb, _, yb = run_stack(emb, mods, qs, out, "block", 1)
    sf, _, yf = run_stack(emb, mods, qs, out, "full", None)
    assert sb.links < sf.links
    assert (yb - yf).abs().max() > 1e-6


# ---- the read ------------------------------------------------------------------------------------

def reference_read(sources, gain, proj, eps):
    # Section 1 written out per source with an explicit softmax.
    w = gain * proj
    logits = [(plain_rms(v.double(), eps) * w.double()).sum(-1) for v in sources]   # S x [B, T]
    m = torch.stack(logits).max(0).values
    e = [torch.exp(l - m) for l in logits]
    z = sum(e)
    a = [x / z for x in e]
    return sum(ai.unsqueeze(-1) * v.double() for ai, v in zip(a, sources)), torch.stack(a, -1)


def test_read_matches_reference_and_is_convex():
    g = torch.Generator().manual_seed(3)
    srcs = [torch.randn(2, 5, 8, generator=g) * (s + 1) for s in range(6)]
    q = AttnResQuery(8)
    with torch.no_grad():
        q.proj.copy_(torch.randn(8, generator=g))
        q.gain.copy_(torch.rand(8, generator=g) + 0.5)
    h, a = q(srcs)
    ref_h, ref_a = reference_read(srcs, q.gain.detach(), q.proj.detach(), q.eps)
    assert a.shape == (2, 5, 6) and a.dtype == torch.float32
    torch.testing.assert_close(a.double(), ref_a, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h.double(), ref_h, rtol=1e-5, atol=1e-5)
    assert (a >= 0).all()
    torch.testing.assert_close(a.sum(-1), torch.ones(2, 5))
    assert a.std() > 0.01                                     # not uniform: the query matters
    V = torch.stack(srcs, -2)
    assert (h >= V.min(-2).values - 1e-5).all() and (h <= V.max(-2).values + 1e-5).all()


def test_read_uses_normalised_keys_and_raw_values():
    # Scaling a source changes its value in the mix but not its key, hence not the weights.
    g = torch.Generator().manual_seed(4)
    srcs = [torch.randn(1, 3, 8, generator=g) for _ in range(3)]
    q = AttnResQuery(8)
    with torch.no_grad():
        q.proj.copy_(torch.randn(8, generator=g))
    h, a = q(srcs)
    h2, a2 = q([srcs[0] * 10, srcs[1], srcs[2]])
    torch.testing.assert_close(a, a2, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h2 - h, a[..., :1] * 9 * srcs[0], rtol=1e-4, atol=1e-5)


def test_read_keeps_source_dtype():
    srcs = [torch.randn(1, 3, 8).bfloat16() for _ in range(3)]
    q = AttnResQuery(8)
    with torch.no_grad():
        q.proj.normal_()
    h, a = q(srcs)
    assert h.dtype == torch.bfloat16 and a.dtype == torch.float32
    torch.testing.assert_close(a.sum(-1), torch.ones(1, 3))


def test_zero_init_is_uniform_and_gradients_flow():
    q = AttnResQuery(8)
    assert torch.equal(q.gain, torch.ones(8)) and torch.equal(q.proj, torch.zeros(8))
    srcs = [torch.randn(2, 3, 8) for _ in range(5)]
    h, a = q(srcs)
    torch.testing.assert_close(a, torch.full_like(a, 0.2))
    torch.testing.assert_close(h, torch.stack(srcs).mean(0))
    (h * torch.randn_like(h)).sum().backward()
    assert q.proj.grad.abs().sum() > 0                        # zero init still learns


def test_plain_mode_is_the_prenorm_residual():
    L, eps = 5, 1e-5
    emb = torch.randn(1, T, D, dtype=torch.float64)
    mods = make_modules(L)
    qs, out = make_queries(L)
    state, _, y = run_stack(emb, mods, qs, out, None, None, eps)
    assert state.links == 0 and state.reads == []
    torch.testing.assert_close(plain_rms(y, eps), plain_prenorm(emb, mods, eps)[1])


# ---- parameter accounting -----------------------------------------------------------------------

@pytest.mark.parametrize("cfg", [K3Config.tiny(), K3Config.micro()], ids=["tiny", "micro"])
def test_query_parameters_match_accounting(cfg):
    d, L = cfg.d_model, cfg.num_layers
    one = sum(p.numel() for p in AttnResQuery(d).parameters())
    assert one == 2 * d
    per_layer = 2 * one                                       # a read before attention and before FFN
    assert per_layer == accounting.per_layer_norms(cfg) - 2 * d   # minus the two pre-norm gains
    total = L * per_layer + one                               # plus the output read
    final_norm, prenorms = d, 2 * d * L
    assert total == accounting.count_params(cfg).breakdown["norms + AttnRes"] - final_norm - prenorms
