"""The assembled model: accounting equals numel, decode equals the full forward, the trace counts the
real AttnRes reads, routing overrides act only where and how they are asked to."""
import subprocess
import sys

import pytest
import torch

from model.accounting import count_params
from model.attnres import link_count
from model.config import K3Config
from model.k3 import K3Model, RoutingOverride, RunOptions
from tests.conftest import ROOT


def make(cfg, seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    return K3Model(cfg).to(dtype).eval()


@pytest.mark.parametrize("cfg", [K3Config.micro(), K3Config.tiny(), K3Config.micro().with_(attnres="full"),
                                 K3Config.micro().with_(attnres=None, mla_gate=False, latent_dim=None)],
                         ids=["micro", "tiny", "micro-full-attnres", "micro-k2-style"])
def test_accounting_equals_numel_of_the_real_model(cfg):
    model = K3Model(cfg)
    assert sum(p.numel() for p in model.parameters()) == count_params(cfg).total
    # the balancing bias is a buffer set by QB, not a trainable parameter
    assert all("expert_bias" not in n for n, _ in model.named_parameters())


@pytest.mark.parametrize("mode,block", [("block", 2), ("block", 12), ("full", None)])
def test_trace_link_count_matches_closed_form(mode, block):
    cfg = K3Config.micro().with_(attnres=mode, attnres_block_size=block or 12)
    out = make(cfg)(torch.randint(0, cfg.vocab_size, (1, 5)))
    assert out.trace.link_count == link_count(cfg.num_layers, block, reads_per_layer=2, output_read=True)
    assert len(out.trace.reads) == 2 * cfg.num_layers + 1


def test_tiny_trace_counts_1003_links_and_routes_top16():
    cfg = K3Config.tiny()
    out = make(cfg)(torch.randint(0, cfg.vocab_size, (1, 6)))
    assert out.trace.link_count == 1003                   # ARCHITECTURE.md section 1, as K3 runs it
    assert out.logits.shape == (1, 6, cfg.vocab_size)
    e = out.trace.experts(92)
    assert e.shape == (1, 6, 16) and all(len(set(row.tolist())) == 16 for row in e[0])
    assert out.trace.scores(1).shape == (1, 6, 896)
    assert torch.allclose(out.trace.weights(40).sum(-1), torch.ones(1, 6))
    with pytest.raises(KeyError, match="dense"):
        out.trace.experts(0)


@pytest.mark.parametrize("mode", ["block", "full"])
def test_prefill_then_decode_equals_full_forward(mode):
    cfg = K3Config.micro().with_(attnres=mode)
    model = make(cfg, dtype=torch.float64)
    ids = torch.randint(0, cfg.vocab_size, (2, 9))
    with torch.no_grad():
        full = model(ids).logits
        out = model(ids[:, :4])
        steps = [out.logits]
        cache = out.cache
        for t in range(4, 9):
            out = model(ids[:, t:t + 1], cache=cache)
            cache = out.cache
            steps.append(out.logits)
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-9)
    assert cache.length == 9
    # MLA caches grow one latent row per token; KDA states do not grow
    mla_per_token = cfg.kv_lora_rank + cfg.qk_rope_dim
    assert cache.numel("mla") == 2 * 9 * mla_per_token * cfg.n_mla
    short = model(ids[:, :2]).cache
    assert short.numel("kda") == cache.numel("kda")


def test_causal():
    cfg = K3Config.micro()
    model = make(cfg, dtype=torch.float64)
    ids = torch.randint(0, cfg.vocab_size, (1, 8))
    ids2 = ids.clone()
    ids2[0, 6] = (ids[0, 6] + 1) % cfg.vocab_size
    a, b = model(ids).logits, model(ids2).logits
    assert torch.equal(a[:, :6], b[:, :6]) and not torch.allclose(a[:, 6:], b[:, 6:])


def test_routing_override_per_layer_changes_only_later_layers():
    cfg = K3Config.micro()
    model = make(cfg)
    ids = torch.randint(0, cfg.vocab_size, (1, 7))
    base = model(ids)
    knocked = tuple(base.trace.experts(3)[0, 0].tolist())            # token 0's choices at layer 3
    out = model(ids, routing={3: RoutingOverride(knocked_out=knocked)})
    for layer in (1, 2):
        assert torch.equal(out.trace.experts(layer), base.trace.experts(layer))
    assert not set(out.trace.experts(3)[0, 0].tolist()) & set(knocked)
    assert not torch.allclose(out.logits, base.logits)
    forced = model(ids, routing=RoutingOverride(forced=(5,), top_k=2))
    for layer in cfg.moe_layers:
        e = forced.trace.experts(layer)
        assert e.shape[-1] == 2 and bool((e == 5).any(-1).all())
    dense = model(ids, routing=RoutingOverride(top_k=cfg.n_routed_experts))
    assert dense.trace.experts(1).shape[-1] == cfg.n_routed_experts


