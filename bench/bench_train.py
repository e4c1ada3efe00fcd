"""Tokens per second of one training step: the step before the speed-ups against today's, in one run.

    python bench/bench_train.py [--batch 32] [--micro 8] [--seq 128] [--steps 3] [--warmup 3] [--baseline REV]

The earlier step is run from a git worktree of REV (default: the last commit before the faster step),
so both are the real code of their day, on the same machine, data and batch, one after the other.
Both start from the same freshly initialised tiny K3 (what a training run starts from) and do full steps:
forward, loss, backward, gradient clipping, AdamW and Quantile Balancing. Warm-up steps (which for
today's step include compiling the attention modules) are not timed. Prints tokens/s of each and the
ratio; nothing here is a test.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "2036395"   # main before the faster training step (router gradient, top-k, tiles, compile)

# What both steps start from, written against names both trees have (the earlier tree has no helper
# for it): arguments B T warmup steps micro, the corpus, a fresh tiny K3 and model/train.py's AdamW.
SETUP = r"""
import json, sys, time, numpy as np, torch, torch.nn.functional as F
from model.config import K3Config
from model.k3 import K3Model
from model.tokenizer import Tokenizer
from model.train import token_arrays
B, T, warmup, steps, micro = map(int, sys.argv[1:6])
torch.manual_seed(0)
train, _, _ = token_arrays(Tokenizer.load())
model = K3Model(K3Config.tiny()).train()
decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
rest = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                        lr=3e-3, betas=(0.9, 0.95), fused=True)
"""

# The step as model/train.py ran it at BEFORE: one forward per batch, the balancing window of 3 batches.
OLD_STEP = SETUP + r"""
from model.train import balance_step, batch
history, times = {}, []
for s in range(warmup + steps):
    ids = batch(train, np.random.default_rng([0, s]), B, T, "cpu")
    t0 = time.perf_counter()
    out = model(ids[:, :-1], record=False)
    loss = F.cross_entropy(out.logits.flatten(0, 1).float(), ids[:, 1:].flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    balance_step(model, out.trace.routes, history)
    times.append(time.perf_counter() - t0)
print(json.dumps({"seconds": times[warmup:]}))
"""

# Today's step: model.train.train_step with the attention modules compiled, the batch routed in
# micro-batches as `python -m model.train` does on a CPU.
NEW_STEP = SETUP + r"""
from model.train import batch, compile_attention, train_step
compile_attention(model)
times = []
for s in range(warmup + steps):
    ids = batch(train, np.random.default_rng([0, s]), B, T, "cpu")
    t0 = time.perf_counter()
    train_step(model, opt, list(ids.split(micro)), 3e-3, False)
    times.append(time.perf_counter() - t0)
print(json.dumps({"seconds": times[warmup:]}))
"""


def run(code: str, cwd: Path, args: list[int], env: dict | None) -> list[float]:
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=3600)
    if out.returncode:
        raise SystemExit(f"the step in {cwd} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--micro", type=int, default=8, help="today's step: sequences per forward")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3, help="timed steps of each")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (compile, QB settling)")
    ap.add_argument("--baseline", default=BEFORE, help="git revision of the earlier step")
    a = ap.parse_args(argv)
    tokens = a.batch * a.seq
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), a.baseline], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            env = {**os.environ, "PYTHONPATH": str(tree)}
            results["before"] = run(OLD_STEP, tree, [a.batch, a.seq, a.warmup, a.steps, a.batch], env)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    results["today"] = run(NEW_STEP, ROOT, [a.batch, a.seq, a.warmup, a.steps, a.micro], env)

    med = {k: sorted(v)[len(v) // 2] for k, v in results.items()}
    print(f"batch {a.batch} x {a.seq} = {tokens:,} tokens per step, {a.steps} timed steps after {a.warmup}")
    for k in ("before", "today"):
        print(f"  {k:7s} ({a.baseline if k == 'before' else 'this tree'}): median {med[k]:.2f} s/step, "
              f"{tokens / med[k]:,.0f} tokens/s  (steps: {', '.join(f'{s:.2f}' for s in results[k])})")
    print(f"  speed-up {med['before'] / med['today']:.2f}x")


if __name__ == "__main__":
    main()
