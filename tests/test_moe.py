"""LatentMoE grouped dispatch against a per-token, per-expert loop written here in float64;
routing invariants and overrides; Quantile Balancing (ARCHITECTURE.md sections 5 and 6)."""
import math
from collections import Counter

import numpy as np
import pytest
import torch

from model import accounting
from model import moe as moe_mod
from model.config import K3Config
from model.moe import (
    LatentMoE,
    QuantileHistogram,
    RoutingOverride,
    StepQuantile,
    expert_load,
    grouped_topk,
    quantile_balance,
    quantile_balance_hist,
    route,
    sign_rule_update,
)
from model.quant import mx_fake_quant

MICRO = K3Config.micro()


def situ(g, u):      # K3 report: [4 tanh(g/4) sigmoid(g)] * [25 tanh(u/25)]
    return 4 * math.tanh(g / 4) / (1 + math.exp(-g)) * 25 * math.tanh(u / 25)


def swiglu(g, u):
    return g / (1 + math.exp(-g)) * u


@torch.no_grad()
def reference_moe(moe, x, act="situ_glu", quant=False, use_bias=True, top_k=None,
                  knocked_out=(), forced=()):
    """The whole layer, one token and one expert at a time, in plain Python floats where it matters."""
    f_act = situ if act == "situ_glu" else swiglu
    E, k = moe.n_experts, top_k or moe.top_k
    Wr = moe.router.weight.double()
    bias = moe.router.expert_bias.double() if use_bias else torch.zeros(E, dtype=torch.float64)
    sh = moe.shared
    ys, chosen_all = [], []
    for xt in x.double().reshape(-1, x.shape[-1]):
        s = [1 / (1 + math.exp(-float(Wr[e] @ xt))) for e in range(E)]
        rest = sorted((e for e in range(E) if e not in knocked_out and e not in forced),
                      key=lambda e: -(s[e] + float(bias[e])))
        chosen = list(forced) + rest[:k - len(forced)]
        total = sum(s[e] for e in chosen)
        z = moe.down.weight.double() @ xt if moe.down is not None else xt
        if quant:
            z = mx_fake_quant(z, "e4m3")                        # one token: its own blocks
        u = torch.zeros_like(z)
        for e in chosen:
            wg, wu, wd = (w[e].double() for w in (moe.w_gate, moe.w_up, moe.w_down))
            if quant:
                wg, wu, wd = (mx_fake_quant(w, "e2m1") for w in (wg, wu, wd))
            g, up = wg @ z, wu @ z                          # each expert [out, in]
            h = torch.tensor([f_act(float(a), float(b)) for a, b in zip(g, up)], dtype=torch.float64)
            if quant:
                h = mx_fake_quant(h, "e4m3")
            u = u + (s[e] / total) * (wd @ h)
        u = u * moe.cfg.router_scale
        if moe.up is not None:
            normed = u / torch.sqrt((u * u).mean() + moe.norm.eps) * moe.norm.weight.double()
            routed = moe.up.weight.double() @ normed
        else:
            routed = u
        g, up = sh.w_gate.weight.double() @ xt, sh.w_up.weight.double() @ xt
        hs = torch.tensor([f_act(float(a), float(b)) for a, b in zip(g, up)], dtype=torch.float64)
        ys.append(sh.w_down.weight.double() @ hs + routed)
        chosen_all.append(chosen)
    return torch.stack(ys).reshape(x.shape), chosen_all


def make_moe(cfg=MICRO, seed=0, bias_scale=0.3):
    torch.manual_seed(seed)
    moe = LatentMoE(cfg).double()
    with torch.no_grad():
        moe.router.weight.normal_(0, 0.5)
        moe.router.expert_bias.normal_(0, bias_scale)
    return moe


