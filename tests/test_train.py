"""The training step (model/train.py): one step's Quantile Balancing, resuming, the GPU script."""
from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from model import train as T
from model.config import K3Config
from model.k3 import K3Model
from model.moe import quantile_balance

MICRO = K3Config.micro()
ROOT = Path(__file__).resolve().parent.parent


def _model_and_opt(seed=0):
    torch.manual_seed(seed)
    model = K3Model(MICRO).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, opt


def test_one_step_balances_from_its_whole_batch():
    # Eq. 14: after a step, every bias is the QB solution of that step's whole batch routed with the
    # bias the step began with, even when the step routes the batch in two micro-batches.
    model, opt = _model_and_opt()
    for i in MICRO.moe_layers:                                      # a start away from zero
        model.layers[i].ffn.router.expert_bias.copy_(torch.randn(MICRO.n_routed_experts) * 0.05)
    ids = torch.randint(0, MICRO.vocab_size, (6, 17), generator=torch.Generator().manual_seed(1))
    before = copy.deepcopy(model).eval()
    with torch.no_grad():
        ref = before(ids[:, :-1], record=False)
    stats = T.train_step(model, opt, list(ids.split(4)), 1e-3, quant=False)   # pieces of 4 and 2
    for i in MICRO.moe_layers:
        info = ref.trace.routes[i]
        E = info.scores.shape[-1]
        want = quantile_balance(info.scores.reshape(-1, E), before.layers[i].ffn.router.expert_bias,
                                MICRO.top_k)
        torch.testing.assert_close(model.layers[i].ffn.router.expert_bias, want, rtol=0, atol=1e-6)
    want_loss = F.cross_entropy(ref.logits.flatten(0, 1), ids[:, 1:].flatten()).item()
    assert stats["loss"] == pytest.approx(want_loss, rel=1e-5)     # the whole batch's mean loss
    assert stats["max_mean_load"] >= 1.0 and 0 <= stats["dead_experts"] <= MICRO.n_routed_experts


def test_micro_batches_give_the_whole_batch_gradient():
    # plain SGD, so the update is the gradient itself (Adam's first step is about sign(g), which
    # would magnify rounding noise in near-zero gradients)
    a, _ = _model_and_opt()
    b = copy.deepcopy(a)
    opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=1.0), torch.optim.SGD(b.parameters(), lr=1.0)
    ids = torch.randint(0, MICRO.vocab_size, (4, 13), generator=torch.Generator().manual_seed(2))
    start = copy.deepcopy(a)
    T.train_step(a, opt_a, [ids], 1.0, quant=False)
    T.train_step(b, opt_b, list(ids.split(1)), 1.0, quant=False)
    moved = 0
    for (name, p), q, p0 in zip(a.named_parameters(), b.parameters(), start.parameters()):
        torch.testing.assert_close(p - p0, q - p0, rtol=1e-4, atol=1e-6, msg=name)
        moved += int(not torch.equal(p, p0))
    assert moved > 100


def test_resume_refuses_another_run(tmp_path):
    model, opt = _model_and_opt()
    T.train_step(model, opt, [torch.randint(0, MICRO.vocab_size, (2, 9))], 1e-3, quant=False)
    meta = {"corpus_fingerprint": "abc", "config": MICRO.to_dict()}
    args = {"steps": 10, "batch": 2, "seq": 8, "seed": 0, "lr": 1e-3, "quant_from": 0.7}
    T.save_state(model, opt, 1, args, tmp_path / "state", meta)
    fresh, fresh_opt = _model_and_opt(seed=1)
    assert T.load_state(fresh, fresh_opt, tmp_path / "state", expect=meta, args=args) == 1
    for p, q in zip(model.state_dict().values(), fresh.state_dict().values()):
        assert torch.equal(p, q)
    with pytest.raises(SystemExit, match="another corpus fingerprint"):
        T.load_state(fresh, fresh_opt, tmp_path / "state", expect={**meta, "corpus_fingerprint": "xyz"})
    with pytest.raises(SystemExit, match="another config"):
        T.load_state(fresh, fresh_opt, tmp_path / "state",
                     expect={**meta, "config": K3Config.tiny().to_dict()})
    with pytest.raises(SystemExit, match="--batch 2, this one 8"):
        T.load_state(fresh, fresh_opt, tmp_path / "state", expect=meta, args={**args, "batch": 8})
    # a continued run (--init-from, a path) with routers of some layers at their own rate (a tuple)
    # resumes: the state file keeps them as text and a list, and they still compare equal
    cont = {**args, "init_from": Path("assets/k3_tiny.safetensors"), "router_lr": 10.0, "router_layers": (2, 3)}
    T.save_state(model, opt, 1, cont, tmp_path / "cont", meta)
    assert T.load_state(fresh, fresh_opt, tmp_path / "cont", expect=meta, args=cont) == 1
    with pytest.raises(SystemExit, match="--router-layers \\[2, 3\\], this one \\[1, 3\\]"):
        T.load_state(fresh, fresh_opt, tmp_path / "cont", expect=meta, args={**cont, "router_layers": (1, 3)})


