"""Gated MLA without positional encoding (ARCHITECTURE.md sections 3, 8, 9)."""
from __future__ import annotations

import math

import pytest
import torch

from model import accounting
from model.config import K3Config
from model.mla import GatedMLA, MLACache

MICRO = K3Config.micro()
TINY = K3Config.tiny()


def make(cfg=MICRO, seed=0, gate_scale=1.0):
    torch.manual_seed(seed)
    m = GatedMLA(cfg).double()
    with torch.no_grad():
        # non-trivial norm gains so a reference that forgets them fails
        m.q_norm.weight.uniform_(0.5, 1.5)
        m.kv_norm.weight.uniform_(0.5, 1.5)
        if m.w_g is not None:
            m.w_g.weight.mul_(gate_scale)
    return m


def inputs(cfg, T, B=2, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, cfg.d_model, generator=g, dtype=torch.float64)


@torch.no_grad()
def reference(m: GatedMLA, cfg: K3Config, x: torch.Tensor) -> torch.Tensor:
    """Section 3 written out token by token and head by head with explicit matrices."""
    H, nope, rope, v, kvr = cfg.mla_heads, cfg.qk_nope_dim, cfg.qk_rope_dim, cfg.v_head_dim, cfg.kv_lora_rank
    eps = cfg.norm_eps

    def rms(z, g):
        return z / math.sqrt(float((z * z).mean()) + eps) * g

    Wdq, Wuq = m.w_dq.weight.T, m.w_uq.weight.T          # x @ W convention
    Wdkv, Wukv, Wo = m.w_dkv.weight.T, m.w_ukv.weight.T, m.w_o.weight.T
    B, T, _ = x.shape
    out = torch.zeros(B, T, cfg.d_model, dtype=x.dtype)
    for b in range(B):
        q, kc, vv, kr = [], [], [], []
        for t in range(T):
            xt = x[b, t]
            cq = rms(xt @ Wdq, m.q_norm.weight)
            q.append((cq @ Wuq).reshape(H, nope + rope))
            ckv = xt @ Wdkv
            c = rms(ckv[:kvr], m.kv_norm.weight)
            kr.append(ckv[kvr:])
            kvh = (c @ Wukv).reshape(H, nope + v)
            kc.append(kvh[:, :nope])
            vv.append(kvh[:, nope:])
        for i in range(T):
            heads = []
            for h in range(H):
                scores = [float(q[i][h] @ torch.cat([kc[j][h], kr[j]])) / math.sqrt(nope + rope)
                          for j in range(i + 1)]
                mx = max(scores)
                e = [math.exp(s - mx) for s in scores]
                z = sum(e)
                heads.append(sum((e[j] / z) * vv[j][h] for j in range(i + 1)))
            o = torch.cat(heads)
            if m.w_g is not None:
                o = torch.sigmoid(x[b, i] @ m.w_g.weight.T) * o
            out[b, i] = o @ Wo
    return out


# ---- the two paths and the plain reference --------------------------------------------------------

@pytest.mark.parametrize("cfg", [MICRO, TINY], ids=["micro", "tiny"])
@pytest.mark.parametrize("T", [1, 5, 13])
def test_naive_equals_absorbed_prefill(cfg, T):
    m, x = make(cfg), inputs(cfg, T)
    y0, c0 = m(x, absorbed=False)
    y1, c1 = m(x, absorbed=True)
    assert y0.shape == (2, T, cfg.d_model)
    torch.testing.assert_close(y1, y0, rtol=0, atol=1e-10)
    assert torch.equal(c0.latent, c1.latent) and torch.equal(c0.k_rope, c1.k_rope)


@pytest.mark.parametrize("new", [1, 4])
def test_naive_equals_absorbed_with_cache(new):
    m, x = make(TINY), inputs(TINY, 9 + new)
    _, cache = m(x[:, :9])
    y0, c0 = m(x[:, 9:], cache=cache, absorbed=False)
    y1, c1 = m(x[:, 9:], cache=cache, absorbed=True)
    torch.testing.assert_close(y1, y0, rtol=0, atol=1e-10)
    assert c0.length == c1.length == 9 + new


@pytest.mark.parametrize("cfg", [MICRO, TINY], ids=["micro", "tiny"])
def test_module_equals_plain_reference(cfg):
    m, x = make(cfg), inputs(cfg, 6)
    ref = reference(m, cfg, x)
    for absorbed in (False, True):
        torch.testing.assert_close(m(x, absorbed=absorbed)[0], ref, rtol=0, atol=1e-10)


def test_reference_without_gate():
    cfg = MICRO.with_(mla_gate=False)
    m, x = make(cfg), inputs(cfg, 5)
    torch.testing.assert_close(m(x, absorbed=True)[0], reference(m, cfg, x), rtol=0, atol=1e-10)


# ---- decode path (section 8) --------------------------------------------------------------------

@pytest.mark.parametrize("T", [1, 7, 20])
def test_prefill_then_decode_equals_full_forward(T):
    cfg, steps = TINY, 5
    m, x = make(cfg), inputs(cfg, T + steps)
    full, full_cache = m(x)
    y, cache = m(x[:, :T])
    outs = [y]
    for t in range(T, T + steps):
        y, cache = m(x[:, t:t + 1], cache=cache, absorbed=True)
        outs.append(y)
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=0, atol=1e-10)
    torch.testing.assert_close(cache.latent, full_cache.latent, rtol=0, atol=1e-12)