def test_parameters_match_accounting():
    for cfg in (K3Config.tiny(), MICRO, MICRO.with_(latent_dim=None)):
        moe = LatentMoE(cfg)
        assert sum(p.numel() for p in moe.parameters()) == sum(accounting.moe_parts(cfg).values())
        # [E, out, in] like nn.Linear: the input dimension is the contiguous one MXFP4 blocks run along
        assert moe.w_gate.shape == (cfg.n_routed_experts, cfg.expert_hidden, cfg.expert_width)
        assert moe.w_up.shape == moe.w_gate.shape
        assert moe.w_down.shape == (cfg.n_routed_experts, cfg.expert_width, cfg.expert_hidden)
    buffers, params = dict(moe.named_buffers()), dict(moe.named_parameters())
    assert "router.expert_bias" in buffers and "router.expert_bias" not in params
    assert "router.expert_bias" in moe.state_dict()


@pytest.mark.parametrize("variant", ["plain", "quant", "swiglu", "no_latent", "override", "sparse_groups",
                                     "sparse_groups_quant"])
def test_grouped_dispatch_equals_loop(variant):
    # 10 tokens over 16 experts fill the groups (padded layout); 3 tokens over 128 experts leave most
    # groups empty (per-pair layout): both layouts must equal the loop
    cfg = MICRO.with_(latent_dim=None) if variant == "no_latent" else MICRO
    shape = (2, 5)
    if variant.startswith("sparse_groups"):
        cfg, shape = MICRO.with_(n_routed_experts=128), (1, 3)
    moe = make_moe(cfg)
    x = torch.randn(*shape, cfg.d_model, dtype=torch.float64)
    kw, ref_kw = {}, {}
    if variant.endswith("quant"):
        kw = ref_kw = {"quant": True}
    if variant == "swiglu":
        kw, ref_kw = {"activation": "swiglu"}, {"act": "swiglu"}
    if variant == "override":
        ov = RoutingOverride(top_k=6, knocked_out=(1, 2, 3), forced=(7, 0))
        kw, ref_kw = {"routing": ov}, {"top_k": 6, "knocked_out": (1, 2, 3), "forced": (7, 0)}
    y, info = moe(x, **kw)
    y_ref, chosen = reference_moe(moe, x, **ref_kw)
    assert info.indices.reshape(-1, info.indices.shape[-1]).tolist() == chosen
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)


def test_routing_invariants():
    moe = make_moe()
    x = torch.randn(3, 7, MICRO.d_model, dtype=torch.float64)
    _, info = moe(x)
    E, k = MICRO.n_routed_experts, MICRO.top_k
    assert info.scores.shape == (3, 7, E) and info.indices.shape == (3, 7, k)
    assert info.weights.shape == (3, 7, k) and info.cutoff.shape == (3, 7)
    assert all(len(set(row)) == k for row in info.indices.reshape(-1, k).tolist())
    torch.testing.assert_close(info.weights.sum(-1), torch.ones(3, 7, dtype=torch.float64))
    biased = info.scores + moe.router.expert_bias
    ranked = biased.sort(-1, descending=True)
    assert torch.equal(info.indices, ranked.indices[..., :k])   # ordered by biased score
    assert torch.equal(info.cutoff, ranked.values[..., k])      # the (k+1)-th biased score
    assert ((info.scores > 0) & (info.scores < 1)).all()


def test_weights_are_renormalised_raw_scores():
    moe = make_moe(bias_scale=0.0)
    x = torch.randn(2, 6, MICRO.d_model, dtype=torch.float64)
    y0, info0 = moe(x)
    # A bias that changes the selection: the weights still use the raw scores only.
    with torch.no_grad():
        moe.router.expert_bias.copy_(torch.linspace(-0.5, 0.5, MICRO.n_routed_experts))
    _, info1 = moe(x)
    assert not torch.equal(info0.indices, info1.indices)
    raw = info1.scores.gather(-1, info1.indices)
    torch.testing.assert_close(info1.weights, raw / raw.sum(-1, keepdim=True), rtol=0, atol=1e-15)
    # A bias that shifts every expert alike selects the same experts: identical outputs.
    with torch.no_grad():
        moe.router.expert_bias.fill_(0.37)
    y2, info2 = moe(x)
    assert torch.equal(info0.indices, info2.indices) and torch.equal(y0, y2)
    assert torch.equal(info0.weights, info2.weights)