def test_token_arrays_fall_back_to_one_carried_cache_where_the_pages_are_missing(tmp_path, monkeypatch):
    # A lent GPU machine has no Debian packages: the token cache carried there stands in for the corpus.
    from model import corpus
    from model.tokenizer import Tokenizer
    tok = Tokenizer.load()
    monkeypatch.setattr(corpus, "GUIDE_ROOT", tmp_path / "no-such-folder")
    monkeypatch.setattr(T, "RUNS", tmp_path)
    with pytest.raises(SystemExit, match="python3.*-doc.*found 0"):
        T.token_arrays(tok)
    facts = {"corpus_fingerprint": "f00", "unwrapped_prose": True, "train_tokens": 3, "val_tokens": 2}
    np.savez(tmp_path / f"tokens-f00-{tok.digest()}.npz", train=np.array([1, 2, 3], np.uint16),
             val=np.array([4, 5], np.uint16), facts=json.dumps(facts))
    np.savez(tmp_path / "tokens-f00-othertokenizer.npz", train=np.array([9], np.uint16))
    # a cache of the text as written is another corpus for a run that trains on it unwrapped
    written = facts | {"corpus_fingerprint": "f02", "unwrapped_prose": False}
    np.savez(tmp_path / f"tokens-f02-{tok.digest()}.npz", train=np.array([7], np.uint16),
             val=np.array([8], np.uint16), facts=json.dumps(written))
    train, val, got = T.token_arrays(tok)
    assert train.tolist() == [1, 2, 3] and val.tolist() == [4, 5] and got == facts
    train, _, got = T.token_arrays(tok, unwrap_prose=False)
    assert train.tolist() == [7] and got == written
    np.savez(tmp_path / f"tokens-f01-{tok.digest()}.npz", train=np.array([1], np.uint16),
             val=np.array([2], np.uint16), facts=json.dumps(facts | {"corpus_fingerprint": "f01"}))
    with pytest.raises(SystemExit, match="found 2"):                 # which one? refuse to guess
        T.token_arrays(tok)