@pytest.mark.parametrize("absorbed", [False, True])
def test_chunk_after_cache_equals_full_forward(absorbed):
    # several new tokens at once over a cache: the causal triangle must be offset by the cache length
    m, x = make(TINY), inputs(TINY, 13)
    full, _ = m(x)
    y0, cache = m(x[:, :6])
    y1, cache = m(x[:, 6:10], cache=cache, absorbed=absorbed)
    y2, cache = m(x[:, 10:], cache=cache, absorbed=absorbed)
    torch.testing.assert_close(torch.cat([y0, y1, y2], 1), full, rtol=0, atol=1e-10)


def test_token_by_token_from_empty_equals_full_forward():
    m, x = make(TINY), inputs(TINY, 8)
    full, _ = m(x)
    cache, outs = None, []
    for t in range(8):
        y, cache = m(x[:, t:t + 1], cache=cache, absorbed=True)
        outs.append(y)
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=0, atol=1e-10)


def test_cache_grows_one_row_per_token():
    cfg, B, T = TINY, 3, 4
    m, x = make(cfg), inputs(cfg, T + 3, B=B)
    _, cache = m(x[:, :T])
    per_token = cfg.kv_lora_rank + cfg.qk_rope_dim
    assert isinstance(cache, MLACache)
    assert cache.latent.shape == (B, T, cfg.kv_lora_rank) and cache.k_rope.shape == (B, T, cfg.qk_rope_dim)
    assert cache.numel() == T * per_token * B
    for step in range(1, 4):
        old = cache
        _, cache = m(x[:, T + step - 1:T + step], cache=cache, absorbed=True)
        assert cache.length == T + step
        assert cache.numel() == (T + step) * per_token * B
        assert torch.equal(cache.latent[:, :-1], old.latent)     # old rows untouched, one appended


# ---- behaviour ----------------------------------------------------------------------------------

@pytest.mark.parametrize("absorbed", [False, True])
def test_causal(absorbed):
    m, x = make(TINY), inputs(TINY, 10)
    y, _ = m(x, absorbed=absorbed)
    x2 = x.clone()
    x2[:, 6] += 1.0
    y2, _ = m(x2, absorbed=absorbed)
    assert torch.equal(y2[:, :6], y[:, :6])
    assert (y2[:, 6:] - y[:, 6:]).abs().amax(-1).min() > 1e-6    # every later position sees it


def test_nope_has_no_positional_signal():
    # Without positions, attention is permutation-equivariant over the keys: a query's output depends
    # on the set of tokens it sees, not their order. Swap two earlier tokens: the last output stays.
    m, x = make(TINY), inputs(TINY, 6)
    y, _ = m(x)
    x2 = x[:, [1, 0, 2, 3, 4, 5]]
    y2, _ = m(x2)
    torch.testing.assert_close(y2[:, 2:], y[:, 2:], rtol=0, atol=1e-12)


def _ungated_twin(m: GatedMLA) -> GatedMLA:
    twin = GatedMLA(MICRO.with_(mla_gate=False)).double()
    twin.load_state_dict({k: v for k, v in m.state_dict().items() if not k.startswith("w_g")})
    return twin


def test_gate_is_a_per_channel_sigmoid_before_w_o():
    m = make(MICRO)
    twin = _ungated_twin(m)
    x = inputs(MICRO, 5).abs() + 0.1          # positive inputs, so the sign of W_g decides x W_g
    ungated, _ = twin(x)
    with torch.no_grad():
        m.w_g.weight.zero_()                  # sigmoid(0) = 1/2 on every channel
        torch.testing.assert_close(m(x)[0], 0.5 * ungated, rtol=0, atol=1e-12)
        m.w_g.weight.fill_(-100.0)            # gate -> 0: the layer goes silent
        assert m(x, absorbed=True)[0].abs().max() < 1e-12
        m.w_g.weight.fill_(100.0)             # gate -> 1: the ungated layer
        torch.testing.assert_close(m(x, absorbed=True)[0], ungated, rtol=0, atol=1e-10)
        # close half the channels: same as deleting those columns of W_o in the ungated twin
        shut = torch.arange(m.w_g.out_features) % 3 == 0
        m.w_g.weight[shut] = -100.0
        twin.w_o.weight[:, shut] = 0.0
        torch.testing.assert_close(m(x)[0], twin(x)[0], rtol=0, atol=1e-10)


def test_float32_matches_float64():
    m, x = make(TINY), inputs(TINY, 12)
    y64, _ = m(x, absorbed=True)
    m32 = GatedMLA(TINY)
    m32.load_state_dict({k: v.float() for k, v in m.state_dict().items()})
    y32, _ = m32(x.float())
    torch.testing.assert_close(y32.double(), y64, rtol=1e-4, atol=1e-5)


# ---- accounting (section 9) ---------------------------------------------------------------------

@pytest.mark.parametrize("cfg", [TINY, MICRO, MICRO.with_(mla_gate=False), K3Config.kimi_k2().with_(
    d_model=24, mla_heads=3, q_lora_rank=12, kv_lora_rank=10, qk_nope_dim=4, qk_rope_dim=2, v_head_dim=6)],
    ids=["tiny", "micro", "micro-nogate", "k2-shaped"])
def test_numel_matches_accounting(cfg):
    m = GatedMLA(cfg)
    assert sum(p.numel() for p in m.parameters()) == accounting.mla_layer(cfg)
    assert all(p.dim() == 2 for n, p in m.named_parameters() if not n.endswith("norm.weight"))


def test_cache_values_match_a_real_cache():
    cfg = TINY
    _, cache = make(cfg)(inputs(cfg, 3, B=1))
    assert cache.numel() == 3 * (cfg.kv_lora_rank + cfg.qk_rope_dim)      # [c ; kR] per token