def test_overrides():
    moe = make_moe()
    E, k = MICRO.n_routed_experts, MICRO.top_k
    x = torch.randn(2, 8, MICRO.d_model, dtype=torch.float64)
    bias_before = moe.router.expert_bias.clone()
    _, info = moe(x, routing=RoutingOverride(knocked_out=(0, 5, 9)))
    assert not np.isin(info.indices.numpy(), [0, 5, 9]).any()
    _, info = moe(x, routing=RoutingOverride(forced=(11, 3)))
    assert (info.indices[..., 0] == 11).all() and (info.indices[..., 1] == 3).all()
    assert all(len(set(r)) == k for r in info.indices.reshape(-1, k).tolist())
    _, dense = moe(x, routing=RoutingOverride(top_k=E))
    assert (dense.indices.sort(-1).values == torch.arange(E)).all()
    assert torch.isinf(dense.cutoff).all() and (dense.cutoff < 0).all()
    _, one = moe(x, routing=RoutingOverride(top_k=1, use_bias=False))
    assert torch.equal(one.indices[..., 0], one.scores.argmax(-1))
    assert torch.equal(one.weights, torch.ones_like(one.weights))
    assert torch.equal(moe.router.expert_bias, bias_before)                    # overrides mutate nothing
    for bad in (RoutingOverride(forced=(1,), knocked_out=(1,)), RoutingOverride(forced=(E,)),
                RoutingOverride(knocked_out=(-1,)), RoutingOverride(top_k=2, forced=(1, 2, 3)),
                RoutingOverride(top_k=0), RoutingOverride(top_k=E + 1), RoutingOverride(forced=(2, 2)),
                RoutingOverride(top_k=E, knocked_out=(0,))):
        with pytest.raises(ValueError):
            moe(x, routing=bad)


def test_route_is_a_pure_function():
    s = torch.tensor([[0.9, 0.1, 0.5, 0.7]])
    b = torch.tensor([-0.5, 0.0, 0.0, 0.0])
    idx, w, cut = route(s, b, 2)                  # biased: 0.4, 0.1, 0.5, 0.7
    assert idx.tolist() == [[3, 2]] and cut.tolist() == [pytest.approx(0.4)]
    torch.testing.assert_close(w, torch.tensor([[0.7 / 1.2, 0.5 / 1.2]]))
    idx, _, _ = route(s, b, 2, RoutingOverride(use_bias=False))
    assert idx.tolist() == [[0, 3]]