def test_a_continued_run_card_and_log_count_both_phases():
    before = {"steps": 1300, "tokens_seen": 5_324_800, "train_minutes": 344.1, "quant_from_step": 909, "lr": 0.003,
              "seed": 0, "untrained_val_loss": 8.81, "final_val_loss": 3.655,
              "data": {"corpus_fingerprint": "old", "unwrapped_prose": False}}
    run = {"steps": 180, "tokens_seen": 737_280, "train_minutes": 34.3, "quant_from_step": 0, "lr": 0.001, "seed": 1,
           "untrained_val_loss": 8.80, "final_val_loss": 3.61, "data": {"corpus_fingerprint": "new", "unwrapped_prose": True}}
    card = T.continued_facts(run, {"card": before, "val": 3.7743})
    assert (card["steps"], card["tokens_seen"], card["train_minutes"]) == (1480, 6_062_080, 378.4)
    assert card["quant_from_step"] == 909                      # on since step 909 and all through the second run
    first, second = card["phases"]
    assert first["lr"] == 0.003 and first["steps"] == 1300 and first["unwrapped_prose"] is False
    assert second["start_val_loss"] == 3.7743 and second["unwrapped_prose"] is True and second["steps"] == 180
    # a third run continues the list; an older card's pair of phases is read as its first two
    third = T.continued_facts(run | {"steps": 200, "tokens_seen": 819_200, "router_lr_multiple": 10.0, "seed": 3},
                              {"card": card, "val": 3.675})
    assert [p["steps"] for p in third["phases"]] == [1300, 180, 200]
    assert (third["steps"], third["tokens_seen"]) == (1680, 6_881_280) and third["phases"][2]["router_lr_multiple"] == 10
    legacy = {k: v for k, v in card.items() if k != "phases"} | {"continued_from": first, "continuation": second}
    assert T.continued_facts(run, {"card": legacy, "val": 3.675})["phases"][:2] == [first, second]
    later = T.continued_facts(run | {"quant_from_step": 50}, {"card": before, "val": 3.8})
    assert later["quant_from_step"] == 1350
    rows = T.continued_log([{"step": 0, "tokens": 4096}, {"step": 1299, "tokens": 5_324_800}],
                           [{"step": 0, "tokens": 4096}, {"step": 179, "tokens": 737_280}], before)
    assert [r["step"] for r in rows] == [0, 1299, 1300, 1479] and rows[-1]["tokens"] == 6_062_080