def test_zero_queries_read_uniformly_and_options_change_the_output():
    cfg = K3Config.micro()
    model = make(cfg)
    ids = torch.randint(0, cfg.vocab_size, (1, 5))
    out = model(ids)
    for label, w, names in out.trace.reads:
        assert torch.allclose(w, torch.full_like(w, 1 / len(names))), label
    assert not torch.allclose(model(ids, activation="swiglu").logits, out.logits)
    q = model(ids, quant=True).logits
    # MXFP4 experts perturb the output (per-layer error bounds are tested in test_moe / test_quant)
    assert not torch.equal(q, out.logits) and torch.isfinite(q).all()


def module_attributes(model):
    """Every plain attribute of every submodule (not its parameters, buffers or children), by identity."""
    skip = {"_parameters", "_buffers", "_modules"}
    return {(name, k): id(v) for name, m in model.named_modules() for k, v in vars(m).items() if k not in skip}


@pytest.mark.parametrize("precomputed", [False, True])
def test_the_model_is_not_mutated_by_a_call(precomputed):
    cfg = K3Config.micro()
    model = make(cfg)
    if precomputed:                                        # what load_pretrained does, before any call
        for moe in model.moe_layers():
            moe.precompute_quant()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    versions = {k: v._version for k, v in model.state_dict().items()}
    attrs = module_attributes(model)
    with torch.no_grad():
        model(torch.randint(0, cfg.vocab_size, (1, 5)), routing=RoutingOverride(top_k=1, use_bias=False),
              quant=True, activation="swiglu")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert {k: v._version for k, v in model.state_dict().items()} == versions   # no in-place write
    assert module_attributes(model) == attrs               # no attribute set or replaced (no cache)


def test_precomputed_quantisation_equals_quantising_in_the_call():
    cfg = K3Config.micro()
    model = make(cfg)
    ids = torch.randint(0, cfg.vocab_size, (1, 6))
    with torch.no_grad():
        per_call = model(ids, quant=True).logits
        for moe in model.moe_layers():
            moe.precompute_quant()
        assert torch.equal(model(ids, quant=True).logits, per_call)


def test_run_options_are_one_hashable_value():
    ov = RoutingOverride(top_k=4, knocked_out=[2, 1])               # a list is kept as a tuple
    a = RunOptions({5: ov, 2: RoutingOverride(use_bias=False)}, quant=1)
    b = RunOptions(((2, RoutingOverride(use_bias=False)), (5, RoutingOverride(top_k=4, knocked_out=(2, 1)))),
                   quant=True)
    assert a == b and hash(a) == hash(b) and a.quant is True
    assert RunOptions({}) == RunOptions() == RunOptions(None)
    assert len({a, b, RunOptions(), RunOptions(activation="swiglu"), RunOptions(ov)}) == 4
    assert a.routing_at(5) == ov and a.routing_at(2).use_bias is False and a.routing_at(3) is None
    assert RunOptions(ov).routing_at(77) == ov
    with pytest.raises(ValueError, match="activation"):
        RunOptions(activation="relu")
    with pytest.raises(ValueError, match="RoutingOverride"):
        RunOptions({3: 4})


def test_options_whole_or_as_shorthands_run_the_same_call():
    cfg = K3Config.micro()
    model = make(cfg, dtype=torch.float64)
    ids = torch.randint(0, cfg.vocab_size, (1, 6))
    routing = {2: RoutingOverride(top_k=2), 4: RoutingOverride(use_bias=False)}
    opts = RunOptions(routing, quant=True, activation="swiglu")
    a = model(ids, routing=routing, quant=True, activation="swiglu")
    b = model(ids, options=opts)
    assert torch.equal(a.logits, b.logits) and a.options == b.options == opts
    assert torch.equal(model.resume(model(ids), 0, options=opts).logits, a.logits)
    with pytest.raises(ValueError, match="not both"):
        model(ids, routing=routing, options=opts)


def replayed_inputs(model, out, layer):
    """What the app used to compute: resume the residual state entering `layer`, redo the pre-attention
    read and norm, add the recorded attention output, redo the pre-FFN read and norm."""
    lyr = model.layers[layer]
    state = out.trace.snapshots[layer].copy()
    state.record = False
    state.begin_layer(layer)
    h, _ = state.read(lyr.q_attn)
    x_attn = lyr.attn_norm(h)
    state.add(out.trace.outputs[(layer, "attn")])
    h, _ = state.read(lyr.q_ffn)
    return x_attn, lyr.ffn_norm(h)