def test_training_gradients_reach_router_and_experts():
    moe = LatentMoE(MICRO)
    x = torch.randn(2, 4, MICRO.d_model)
    for quant in (False, True):
        moe.zero_grad()
        y, _ = moe(x, quant=quant)
        y.square().sum().backward()
        for p in (moe.router.weight, moe.w_gate, moe.w_up, moe.w_down, moe.down.weight):
            assert p.grad is not None and p.grad.abs().sum() > 0
    moe.eval()
    with torch.no_grad():
        a, _ = moe(x, quant=True)                 # quantised in the call, stored nowhere
        assert moe._quantised is None
        moe.precompute_quant()
        b, _ = moe(x, quant=True)                 # served from the load-time copy
        moe.w_gate.mul_(2)
        c, _ = moe(x, quant=True)                 # an edited weight is not served the stale copy
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_router_training_path_matches_the_dense_scores():
    # Training recomputes only the chosen scores; values and gradients must equal differentiating all
    # E scores (the plain formula of sec 5, written out here) with the same selection.
    torch.manual_seed(3)
    moe = LatentMoE(MICRO)
    x = torch.randn(40, MICRO.d_model, requires_grad=True)
    info = moe.router(x)                                           # grad enabled: the training path
    g = torch.randn(info.weights.shape)
    (info.weights * g).sum().backward()
    grad_w, grad_x = moe.router.weight.grad.clone(), x.grad.clone()
    moe.router.weight.grad, x.grad = None, None
    s = torch.sigmoid(x @ moe.router.weight.T)                     # [N, E], all of them
    biased = s.detach() + moe.router.expert_bias
    idx = torch.topk(biased, MICRO.top_k, dim=-1).indices
    chosen = s.gather(1, idx)
    p = chosen / chosen.sum(-1, keepdim=True)
    (p * g).sum().backward()
    assert torch.equal(info.indices, idx)
    torch.testing.assert_close(info.weights, p.detach(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(info.scores, s.detach(), rtol=0, atol=0)
    torch.testing.assert_close(grad_w, moe.router.weight.grad, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(grad_x, x.grad, rtol=1e-5, atol=1e-7)
    with torch.no_grad():                                          # inference: the same routing
        plain = moe.router(x)
    assert torch.equal(plain.indices, info.indices) and torch.equal(plain.cutoff, info.cutoff)


@pytest.mark.parametrize("shape,m", [((300, 896), 17), ((2, 5, 896), 17), ((64, 64), 5), ((10, 40), 3)])
def test_grouped_topk_finds_the_largest_values(shape, m):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(5))
    x[..., 7] = x[..., 3]                                           # exact ties too
    vals, idx = grouped_topk(x, m)
    ref = torch.topk(x, m, dim=-1)
    assert torch.equal(vals, ref.values)                            # the same values, sorted
    assert torch.equal(x.gather(-1, idx), vals)                     # at the indices returned
    assert (idx.sort(-1).values.diff(dim=-1) > 0).all()             # no index twice


def test_grouped_topk_thresholds_fall_back_on_ties_at_the_cutoff():
    # The numpy thresholds pick exactly m values per row only without a tie at the m-th largest; with one
    # (or a NaN) the fast path declines and the torch two-stage form answers: still torch.topk's values.
    g = torch.Generator().manual_seed(11)
    for dtype in (torch.float32, torch.float64):
        x = torch.rand(64, 896, generator=g, dtype=dtype)
        assert moe_mod._partition_topk(x, 17, 8) is not None          # fresh data: the fast path answers
        order = x[5].argsort(descending=True)
        x[5, order[17]] = x[5, order[16]]                              # row 5: its 17th and 18th largest tie
        assert moe_mod._partition_topk(x, 17, 8) is None
        vals, idx = grouped_topk(x, 17)
        assert torch.equal(vals, torch.topk(x, 17, dim=-1).values) and torch.equal(x.gather(-1, idx), vals)
    x = torch.rand(8, 896, generator=g)
    x[2, 40] = float("nan")
    assert moe_mod._partition_topk(x, 17, 8) is None


def test_expert_load():
    idx = torch.randint(0, 10, (3, 5, 4))
    counts = Counter(idx.reshape(-1).tolist())
    assert expert_load(idx, 10).tolist() == [counts[e] for e in range(10)]


# ---- Quantile Balancing --------------------------------------------------------------------------

def test_qb_toy_check():
    # ARCHITECTURE sec 6: 8 tokens, 4 experts, k = 1, loads (4, 3, 1, 0) -> (2, 2, 2, 2) in one step
    s = torch.tensor([[0.40, 0.35, 0.15, 0.10], [0.75, 0.25, 0.60, 0.55], [0.75, 0.55, 0.10, 0.30],
                      [0.40, 0.95, 0.10, 0.75], [0.80, 0.65, 0.95, 0.65], [0.35, 0.70, 0.25, 0.10],
                      [0.70, 0.50, 0.15, 0.60], [0.70, 0.95, 0.45, 0.50]], dtype=torch.float64)
    b = torch.zeros(4, dtype=torch.float64)
    assert expert_load(route(s, b, 1)[0], 4).tolist() == [4, 3, 1, 0]
    b1 = quantile_balance(s, b, 1)
    assert abs(b1.sum().item()) < 1e-12                                 # mean-centred
    assert expert_load(route(s, b1, 1)[0], 4).tolist() == [2, 2, 2, 2]


def exact_qb_reference(s: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    # per token: cutoff = (k+1)-th largest biased score; per expert: (q+1)-th largest margin
    m, n = s.shape
    alpha = np.sort(s + b, axis=1)[:, ::-1][:, k]
    q = (m * k) // n
    return np.array([-np.sort(s[:, j] - alpha)[::-1][q] for j in range(n)])


def skewed_scores(g, m, E=64, d=16):
    # shared router weights, a strong per-expert offset so a few experts dominate
    W = torch.randn(d, E, generator=torch.Generator().manual_seed(7))
    return torch.sigmoid(torch.randn(m, d, generator=g) @ W * 0.5 + torch.linspace(-3, 1, E))


def test_qb_exact_and_histogram():
    g = torch.Generator().manual_seed(1)
    s = skewed_scores(g, 512).double()
    b = torch.randn(64, generator=g, dtype=torch.float64) * 0.1
    ref = exact_qb_reference(s.numpy(), b.numpy(), 4)
    raw = quantile_balance(s, b, 4, centre=False)
    np.testing.assert_allclose(raw.numpy(), ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(quantile_balance(s, b, 4).numpy(), ref - ref.mean(), atol=1e-12)
    # the forward's own cutoffs (what training reuses) give the same bias
    _, _, cutoff = route(s, b, 4)
    assert torch.equal(quantile_balance(s, b, 4, cutoff=cutoff), quantile_balance(s, b, 4))
    width = (b.max() - b.min() + 2).item() / 1000
    hist = quantile_balance_hist(s, b, 4, bins=1000, centre=False)
    assert (hist - raw).abs().max().item() <= width                    # within one bin
    centred = quantile_balance_hist(s, b, 4)
    assert (centred - (raw - raw.mean())).abs().max().item() <= 2 * width
    # counts add across micro-batches: four quarters give the same histogram as the whole batch
    h = QuantileHistogram(b, 4)
    for part in s.split(128):
        h.add(part, b)
    whole = QuantileHistogram(b, 4).add(s, b)
    assert h.m == 512 and torch.equal(h.counts, whole.counts)
    assert torch.equal(h.bias(), whole.bias())


def test_step_quantile_is_the_exact_quantile_of_the_whole_step():
    # Eq. 14 over one step's batch routed in micro-batches of different sizes: the merged top margins
    # give the reference quantile of the concatenated batch exactly.
    g = torch.Generator().manual_seed(2)
    s = skewed_scores(g, 600).double()
    b = torch.randn(64, generator=g, dtype=torch.float64) * 0.1
    _, _, cutoff = route(s, b, 4)
    acc = StepQuantile(64, 4, 600)
    for lo, hi in ((0, 50), (50, 310), (310, 600)):
        acc.add(s[lo:hi], cutoff[lo:hi])
    ref = exact_qb_reference(s.numpy(), b.numpy(), 4)
    np.testing.assert_allclose(acc.bias(centre=False).numpy(), ref, rtol=0, atol=1e-6)   # margins kept in fp32
    np.testing.assert_allclose(acc.bias().numpy(), ref - ref.mean(), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="600 tokens but 50"):
        StepQuantile(64, 4, 600).add(s[:50], cutoff[:50]).bias()


def test_qb_balances_skewed_scores_in_a_few_steps():
    g = torch.Generator().manual_seed(2)
    E, k, m = 64, 4, 512
    held_out = skewed_scores(g, 8192)

    def max_over_mean(b):
        load = expert_load(route(held_out, b, k)[0], E).float()
        return (load.max() / load.mean()).item(), int((load == 0).sum())

    b_qb, b_sign = torch.zeros(E), torch.zeros(E)
    before = max_over_mean(b_qb)
    for _ in range(3):      # each bias is derived from one batch and judged on other tokens
        batch = skewed_scores(g, m)
        b_qb = quantile_balance(batch, b_qb, k)
        b_sign = sign_rule_update(expert_load(route(batch, b_sign, k)[0], E), b_sign)
    after, dead = max_over_mean(b_qb)
    assert before[0] > 3 and before[1] > 0          # skewed, with dead experts
    assert after < 1.5 and dead == 0                 # batch-of-512 sampling noise sets the floor
    assert max_over_mean(b_sign)[0] > 3              # three sign steps of 1e-3 barely move


def test_sign_rule_direction():
    load = torch.tensor([10, 2, 6, 6])
    b = torch.tensor([0.1, 0.1, 0.0, -0.2])
    nb = sign_rule_update(load, b, gamma=0.01)
    torch.testing.assert_close(nb, torch.tensor([0.09, 0.11, 0.0, -0.2]))
