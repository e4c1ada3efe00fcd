"""Decode-cache accounting (model/memory.py): K3-scale values by hand, and the same formulas against
numel() of the real cache objects of the tiny and micro instances after prefill and decode."""
import pytest
import torch

from model import memory
from model.config import K3Config
from model.k3 import K3Model
from model.kda import KimiDeltaAttention
from model.mla import GatedMLA

FULL = K3Config.full()


def test_k3_scale_values_worked_by_hand():
    assert memory.kda_state_values(FULL) == 96 * 128 * 128 == 1_572_864
    assert memory.kda_conv_values(FULL) == 3 * 3 * 12_288 == 110_592
    assert memory.mla_values_per_token(FULL) == 576
    assert memory.mha_values_per_token(FULL) == 24_576
    h = memory.hybrid(FULL)
    assert (h.fixed, h.per_token) == (69 * 1_683_456, 24 * 576) == (116_158_464, 13_824)
    assert memory.all_mla(FULL).per_token == 93 * 576 == 53_568
    assert memory.all_mha(FULL).per_token == 93 * 24_576 == 2_285_568
    # at the published context, bf16: 29.2 GB per sequence for the hybrid
    assert h.nbytes(1_048_576) == 29_223_346_176
    assert h.nbytes(1_048_576, batch=4) == 4 * 29_223_346_176
    assert memory.all_mha(FULL).nbytes(1_048_576) == 2 * 2_285_568 * 1_048_576


def test_crossovers():
    h, mla, mha = memory.hybrid(FULL), memory.all_mla(FULL), memory.all_mha(FULL)
    t = memory.crossover(h, mla)
    assert t == pytest.approx(116_158_464 / (53_568 - 13_824))      # ~2,923 tokens
    assert 2_922 < t < 2_923
    assert h.values(t) == pytest.approx(mla.values(t))
    assert h.values(2_922) > mla.values(2_922) and h.values(2_923) < mla.values(2_923)
    assert 50 < memory.crossover(h, mha) < 52
    assert memory.crossover(mla, mha) is None            # both start at 0: no crossing above 0
    assert memory.crossover(mla, mla) is None


@pytest.mark.parametrize("kind", ["kda", "mla"])
def test_one_tiny_layer_cache_has_the_accounted_size(kind):
    cfg = K3Config.tiny()
    torch.manual_seed(0)
    layer = (KimiDeltaAttention if kind == "kda" else GatedMLA)(cfg).eval()
    with torch.no_grad():
        _, cache = layer(torch.randn(3, 7, cfg.d_model))                   # batch 3, 7 tokens
        _, cache = layer(torch.randn(3, 1, cfg.d_model), cache=cache)      # one decode step
    if kind == "kda":
        assert cache.numel() == 3 * memory.kda_layer_values(cfg) == 3 * (2 * 16 * 16 + 3 * 96)
    else:
        assert cache.numel() == 3 * 8 * memory.mla_values_per_token(cfg) == 3 * 8 * 20


@pytest.mark.parametrize("cfg", [K3Config.micro(), K3Config.tiny()], ids=["micro", "tiny"])
def test_whole_model_caches_after_prefill_and_decode_match_the_accounting(cfg):
    torch.manual_seed(0)
    model = K3Model(cfg).eval().requires_grad_(False)
    B, T = 2, 5
    ids = torch.randint(0, cfg.vocab_size, (B, T))
    with torch.inference_mode():
        out = model(ids, record=False)
        seen = [(T, out.cache)]
        for step in range(2):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)                # [B, 1]
            out = model(nxt, cache=out.cache, record=False)
            seen.append((T + step + 1, out.cache))
    kda_sizes = set()
    for tokens, cache in seen:
        want = memory.predicted_numel(cfg, tokens, batch=B)
        assert cache.length == tokens
        assert cache.numel("kda") == want["kda"]
        assert cache.numel("mla") == want["mla"]
        kda_sizes.add(cache.numel("kda"))
    assert len(kda_sizes) == 1            # the KDA state never grows