@pytest.mark.parametrize("mode", ["block", "full", None])
def test_trace_records_each_module_input(mode):
    cfg = K3Config.micro().with_(attnres=mode, attnres_block_size=2)
    model = make(cfg, dtype=torch.float64)
    with torch.no_grad():                  # non-zero depth queries and gains, so every read matters
        for name, p in model.named_parameters():
            if name.endswith(("proj", "gain", "norm.weight")):
                p.add_(0.3 * torch.randn_like(p))
    ids = torch.randint(0, cfg.vocab_size, (2, 7))
    with torch.no_grad():
        out = model(ids)
        for i, layer in enumerate(model.layers):
            x_attn, x_ffn = out.trace.module_input(i, "attn"), out.trace.module_input(i, "ffn")
            ref_attn, ref_ffn = replayed_inputs(model, out, i)
            torch.testing.assert_close(x_attn, ref_attn, rtol=0, atol=1e-12)
            torch.testing.assert_close(x_ffn, ref_ffn, rtol=0, atol=1e-12)
            # and they are what the modules map to the outputs they recorded
            a, _ = layer.attn(x_attn) if layer.kind == "kda" else layer.attn(x_attn, absorbed=False)
            torch.testing.assert_close(a, out.trace.outputs[(i, "attn")], rtol=0, atol=1e-12)
            m = layer.ffn(x_ffn)[0] if layer.is_moe else layer.ffn(x_ffn)
            torch.testing.assert_close(m, out.trace.outputs[(i, "ffn")], rtol=0, atol=1e-12)
        # a resumed call records the inputs of the layers it reused and of those it re-ran
        resumed = model.resume(out, 3, routing=RoutingOverride(top_k=1))
    for i in range(cfg.num_layers):
        for module in ("attn", "ffn"):
            assert resumed.trace.module_input(i, module).shape == (2, 7, cfg.d_model)
    assert resumed.trace.module_input(1, "ffn") is out.trace.module_input(1, "ffn")
    assert not torch.equal(resumed.trace.module_input(4, "attn"), out.trace.module_input(4, "attn"))
    with pytest.raises(KeyError, match="record=False"):
        model(ids, record=False).trace.module_input(1, "ffn")


def test_bad_input_gets_a_clear_error():
    cfg = K3Config.micro()
    model = make(cfg)
    with pytest.raises(ValueError, match="empty"):
        model(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.tensor([[1, cfg.vocab_size]]))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.tensor([[-1, 2]]))
    with pytest.raises(ValueError, match="cap"):
        model(torch.zeros(1, 9, dtype=torch.long), max_tokens=8)
    with pytest.raises(ValueError, match="integer"):
        model(torch.zeros(1, 3))
    with torch.no_grad():
        model.head.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        model(torch.zeros(1, 3, dtype=torch.long))


def test_trace_exposes_bias_sources_and_activation_statistics():
    cfg = K3Config.tiny()
    model = make(cfg)
    for moe in model.moe_layers():
        moe.router.expert_bias.normal_()
    out = model(torch.randint(0, cfg.vocab_size, (1, 4)))
    assert torch.equal(out.trace.bias(7), model.layers[7].ffn.router.expert_bias)
    assert out.trace.routes[7].bias is not model.layers[7].ffn.router.expert_bias   # a copy, not the buffer
    no_bias = model(torch.randint(0, cfg.vocab_size, (1, 4)), routing=RoutingOverride(use_bias=False))
    assert not no_bias.trace.bias(7).any()
    label, w, names = out.trace.reads[-1]
    assert label == "out" and len(names) == 9 == w.shape[-1]     # embedding + 7 sealed blocks + partial
    stats = out.trace.activation_stats()
    assert len(stats) == 2 * 93 and all(s["rms"] > 0 and s["max_abs"] >= s["rms"] for s in stats)


def test_resume_from_a_layer_equals_the_full_forward():
    cfg = K3Config.micro()
    model = make(cfg, dtype=torch.float64)
    ids = torch.randint(0, cfg.vocab_size, (1, 6))
    base = model(ids)
    ov = RoutingOverride(top_k=2, use_bias=False)
    later = {layer: ov for layer in cfg.moe_layers if layer >= 3}
    full = model(ids, routing=later)
    resumed = model.resume(base, 3, routing=later)
    assert torch.equal(resumed.logits, full.logits)
    assert resumed.trace.link_count == full.trace.link_count == base.trace.link_count
    for layer in cfg.moe_layers:
        assert torch.equal(resumed.trace.experts(layer), full.trace.experts(layer))
    assert len(resumed.trace.reads) == len(full.trace.reads)
    # the base is untouched and can be resumed again
    assert torch.equal(model.resume(base, 0).logits, base.logits)
    with pytest.raises(ValueError):
        model.resume(base, cfg.num_layers)


def test_model_with_weights_shares_the_tensors_and_imports_no_compiler():
    """The second model holds the first one's tensors themselves, and building it does not pull in
    torch._dynamo (building on the "meta" device did: ~2.9 s on a page's first visit)."""
    code = (
        "import sys, torch\n"
        "from model.config import K3Config\n"
        "from model.k3 import K3Model, model_with_weights\n"
        "torch.manual_seed(0)\n"
        "a = K3Model(K3Config.tiny())\n"
        "b = model_with_weights(a.cfg.with_(attnres='full'), a.state_dict())\n"
        "sa, sb = a.state_dict(), b.state_dict()\n"
        "assert sa.keys() == sb.keys()\n"
        "assert all(sa[k].data_ptr() == sb[k].data_ptr() for k in sa)\n"
        "assert not b.training and not any(p.requires_grad for p in b.parameters())\n"
        "print('dynamo' if 'torch._dynamo' in sys.modules else 'clean')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "clean"
