"""The compiled inference kernels (model/fast.py) against the plain references they replace, and where they run.

References are computed in float64 from the same float32 inputs (kda_recurrent; a loop over tokens and slots for the
experts), so a kernel that reads a wrong weight, skips the decay or mixes up gate and up is off by far more than
float32 rounding."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from model import fast
from model.activations import ACTIVATIONS
from model.config import K3Config
from model.k3 import K3Model
from model.kda import KimiDeltaAttention, kda_recurrent
from model.moe import LatentMoE, RoutingOverride
from model.quant import mx_fake_quant

# loaded here (an app test before may have asked for them later: app.live calls fast.later())
pytestmark = pytest.mark.skipif(not fast.warm(), reason="numba is not installed or K3_FAST=0")


def kda_inputs(B, T, H, K, V, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    k = F.normalize(torch.randn(B, T, H, K, generator=g), dim=-1)
    v = torch.randn(B, T, H, V, generator=g)
    gate = -torch.rand(B, T, H, K, generator=g) * 2.0              # log decay in [-2, 0]
    beta = torch.rand(B, T, H, generator=g)
    return q, k, v, gate, beta


@pytest.mark.parametrize("B,T,H,K,V", [(1, 1, 1, 4, 4), (2, 37, 2, 16, 16), (1, 64, 2, 16, 8), (3, 5, 1, 8, 12)])
@pytest.mark.parametrize("with_state", [False, True])
def test_kda_equals_the_recurrence(B, T, H, K, V, with_state):
    q, k, v, g, beta = kda_inputs(B, T, H, K, V)
    init = torch.randn(B, H, K, V) if with_state else None
    kept = None if init is None else init.clone()
    o, S = fast.kda(q, k, v, g, beta, K ** -0.5, init)
    o_ref, S_ref = kda_recurrent(*(t.double() for t in (q, k, v, g, beta)), K ** -0.5,
                                 None if init is None else init.double())
    assert o.dtype == S.dtype == torch.float32 and o.shape == (B, T, H, V) and S.shape == (B, H, K, V)
    torch.testing.assert_close(o.double(), o_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(S.double(), S_ref, rtol=1e-5, atol=1e-5)
    if init is not None:
        assert torch.equal(init, kept)                             # the caller's state is not written


def test_kda_of_no_tokens_hands_the_state_back():
    q, k, v, g, beta = kda_inputs(2, 0, 2, 4, 4)
    init = torch.randn(2, 2, 4, 4)
    o, S = fast.kda(q, k, v, g, beta, 0.5, init)
    assert o.shape == (2, 0, 2, 4) and torch.equal(S, init)


def experts_reference(z, idx, p, wg, wu, wd, act, quant_act=False):
    """sum_s p[n, s] E_idx[n, s](z[n]) one token and slot at a time, in float64."""
    z, p, wg, wu, wd = (t.double() for t in (z, p, wg, wu, wd))
    if quant_act:
        z = mx_fake_quant(z, "e4m3", per_row=True)
    out = torch.zeros(z.shape[0], wd.shape[1], dtype=torch.float64)
    for n in range(z.shape[0]):
        for s in range(idx.shape[1]):
            e = int(idx[n, s])
            h = act(wg[e] @ z[n], wu[e] @ z[n])                   # [f]: matrices stored [out, in]
            if quant_act:
                h = mx_fake_quant(h[None], "e4m3", per_row=True)[0]
            out[n] += p[n, s] * (wd[e] @ h)
    return out


@pytest.mark.parametrize("N,k,E,f,w", [(1, 1, 4, 2, 2), (5, 16, 896, 8, 16), (64, 4, 10, 8, 16), (3, 6, 32, 4, 8)])
@pytest.mark.parametrize("act", ["situ_glu", "swiglu"])
def test_experts_equal_the_loop_over_tokens_and_slots(N, k, E, f, w, act):
    g = torch.Generator().manual_seed(N * 100 + E)
    z = torch.randn(N, w, generator=g)
    idx = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(N)])       # distinct experts per token
    p = torch.rand(N, k, generator=g)
    p = p / p.sum(-1, keepdim=True)
    wg, wu = torch.randn(E, f, w, generator=g) * 0.3, torch.randn(E, f, w, generator=g) * 0.3
    wd = torch.randn(E, w, f, generator=g) * 0.3
    out = fast.experts(z, idx, p, wg, wu, wd, ACTIVATIONS[act])
    ref = experts_reference(z, idx, p, wg, wu, wd, ACTIVATIONS[act])
    assert out.dtype == torch.float32 and out.shape == (N, w)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


def test_experts_with_mxfp8_activations_equal_the_torch_dispatch():
    g = torch.Generator().manual_seed(3)
    N, k, E, f, w = 7, 4, 16, 8, 16
    z = mx_fake_quant(torch.randn(N, w, generator=g), "e4m3", per_row=True)   # grouped_experts quantises z first
    idx = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(N)])
    p = torch.softmax(torch.randn(N, k, generator=g), -1)
    ws = [torch.randn(E, f, w, generator=g) * 0.3, torch.randn(E, f, w, generator=g) * 0.3,
          torch.randn(E, w, f, generator=g) * 0.3]
    act = ACTIVATIONS["situ_glu"]
    out = fast.experts(z, idx, p, *ws, act, quant_act=True)
    ref = experts_reference(z, idx, p, *ws, act, quant_act=True)
    # an MXFP8 rounding boundary may fall between float32 and float64 hidden values: compare loosely, and
    # check that the quantisation happened (without it the outputs differ by far more)
    torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=2e-3)
    plain = fast.experts(z, idx, p, *ws, act, quant_act=False)
    assert (plain - out).abs().max() > 1e-3


def test_the_kernels_run_only_where_no_gradient_is_wanted():
    x = torch.randn(3, 4)
    assert fast.usable(x)
    assert not fast.usable(x.double())                             # float64: the equivalence tests' reference
    p = torch.randn(3, 4, requires_grad=True)
    assert not fast.usable(x, p)                                   # training
    with torch.no_grad():
        assert fast.usable(x, p)
    with fast.off():
        assert not fast.usable(x)
    assert fast.usable(x)


def test_a_layer_trains_through_the_torch_reference():
    torch.manual_seed(0)
    layer = KimiDeltaAttention(K3Config.tiny())
    y, _ = layer(torch.randn(1, 9, K3Config.tiny().d_model))
    assert y.requires_grad                                         # the kernel's output would carry no gradient
    y.sum().backward()
    assert layer.in_proj.weight.grad is not None and layer.in_proj.weight.grad.abs().sum() > 0


def test_the_model_forward_with_the_kernels_equals_the_reference():
    torch.manual_seed(0)
    cfg = K3Config.tiny()
    model = K3Model(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 40))
    with torch.inference_mode():
        out = model(ids)
        with fast.off():
            ref = model(ids)
    torch.testing.assert_close(out.logits, ref.logits, rtol=1e-4, atol=1e-4)
    # a near-tie between two experts may be decided the other way within float32 rounding: a few of the
    # 92 x 80 choices of 16, no more
    differ = sum(int((out.trace.experts(i).sort(-1).values != ref.trace.experts(i).sort(-1).values).any(-1).sum())
                 for i in ref.trace.routes)
    assert differ <= 0.005 * 92 * 80, differ
    for i in (2, 5, 90):                             # KDA layers: the decode cache's state either way
        torch.testing.assert_close(out.cache.layers[i].state, ref.cache.layers[i].state, rtol=1e-4, atol=1e-5)


def test_a_forward_decides_once_and_a_resume_computes_as_its_base():
    torch.manual_seed(1)
    cfg = K3Config.tiny()
    model = K3Model(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, 24))
    with torch.inference_mode():
        with fast.off():
            plain = model(ids)
        kern = model(ids)
        assert not plain.kernels and kern.kernels
        for base in (plain, kern):                  # a resume from either, with the kernels on for this thread
            again = model.resume(base, 30)
            assert again.kernels == base.kernels
            assert torch.equal(again.logits, base.logits)      # the same layers, the same arithmetic: bit for bit
        assert not torch.equal(plain.logits, kern.logits)     # the two paths round differently (the test can fail)


def test_later_keeps_the_references_until_the_kernels_are_loaded(monkeypatch):
    monkeypatch.setattr(fast, "_LATER", True)
    monkeypatch.setattr(fast, "_LOADED", __import__("threading").Event())
    x = torch.zeros(2, 2)
    assert not fast.active() and not fast.usable(x)
    assert fast.warm()
    assert fast.active() and fast.usable(x)


@pytest.mark.parametrize("rows,E,m", [(1, 896, 17), (64, 896, 17), (5, 896, 9), (3, 64, 8), (7, 16, 2)])
def test_topk_equals_torch_topk(rows, E, m):
    g = torch.Generator().manual_seed(rows * E + m)
    x = torch.sigmoid(torch.randn(rows, E, generator=g) * 2) + torch.randn(E, generator=g) * 0.05
    vals, ids = fast.topk(x, m)
    ref_vals, ref_ids = torch.topk(x, m)
    assert torch.equal(vals, ref_vals) and torch.equal(ids, ref_ids)      # distinct values: one right answer


def test_topk_orders_equal_values_by_index_and_declines_nan():
    x = torch.zeros(2, 896)
    x[0, [5, 700, 300]] = 1.0
    x[1, 100:] = float("-inf")                          # knocked-out experts are -inf before the selection
    vals, ids = fast.topk(x, 17)
    assert ids[0].tolist() == [5, 300, 700] + [0, 1, 2, 3, 4] + list(range(6, 15))   # the tied zeros by index
    assert ids[1].tolist() == list(range(17)) and vals[1].eq(0).all()
    assert fast.topk(x.reshape(1, 2, 896), 17)[1].shape == (1, 2, 17)
    x[1, 50] = float("nan")
    assert fast.topk(x, 17) is None                     # torch.topk counts NaN as the largest: the caller falls back


def attnres_reference(V, gain, proj, eps):
    # AttnResQuery's read in float64, written out: softmax over sources of RMSNorm_nogain(V_s) . (gain * proj)
    V, w = V.double(), (gain * proj).double()
    keys = V / torch.sqrt(V.pow(2).mean(-1, keepdim=True) + eps)
    a = torch.softmax(keys @ w, dim=-1)
    return (a.unsqueeze(-1) * V).sum(-2), a


@pytest.mark.parametrize("shape", [(1, 1, 2, 4), (1, 64, 9, 32), (2, 5, 3, 16), (3, 7, 12, 8)])
def test_attnres_read_equals_the_softmax_over_depth(shape):
    g = torch.Generator().manual_seed(sum(shape))
    V = torch.randn(*shape, generator=g) * torch.rand(shape[-2], 1, generator=g) * 4    # sources of unequal size
    gain, proj = torch.rand(shape[-1], generator=g) + 0.5, torch.randn(shape[-1], generator=g)
    h, a = fast.attnres(V, gain, proj, 1e-5)
    h_ref, a_ref = attnres_reference(V, gain, proj, 1e-5)
    assert h.dtype == a.dtype == torch.float32 and h.shape == shape[:2] + shape[-1:] and a.shape == shape[:3]
    assert torch.allclose(a.double(), a_ref, atol=2e-6, rtol=1e-5)
    assert torch.allclose(h.double(), h_ref, atol=1e-5, rtol=1e-5)
    assert torch.allclose(a.sum(-1), torch.ones(shape[:2]), atol=1e-6)


def test_a_fresh_attnres_query_weights_every_source_alike():
    """proj = 0 at init (model/attnres.py): every logit is 0 and the read is the mean of the sources."""
    from model.attnres import AttnResQuery
    q = AttnResQuery(16)
    V = [torch.randn(2, 3, 16) for _ in range(5)]
    with torch.no_grad():
        h, a = q(V)
    assert torch.allclose(a, torch.full((2, 3, 5), 0.2)) and torch.allclose(h, torch.stack(V).mean(0), atol=1e-6)
    assert fast.usable(h)                              # the compiled read answered


@pytest.mark.parametrize("rows,levels", [(64, 40), (8, 3), (4, 1000)])
def test_topk_of_tied_values_is_the_lexicographic_order(rows, levels):
    # values on a coarse grid: ties at the bar; the answer is the largest values first, equal ones by index, whether
    # the kernel ranks its candidates (few) or inserts them (many)
    g = torch.Generator().manual_seed(rows * levels)
    x = torch.randint(0, levels, (rows, 896), generator=g).float() / levels
    x[:, ::7] = -x[:, ::7]                              # -0.0 among the zeros, equal to +0.0
    vals, ids = fast.topk(x, 17)
    order = sorted(range(896), key=lambda e: (-float(x[0, e]), e))[:17]
    assert ids[0].tolist() == order
    for r in range(rows):
        ref = sorted(range(896), key=lambda e: (-float(x[r, e]), e))[:17]
        assert ids[r].tolist() == ref and torch.equal(vals[r], x[r, ref])


# ---- the elementwise functions the fused kernels use (model/kernels.py) -----------------------------------------

def _elementwise(which: int, x: torch.Tensor) -> torch.Tensor:
    from model import kernels
    out = np.empty(x.numel(), dtype=np.float32)
    kernels.elementwise(x.numpy(), which, out)
    return torch.from_numpy(out)


def test_exp_sigmoid_and_tanh_are_within_two_float32_ulps():
    x = torch.cat([torch.linspace(-100, 100, 40001),
                   torch.logspace(-12, 1, 2001), -torch.logspace(-12, 1, 2001), torch.tensor([0.0, -0.0])])
    ref = x.double()
    inside = x.abs() <= 80
    e = _elementwise(0, x).double()
    assert ((e[inside] - ref[inside].exp()).abs() <= 2.4e-7 * ref[inside].exp()).all()     # 2 ulp of the value
    assert (e[x > 80] == torch.tensor(80.0).double().exp().float().double()).all()        # clamped, never inf
    assert (e[x < -80] > 1.17e-38).all()                                                   # never subnormal
    s = _elementwise(1, x).double()
    assert ((s - torch.sigmoid(ref)).abs() <= 2.4e-7 * torch.sigmoid(ref) + 1e-34).all()
    t = _elementwise(2, x).double()
    assert ((t - torch.tanh(ref)).abs() <= 2.4e-7 * torch.tanh(ref).abs()).all()         # relative, near 0 too
    assert torch.equal(t, -_elementwise(2, -x).double())                                  # odd, exactly
    assert t[x.abs() >= 10].abs().eq(1).all()


@pytest.mark.parametrize("name,code", [("situ_glu", 0), ("swiglu", 1)])
def test_the_compiled_activations_equal_the_reference(name, code):
    from model import kernels
    from model.config import BETA_GATE, BETA_UP
    g = torch.Generator().manual_seed(code)
    gate = torch.cat([torch.randn(20000, generator=g) * 6, torch.tensor([0.0, 1e-6, -1e-6, 300.0, -300.0, float("nan")])])
    up = torch.cat([torch.randn(20000, generator=g) * 40, torch.tensor([1.0, 1e-6, -2.0, 500.0, -500.0, 1.0])])
    out = np.empty(gate.numel(), dtype=np.float32)
    kernels.glu(gate.numpy(), up.numpy(), code, np.float32(BETA_GATE), np.float32(BETA_UP), out)
    ref = ACTIVATIONS[name](gate.double(), up.double())
    got = torch.from_numpy(out).double()
    assert torch.isnan(got[-1]) and torch.isnan(ref[-1])                                    # a NaN stays a NaN
    assert torch.allclose(got[:-1], ref[:-1], rtol=1e-6, atol=1e-9)
    if name == "situ_glu":
        assert got[:-1].abs().max() <= BETA_GATE * BETA_UP                                  # the report's bound


def test_rms_norm_in_one_call_equals_the_norm():
    from model.norms import RMSNorm, rms_norm
    g = torch.Generator().manual_seed(3)
    norm = RMSNorm(16)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(16, generator=g) + 0.5)
    x = torch.randn(2, 7, 3, 16, generator=g) * torch.rand(2, 7, 3, 1, generator=g) * 10
    with torch.inference_mode():
        y = norm(x.transpose(1, 2))                                                        # a strided input too
    ref = rms_norm(x.double().transpose(1, 2), norm.eps) * norm.weight.double()
    assert y.shape == ref.shape and torch.allclose(y.double(), ref, rtol=1e-6, atol=1e-6)


# ---- whole layers in one call -----------------------------------------------------------------------------------

def _perturbed(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    # every parameter moved off its initial value, so a kernel that ignores one (a gain, a bias) is seen
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1 * (p.abs().mean() + 0.1))
        for name, b in module.named_buffers():
            if b.is_floating_point():
                b.add_(torch.randn(b.shape, generator=g) * 0.05)
    return module.eval()


def _counted(monkeypatch, name: str) -> list:
    # fast.<name> still computes; the list gets one entry per call (the test checks which path a layer took)
    calls, real = [], getattr(fast, name)
    monkeypatch.setattr(fast, name, lambda *a: calls.append(1) or real(*a))
    return calls


@pytest.mark.parametrize("B,T", [(2, 37), (1, 1), (1, 2), (3, 5)])
def test_a_kda_layer_in_one_call_equals_the_torch_layer(B, T, monkeypatch):
    cfg = K3Config.tiny()
    layer = _perturbed(KimiDeltaAttention(cfg), B * 100 + T)
    g = torch.Generator().manual_seed(T)
    x, step = torch.randn(B, T, cfg.d_model, generator=g), torch.randn(B, 1, cfg.d_model, generator=g)
    calls = _counted(monkeypatch, "kda_layer")
    with torch.inference_mode():
        y, cache = layer(x)
        y2, cache2 = layer(step, cache=cache)                                              # one decode step
        with fast.off():
            y_ref, cache_ref = layer(x)
            y2_ref, cache2_ref = layer(step, cache=cache_ref)
    assert len(calls) == 2                                                                 # the fused path ran
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(y2, y2_ref, rtol=1e-4, atol=1e-5)
    for got, ref in ((cache, cache_ref), (cache2, cache2_ref)):
        torch.testing.assert_close(got.state, ref.state, rtol=1e-4, atol=1e-5)
        assert torch.equal(got.conv_tail, ref.conv_tail)                                  # copied, not computed


@pytest.mark.parametrize("override,activation,scale", [
    (None, None, 1.0), (RoutingOverride(top_k=4), None, 1.0), (RoutingOverride(top_k=40), "swiglu", 1.0),
    (RoutingOverride(use_bias=False), None, 2.827), (None, "swiglu", 1.0),
    (RoutingOverride(knocked_out=tuple(range(0, 896, 3))), None, 1.0),
    (RoutingOverride(top_k=8, forced=(5, 700, 12), knocked_out=(1, 2, 3)), None, 1.0),
    (RoutingOverride(top_k=3, forced=(5, 700, 12)), None, 1.0)])
def test_a_moe_layer_in_one_call_equals_the_torch_layer(override, activation, scale, monkeypatch):
    cfg = K3Config.tiny().with_(router_scale=scale)
    layer = _perturbed(LatentMoE(cfg), 7)
    x = torch.randn(2, 33, cfg.d_model, generator=torch.Generator().manual_seed(1))
    calls = _counted(monkeypatch, "moe")
    with torch.inference_mode():
        y, r = layer(x, override, activation=activation)
        with fast.off():
            y_ref, r_ref = layer(x, override, activation=activation)
    assert calls == [1]
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)
    assert torch.equal(r.scores, r_ref.scores) and torch.equal(r.bias, r_ref.bias)
    assert torch.equal(r.indices, r_ref.indices) and torch.equal(r.cutoff, r_ref.cutoff)  # distinct scores: one answer
    torch.testing.assert_close(r.weights, r_ref.weights, rtol=1e-6, atol=1e-7)
    assert torch.allclose(r.weights.sum(-1), torch.ones(2, 33))


@pytest.mark.parametrize("case", ["quant", "dense", "nan"])
def test_a_moe_layer_takes_the_reference_where_one_call_cannot_serve(case, monkeypatch):
    cfg = K3Config.tiny()
    layer = _perturbed(LatentMoE(cfg), 8)
    layer.precompute_quant()
    x = torch.randn(1, 9, cfg.d_model, generator=torch.Generator().manual_seed(2))
    override = RoutingOverride(top_k=896) if case == "dense" else None                  # every expert: no top-k
    if case == "nan":
        x[0, 4] = float("nan")
    calls = []
    real = fast.moe
    monkeypatch.setattr(fast, "moe", lambda *a: calls.append(real(*a)) or calls[-1])
    with torch.inference_mode():
        y, r = layer(x, override, quant=case == "quant")
        with fast.off():
            y_ref, r_ref = layer(x, override, quant=case == "quant")
    assert calls == ([None] if case == "nan" else [])                                      # declined, or never asked
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5, equal_nan=True)
    assert torch.equal(r.indices, r_ref.indices) if case != "nan" else bool(torch.isnan(y[0, 4]).all())


@pytest.mark.parametrize("B,T", [(1, 64), (2, 5), (1, 1)])
def test_an_mla_layer_in_one_call_equals_the_torch_layer(B, T, monkeypatch):
    from model.mla import GatedMLA
    cfg = K3Config.tiny()
    layer = _perturbed(GatedMLA(cfg), B * 10 + T)
    g = torch.Generator().manual_seed(B + T)
    x, step = torch.randn(B, T, cfg.d_model, generator=g), torch.randn(B, 1, cfg.d_model, generator=g)
    calls = _counted(monkeypatch, "mla")
    with torch.inference_mode():
        y, cache = layer(x)
        y2, _ = layer(step, cache=cache, absorbed=True)                                     # a decode step reads it
        with fast.off():
            y_ref, cache_ref = layer(x)
            y2_ref, _ = layer(step, cache=cache_ref, absorbed=True)
    assert calls == [1]                                                                   # the prefill only
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(cache.latent, cache_ref.latent, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(cache.k_rope, cache_ref.k_rope, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(y2, y2_ref, rtol=1e-4, atol=1e-5)


def test_a_what_if_computes_its_unchanged_tokens_as_its_base_did():
    """The Routing explorer compares a run with its what-if: knocking out an expert no token chose at a layer changes
    nothing, bit for bit, since both compute that layer in the same compiled call (with the torch layer for the
    override, float32 rounding alone would move later near-ties)."""
    torch.manual_seed(4)
    cfg = K3Config.tiny()
    model = K3Model(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, 24))
    with torch.inference_mode():
        base = model(ids)
        unused = sorted(set(range(cfg.n_routed_experts)) - set(base.trace.experts(46).flatten().tolist()))[0]
        what_if = model(ids, routing={46: RoutingOverride(knocked_out=(unused,))})
        forced = model(ids, routing={46: RoutingOverride(knocked_out=(base.trace.experts(46)[0, 0, 0].item(),))})
    assert torch.equal(what_if.logits, base.logits)
    assert not torch.equal(forced.logits, base.logits)        # a chosen expert knocked out does change it