def test_gpu_script_runs_end_to_end_on_the_cpu(tmp_path):
    from model import corpus
    if not corpus.GUIDE_ROOT.is_dir() and not list(T.RUNS.glob("tokens-*.npz")):
        if os.environ.get("K3_REQUIRE_BROWSER"):
            pytest.fail(f"{corpus.GUIDE_ROOT} is missing (apt-get install -y python3.11-doc)")
        pytest.skip(f"{corpus.GUIDE_ROOT} is missing (apt-get install -y python3.11-doc): no corpus to train on")
    # The prepared GPU run, shrunk to seconds: fits the number of steps to its budget, writes the
    # checkpoint, card and log to OUT, and the checkpoint loads as the shipped one does.
    env = {**os.environ, "OUT": str(tmp_path), "BATCH": "2", "SEQ": "16", "MINUTES": "1"}
    out = subprocess.run(["bash", str(ROOT / "train_gpu.sh"), "--no-compile", "--calibrate-passes", "0"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "steps fit in 1.0 minutes" in out.stdout
    card = json.loads((tmp_path / "k3_tiny.json").read_text())
    assert card["steps"] == T.FIT_AFTER + 1 and card["batch"] == 2 and card["seq_len"] == 16
    log = (tmp_path / "train_log.csv").read_text().splitlines()
    assert len(log) == 1 + card["steps"]
    assert not (tmp_path / "runs").exists()
    from model.checkpoint import load_pretrained
    model, _ = load_pretrained(tmp_path / "k3_tiny.safetensors", tmp_path / "k3_tiny.json")
    assert sum(p.numel() for p in model.parameters()) > 30_000_000


def test_a_step_is_cut_into_equal_forwards_no_larger_than_asked():
    """The default micro-batch divides the batch (a step of 256 on a GPU: two forwards of 128, since 512 sequences in
    one forward ran out of an H200's memory and 192 do not divide 256)."""
    from model.train import CUDA_MICRO, largest_divisor
    assert largest_divisor(256, CUDA_MICRO) == 128
    assert largest_divisor(384, CUDA_MICRO) == 192
    assert largest_divisor(32, 8) == 8 and largest_divisor(12, 8) == 6 and largest_divisor(7, 8) == 7
    assert largest_divisor(13, 8) == 1
    for n in range(1, 300):
        d = largest_divisor(n, CUDA_MICRO)
        assert n % d == 0 and d <= CUDA_MICRO and not any(n % e == 0 for e in range(d + 1, min(n, CUDA_MICRO) + 1))


def test_router_learning_rate_multiple_applies_only_to_the_routers():
    # --router-lr m: after one step at rate lr, every router weight moved by at most m * lr (Adam's
    # first step moves each element by lr times its rate, here exactly, with no decay on the routers),
    # and every other matrix by about lr; m = 1 keeps the two original groups
    model = K3Model(MICRO).train()
    assert len(T.make_optimizer(model, 1e-3).param_groups) == 2
    opt = T.make_optimizer(model, 1e-3, router_lr=10.0)
    router = [p for n, p in model.named_parameters() if n.endswith("router.weight")]
    assert len(router) == len(MICRO.moe_layers) and opt.param_groups[2]["params"] == router
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids = torch.randint(0, MICRO.vocab_size, (4, 17), generator=torch.Generator().manual_seed(2))
    T.train_step(model, opt, [ids], 1e-3, quant=False)
    moved = {n: (p.detach() - before[n]).abs().max().item() for n, p in model.named_parameters()}
    routers = [moved[n] for n in moved if n.endswith("router.weight")]
    others = [moved[n] for n, p in model.named_parameters() if p.dim() >= 2 and not n.endswith("router.weight")]
    assert max(routers) > 5e-3 and max(routers) <= 1e-2 * 1.001      # at 10 x lr, not at lr
    assert max(others) <= 2.5e-3       # lr, plus the rounding of parameters kept in bf16


def test_router_layers_take_the_multiple_only_in_the_layers_named():
    # --router-layers 2-3: the routers of layers 2 and 3 form the fast group; layer 1's router stays with
    # the matrices (weight decay 0.1, the schedule's rate); a range with no MoE layer, or no range, is refused
    model = K3Model(MICRO).train()
    assert MICRO.moe_layers[0] == 1 and len(MICRO.moe_layers) >= 3
    opt = T.make_optimizer(model, 1e-3, router_lr=10.0, router_layers=(2, 3))
    names = {id(p): n for n, p in model.named_parameters()}
    fast = sorted(names[id(p)] for p in opt.param_groups[2]["params"])
    assert fast == ["layers.2.ffn.router.weight", "layers.3.ffn.router.weight"]
    assert "layers.1.ffn.router.weight" in {names[id(p)] for p in opt.param_groups[0]["params"]}
    assert T.layer_range("47-92") == (47, 92)
    for bad in ("47", "92-47", "a-b", "-3-4"):
        with pytest.raises(argparse.ArgumentTypeError):
            T.layer_range(bad)
    with pytest.raises(SystemExit, match="holds no MoE layer"):
        T.main(["--router-lr", "10", "--router-layers", "0-0", "--steps", "1"])


def test_calibration_moves_each_bias_to_the_qb_solution_of_its_pass_or_a_step_of_the_way():
    """calibrate_balance: with step 1 every bias becomes the exact QB solution (quantile_balance) of the
    tokens the pass routed, within the histogram's resolution; with step 0.5 it moves half of the way."""
    torch.manual_seed(0)
    model = K3Model(MICRO).eval()
    for i in MICRO.moe_layers:
        model.layers[i].ffn.router.expert_bias.copy_(torch.randn(MICRO.n_routed_experts) * 0.05)
    data = np.random.default_rng(0).integers(0, MICRO.vocab_size, 5000).astype(np.uint16)
    start = {i: model.layers[i].ffn.router.expert_bias.clone() for i in MICRO.moe_layers}
    full, half = copy.deepcopy(model), copy.deepcopy(model)
    quiet = dict(tokens=256, passes=1, B=4, T=32, seed=7, log=lambda *_: None)
    history = T.calibrate_balance(full, data, **quiet)
    T.calibrate_balance(half, data, step=0.5, **quiet)
    assert len(history) == 1 and history[0] >= 1.0
    rng = np.random.default_rng([7, 0])                       # the batches of pass 1, routed with the start biases
    routes = [model(T.batch(data, rng, 4, 32, "cpu")).trace.routes for _ in range(2)]
    for i in MICRO.moe_layers:
        scores = torch.cat([r[i].scores.reshape(-1, MICRO.n_routed_experts) for r in routes]).float()
        want = quantile_balance(scores, start[i], MICRO.top_k)
        bin_width = (float(start[i].max()) - float(start[i].min()) + 2) / 1000
        got = full.layers[i].ffn.router.expert_bias
        assert (got - want).abs().max() <= 2 * bin_width
        torch.testing.assert_close(half.layers[i].ffn.router.expert_bias, (start[i] + got) / 2, rtol=0, atol=1e-6)
