"""Train the live tiny K3 on the standard library's documentation and code (model/corpus.py).

    python -m model.train [--steps N] [--minutes M] [--batch B] [--micro b] [--seq T] [--fresh]

* Quantile Balancing after every step from that step's whole batch (the K3 report's Eq. 14; gathered
  over its micro-batches, all routed with the same bias, by StepQuantile, reusing the forwards' top-(k+1)
  cutoffs; see train_step and balance_step), MXFP4 fake-quantised routed experts with
  MXFP8 activations and a straight-through estimator in the last phase (quantisation-aware pre-training:
  this project's choice; K3 quantises only in post-training, SFT and RL), fused AdamW, fixed seed.
* A CSV log per step in runs/train_log.csv; resumable from runs/state.safetensors (+ .json), saved
  every few minutes: run the same command again to continue (a state of another corpus, config or
  schedule is refused). The data order depends only on (seed, step), so a resumed run sees the same
  batches an uninterrupted one would.
* Fast on a CPU: attention modules compiled (torch.compile), the router's gradient through the chosen
  scores only, a two-stage top-k, and an expert dispatch in tiles whose cost does not depend on how
  skewed the routing is; micro-batches (--micro) keep a step's memory small. bench/bench_train.py
  measures the step against the step before these.
* Device-agnostic: uses CUDA when available, with a larger batch (train_gpu.sh: about ten minutes on one GPU).
When the schedule is complete it writes the packed checkpoint to assets/ and copies the log to
assets/train_log.csv, then calibrates the balancing biases of the shipped (packed, re-loaded) model by Quantile Balancing over
far more tokens per update than a CPU training step holds (`calibrate_balance`). Bias only: no weight
changes. `python -m model.train --calibrate-only` runs just that phase on the shipped checkpoint.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from model.checkpoint import ASSETS, CARD, CHECKPOINT, PHASE_KEYS, card_phases, load_pretrained, read_card, save_pretrained
from model.config import K3Config
from model.corpus import SEPARATOR, CorpusMissing, documents_by_kind, fingerprint, guide_package, held_out, split
from model.k3 import K3Model
from model.moe import QuantileHistogram, StepQuantile, expert_load
from model.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "runs"
LOG_FIELDS = ["step", "tokens", "loss", "val_loss", "lr", "quant", "max_mean_load", "dead_experts",
              "bias_spread", "seconds"]


def _cache_form(path: Path) -> bool | None:
    """Whether a token cache holds the prose unwrapped (None: a file without facts, not a cache)."""
    with np.load(path) as z:
        return json.loads(str(z["facts"])).get("unwrapped_prose", False) if "facts" in z.files else None


def token_arrays(tok: Tokenizer, unwrap_prose: bool = True) -> tuple[np.ndarray, np.ndarray, dict]:
    """(train ids, validation ids, facts), cached in runs/ keyed by the corpus fingerprint. The model
    trains on the prose unwrapped (model.corpus.unwrap); `unwrap_prose=False` gives the text as written
    (what the instances before this one trained on). On a machine without the corpus's documentation
    pages (a lent GPU machine, which has no Debian packages to install), the one cache of this tokenizer
    and that form of the text that was carried there is used instead."""
    try:
        by_kind = documents_by_kind(unwrap_prose=unwrap_prose)
    except CorpusMissing as missing:
        caches = [c for c in sorted(RUNS.glob(f"tokens-*-{tok.digest()}.npz")) if _cache_form(c) == unwrap_prose]
        if len(caches) != 1:
            raise SystemExit(f"{missing}; nor is there exactly one token cache of this tokenizer in "
                             f"{RUNS} to use instead (found {len(caches)})") from None
        z = np.load(caches[0])
        print(f"{missing}: using the token cache {caches[0].name} built where it is installed")
        return z["train"], z["val"], json.loads(str(z["facts"]))
    docs = [d for v in by_kind.values() for d in v]
    kinds = [k for k, v in by_kind.items() for _ in v]
    key = fingerprint(docs)
    RUNS.mkdir(exist_ok=True)
    # keyed by the corpus, its split and the tokenizer: a change to any of them re-tokenises
    cache = RUNS / f"tokens-{key}-{tok.digest()}.npz"
    train_docs, val_docs = split(docs)
    facts = {"corpus_fingerprint": key, "guide_package": guide_package(), "unwrapped_prose": unwrap_prose,
             "documents": len(docs), "train_documents": len(train_docs),
             "val_documents": len(val_docs), "train_chars": sum(len(d) for d in train_docs),
             "kinds": {k: sum(len(d) for i, (kk, d) in enumerate(zip(kinds, docs)) if kk == k and not held_out(i))
                       for k in by_kind}}           # training characters of each kind of text
    if cache.exists():
        z = np.load(cache)
        train, val = z["train"], z["val"]
    else:
        def enc(ds):
            ids = []
            for enc_ids in tqdm((tok.encode(d + SEPARATOR) for d in ds), total=len(ds), desc="tokenising",
                                leave=False):
                ids.extend(enc_ids)
                ids.append(tok.eos_id)
            return np.array(ids, dtype=np.uint16)
        train, val = enc(train_docs), enc(val_docs)
    facts |= {"train_tokens": int(train.size), "val_tokens": int(val.size)}
    if not cache.exists():
        np.savez(cache, train=train, val=val, facts=json.dumps(facts))
    return train, val, facts


def batch(data: np.ndarray, rng: np.random.Generator, B: int, T: int, device) -> torch.Tensor:
    starts = rng.integers(0, data.size - T - 1, size=B)
    return torch.from_numpy(np.stack([data[s:s + T + 1] for s in starts]).astype(np.int64)).to(device)


def largest_divisor(n: int, most: int) -> int:
    """The largest number <= `most` that divides `n` (sequences per forward of a step of `n`)."""
    return max(d for d in range(1, min(n, most) + 1) if n % d == 0)


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def evaluate(model: K3Model, val: np.ndarray, T: int, device, n_batches: int = 4, B: int = 8,
             quant: bool = False) -> float:
    rng = np.random.default_rng(12345)                    # the same held-out windows every time
    losses = []
    for _ in range(n_batches):
        ids = batch(val, rng, B, T, device)
        out = model(ids[:, :-1], quant=quant, record=False)
        losses.append(F.cross_entropy(out.logits.flatten(0, 1).float(), ids[:, 1:].flatten()).item())
    return float(np.mean(losses))


@torch.no_grad()
def balance_step(model: K3Model, quantiles: dict[int, StepQuantile], loads: dict[int, torch.Tensor]) -> dict:
    """Quantile Balancing of every MoE layer from one step's batch (the report's Eq. 14): each bias is
    set from the quantiles gathered over the step's micro-batches, all routed with the bias the step
    began with. Returns load statistics of the batch, measured before the update."""
    ratios, dead, spread = [], [], []
    for i, acc in quantiles.items():
        load = loads[i].float()
        ratios.append((load.max() / load.mean()).item())
        dead.append(int((load == 0).sum()))
        bias = model.layers[i].ffn.router.expert_bias
        bias.copy_(acc.bias().to(bias.device, bias.dtype))
        spread.append((bias.max() - bias.min()).item())
    return {"max_mean_load": max(ratios), "dead_experts": float(np.mean(dead)),
            "bias_spread": float(np.mean(spread))}


def train_step(model: K3Model, opt: torch.optim.Optimizer, micro: list[torch.Tensor], lr: float,
               quant: bool) -> dict:
    """One optimiser step over the micro-batches `micro` (each [b, T + 1] token ids), then Quantile
    Balancing from the step's whole batch. Returns the loss and the load statistics."""
    for g in opt.param_groups:
        g["lr"] = lr * g.get("lr_mult", 1.0)
    opt.zero_grad(set_to_none=True)
    cfg = model.cfg
    tokens = sum(ids.shape[0] * (ids.shape[1] - 1) for ids in micro)
    quantiles = {i: StepQuantile(cfg.n_routed_experts, cfg.top_k, tokens) for i in cfg.moe_layers}
    loads = {i: 0 for i in cfg.moe_layers}
    total = 0.0
    for ids in micro:
        out = model(ids[:, :-1], quant=quant, record=False)
        loss = F.cross_entropy(out.logits.flatten(0, 1).float(), ids[:, 1:].flatten())
        (loss * (ids.shape[0] * (ids.shape[1] - 1) / tokens)).backward()
        total += loss.item() * ids.shape[0] * (ids.shape[1] - 1) / tokens
        for i, info in out.trace.routes.items():
            E = info.scores.shape[-1]
            quantiles[i].add(info.scores.reshape(-1, E), info.cutoff.reshape(-1))
            loads[i] = loads[i] + expert_load(info.indices, E)
        del out, loss
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return {"loss": total, **balance_step(model, quantiles, loads)}   # the next step routes with the new bias


def make_optimizer(model: K3Model, lr: float, router_lr: float = 1.0,
                   router_layers: tuple[int, int] | None = None) -> torch.optim.AdamW:
    """AdamW with weight decay 0.1 on matrices except the embedding. With `router_lr` != 1 the routers'
    W_r form a group of their own at `router_lr` times the schedule's rate, without weight decay: those of
    every MoE layer, or with `router_layers` (first, last) those of layers first..last only (the others
    stay with the matrices)."""
    lo, hi = router_layers or (0, len(model.layers))

    def router(n: str) -> bool:       # parameter names read layers.<i>.ffn.router.weight
        return router_lr != 1.0 and n.endswith("router.weight") and lo <= int(n.split(".")[1]) <= hi
    groups = {"decay": [], "no_decay": [], "router": []}
    for n, p in model.named_parameters():
        kind = "router" if router(n) else "decay" if p.dim() >= 2 and "embed" not in n else "no_decay"
        groups[kind].append(p)
    spec = [{"params": groups["decay"], "weight_decay": 0.1}, {"params": groups["no_decay"], "weight_decay": 0.0}]
    if groups["router"]:
        spec.append({"params": groups["router"], "weight_decay": 0.0, "lr_mult": router_lr})
    return torch.optim.AdamW(spec, lr=lr, betas=(0.9, 0.95), fused=True)


def layer_range(text: str) -> tuple[int, int]:
    """--router-layers: "47-92" -> (47, 92); a clear error for anything else."""
    try:
        first, last = (int(part) for part in text.split("-"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not FIRST-LAST, e.g. 47-92") from None
    if not 0 <= first <= last:
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 <= FIRST <= LAST")
    return first, last


def compile_attention(model: K3Model) -> None:
    """torch.compile every attention module in place (fixed shapes for a training run: one graph per
    kind, shared by all 69 KDA and all 24 MLA layers, compiled in about a minute). The MoE layers stay
    eager: their grouped dispatch has data-dependent group sizes, and compiling them measured slower."""
    for layer in model.layers:
        layer.attn.compile()


@torch.no_grad()
def calibrate_balance(model: K3Model, data: np.ndarray, tokens: int = 65536, passes: int = 4,
                      B: int = 8, T: int = 128, seed: int = 7, log=print, step: float = 1.0) -> list[float]:
    """Quantile Balancing with `tokens` tokens per update, the biases of all MoE layers at once.

    A CPU training step holds 1,024 tokens, ~18 per expert: its quantile is noisy, so the biases a
    training run ends with balance the batches they came from but not the next. K3 updates its biases
    from the routing of very large batches; this phase does the same with the trained weights frozen:
    per pass it routes `tokens` training tokens with the current biases, accumulates each layer's
    QuantileHistogram (counts add over micro-batches), then moves every bias `step` of the way to the
    histogram's QB solution (1: all the way). Each expert's solution assumes the others' biases stay,
    so experts competing for the same tokens overshoot together; a step below 1 damps that swing. Later
    layers see inputs that depend on earlier selections, so a few passes settle it.
    Returns the median over layers of max/mean load measured during each pass (before its update).
    """
    model.eval()
    layers = list(model.cfg.moe_layers)
    history = []
    for p in range(passes):
        rng = np.random.default_rng([seed, p])
        hists = {i: QuantileHistogram(model.layers[i].ffn.router.expert_bias.float(), model.cfg.top_k) for i in layers}
        loads = {i: torch.zeros(model.cfg.n_routed_experts) for i in layers}
        for _ in tqdm(range(max(1, tokens // (B * T))), desc=f"balance pass {p + 1}/{passes}", leave=False):
            ids = batch(data, rng, B, T, next(model.parameters()).device)
            out = model(ids)
            for i in layers:
                info = out.trace.routes[i]
                E = info.scores.shape[-1]
                hists[i].add(info.scores.reshape(-1, E).float().cpu(), model.layers[i].ffn.router.expert_bias.float().cpu())
                loads[i] += expert_load(info.indices.reshape(-1, info.indices.shape[-1]).cpu(), E).float()
        ratios = [(loads[i].max() / loads[i].mean()).item() for i in layers]
        history.append(float(np.median(ratios)))
        log(f"balance pass {p + 1}: max/mean load median {history[-1]:.3f}, worst {max(ratios):.3f} "
            f"over {len(layers)} layers (biases as they entered the pass)")
        for i in layers:
            bias = model.layers[i].ffn.router.expert_bias
            target = hists[i].bias().to(bias.device, torch.float32)
            bias.copy_((bias.float() + step * (target - bias.float())).to(bias.dtype))
    return history


def calibrate_shipped(tokens: int, passes: int, seed: int = 7, folder: Path = ASSETS, step: float = 1.0) -> dict:
    """Load the shipped checkpoint, calibrate its biases, write it back with the facts kept."""
    path, card = folder / CHECKPOINT.name, folder / CARD.name
    model, tok = load_pretrained(path, card)
    train, _, _ = token_arrays(tok)
    t0 = time.time()
    history = calibrate_balance(model, train, tokens, passes, seed=seed, step=step)
    facts = {k: v for k, v in read_card(card).items() if k not in ("file", "sha256", "bytes", "config")}
    facts["balance_calibration"] = {
        "tokens_per_update": tokens, "passes": passes, "seed": seed, "step": step, "data": "training split",
        "median_max_mean_load_by_pass": [round(h, 3) for h in history],
        "minutes": round((time.time() - t0) / 60, 1),
        "what": "Quantile Balancing of the expert biases only, on the shipped (MXFP4/bf16) weights",
    }
    info = save_pretrained(model, facts, path, card)
    print(f"saved {info['file']} with calibrated biases ({info['bytes'] / 1e6:.1f} MB)")
    return info


def continued_facts(facts: dict, before: dict) -> dict:
    """The card of a run that continued a checkpoint: totals over all runs (steps, tokens, minutes), and
    under "phases" the earlier runs' facts followed by this run's."""
    prev = before["card"]
    this = {k: facts[k] for k in PHASE_KEYS if k in facts} | {
        "start_val_loss": round(before["val"], 4), "corpus_fingerprint": facts["data"]["corpus_fingerprint"],
        "unwrapped_prose": facts["data"].get("unwrapped_prose", False)}
    return facts | {
        "steps": prev["steps"] + facts["steps"], "tokens_seen": prev["tokens_seen"] + facts["tokens_seen"],
        "train_minutes": round(prev.get("train_minutes", 0) + facts["train_minutes"], 1),
        # quantisation-aware since that step of the earlier run if it was on all through this one
        "quant_from_step": (prev.get("quant_from_step", 0) if facts["quant_from_step"] == 0
                            else prev["steps"] + facts["quant_from_step"]),
        "untrained_val_loss": facts["untrained_val_loss"],
        "phases": card_phases(prev) + [this]}


def continued_log(rows_before: list[dict], rows: list[dict], card_before: dict) -> list[dict]:
    """One log of both runs: this run's steps and tokens counted on from the earlier run's."""
    steps, tokens = card_before.get("steps", len(rows_before)), card_before.get("tokens_seen", 0)
    return rows_before + [r | {"step": int(r["step"]) + steps, "tokens": int(r["tokens"]) + tokens} for r in rows]


def save_state(model, opt, step: int, args: dict, path: Path = RUNS / "state", meta: dict | None = None):
    """Model, optimiser and step as safetensors (+ a JSON of the run's arguments and `meta`: the corpus
    fingerprint and the config, which a resumed run must match)."""
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    names = {id(p): n for n, p in model.named_parameters()}
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p, {})
            for key in ("exp_avg", "exp_avg_sq", "step"):
                if key in st:
                    tensors[f"opt.{names[id(p)]}.{key}"] = st[key].detach().cpu().reshape(-1).contiguous() \
                        if key == "step" else st[key].detach().cpu().contiguous()
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp))
    tmp.replace(path.with_suffix(".safetensors"))
    path.with_suffix(".json").write_text(json.dumps({"step": step, "args": plain_args(args), **(meta or {})}))


def plain_args(args: dict) -> dict:
    """A run's arguments as its state file keeps them (paths as text, tuples as lists), so that a resumed
    run's arguments compare with the saved ones."""
    return json.loads(json.dumps({k: (str(v) if isinstance(v, Path) else v) for k, v in args.items()}))


CUDA_MICRO = 192        # sequences per forward on a GPU unless --micro says otherwise
FIT_AFTER = 7           # --fit-minutes: the step after which the number of steps is fixed
FIT_RESERVE_S = 60      # ... leaving this much of the budget for evaluation, export and calibration

# arguments a resumed run must share with the saved one: they fix the data order and the schedule
RESUME_ARGS = ("steps", "batch", "seq", "seed", "lr", "quant_from", "init_from", "router_lr", "router_layers")
WARMUP, WARMUP_CONTINUED = 50, 20     # steps of linear warm-up: from scratch, continuing a checkpoint


def load_state(model, opt, path: Path = RUNS / "state", expect: dict | None = None,
               args: dict | None = None) -> int:
    """Restore a saved run; refuses (SystemExit with the reason) a state of another corpus, config or
    schedule, rather than continuing a different run."""
    meta = json.loads(path.with_suffix(".json").read_text())
    for key, want in (expect or {}).items():
        if meta.get(key) != want:
            raise SystemExit(f"{path.with_suffix('.json')} was saved by a run with another {key.replace('_', ' ')} "
                             f"than this one: start over with --fresh (or point --runs at another folder)")
    saved = meta.get("args", {})
    args = plain_args(args) if args is not None else None
    for key in RESUME_ARGS:
        if args is not None and key in saved and saved[key] is not None and args.get(key) != saved[key]:
            raise SystemExit(f"the saved run used --{key.replace('_', '-')} {saved[key]}, this one "
                             f"{args.get(key)}: resume with the same value or start over with --fresh")
    tensors = load_file(str(path.with_suffix(".safetensors")))
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    params = dict(model.named_parameters())
    for group in opt.param_groups:
        for p in group["params"]:
            name = next(n for n, q in params.items() if q is p)
            if f"opt.{name}.exp_avg" in tensors:
                step = tensors[f"opt.{name}.step"].reshape(())
                opt.state[p] = {"exp_avg": tensors[f"opt.{name}.exp_avg"].to(p.device),
                                "exp_avg_sq": tensors[f"opt.{name}.exp_avg_sq"].to(p.device),
                                "step": step.to(torch.float32)}
    return int(meta["step"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1300, help="total optimiser steps (sets the schedule)")
    ap.add_argument("--minutes", type=float, default=180,
                    help="stop after this wall time (saving the state; run again to continue)")
    ap.add_argument("--fit-minutes", type=float, default=None,
                    help="set --steps from the speed of the first steps so that the whole schedule ends in "
                         "about this many minutes (a fresh run on a lent GPU)")
    ap.add_argument("--batch", type=int, default=None, help="sequences per step (default 32 CPU, 256 CUDA)")
    ap.add_argument("--micro", type=int, default=None,
                    help="sequences per forward; a step accumulates batch/micro of them (default 8 CPU, "
                         f"at most {CUDA_MICRO} CUDA)")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--router-lr", type=float, default=1.0,
                    help="the routers' learning rate as a multiple of the schedule's "
                         "(no weight decay on them when not 1)")
    ap.add_argument("--router-layers", type=layer_range, default=None, metavar="FIRST-LAST",
                    help="give --router-lr to the routers of layers FIRST..LAST only (e.g. 47-92; default all)")
    ap.add_argument("--quant-from", type=float, default=0.7, help="fraction of steps after which MXFP4 is on")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init-from", type=Path, default=None,
                    help="continue training a packed checkpoint (its card beside it: name.json): a new optimiser "
                         "and schedule, the checkpoint's steps and tokens counted in the card and the log")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--fresh", action="store_true", help="ignore a saved state and start over")
    ap.add_argument("--save-every", type=float, default=5.0, help="minutes between saved states")
    ap.add_argument("--no-compile", action="store_true", help="run the attention modules eagerly")
    ap.add_argument("--runs", type=Path, default=RUNS, help="folder for the state and the log")
    ap.add_argument("--out", type=Path, default=ASSETS, help="folder the finished checkpoint, card and log go to")
    ap.add_argument("--calibrate-tokens", type=int, default=65536, help="tokens per bias update at the end")
    ap.add_argument("--calibrate-passes", type=int, default=4)
    ap.add_argument("--calibrate-step", type=float, default=1.0,
                    help="each pass moves the biases this fraction of the way to its QB solution (below 1 damps "
                         "the swing of experts that compete for the same tokens)")
    ap.add_argument("--calibrate-only", action="store_true",
                    help="only re-balance the biases of the shipped checkpoint (no training)")
    args = ap.parse_args(argv)
    moe_layers = K3Config.tiny().moe_layers
    if args.router_layers and not set(range(args.router_layers[0], args.router_layers[1] + 1)) & set(moe_layers):
        raise SystemExit(f"--router-layers {args.router_layers[0]}-{args.router_layers[1]} holds no MoE layer "
                         f"(they are {moe_layers[0]}-{moe_layers[-1]})")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.calibrate_only:
        calibrate_shipped(args.calibrate_tokens, args.calibrate_passes, folder=args.out, step=args.calibrate_step)
        return

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    B = args.batch or (256 if device.type == "cuda" else 32)
    # on an H200 (141 GB) a forward of 512 sequences ran out of memory (~136 GB of activations), 192 fitted
    micro = args.micro or largest_divisor(B, CUDA_MICRO if device.type == "cuda" else 8)
    if B % micro:
        raise SystemExit(f"--batch {B} is not a multiple of --micro {micro}")
    torch.manual_seed(args.seed)
    tok = Tokenizer.load()
    train, val, data_facts = token_arrays(tok)
    cfg = K3Config.tiny()
    assert cfg.vocab_size == tok.vocab_size, "tokenizer and config disagree on the vocabulary"
    model = K3Model(cfg).to(device)
    untrained_val = evaluate(model.eval(), val, args.seq, device)
    before = None                  # the card and log of the checkpoint this run continues
    if args.init_from:
        card_path = args.init_from.with_suffix(".json")
        start_model, _ = load_pretrained(args.init_from, card_path)
        model.load_state_dict(start_model.state_dict())
        del start_model
        log_before = args.init_from.parent / "train_log.csv"
        before = {"card": read_card(card_path),
                  "log": list(csv.DictReader(log_before.read_text().splitlines())) if log_before.exists() else [],
                  "val": evaluate(model.eval(), val, args.seq, device, quant=True)}
        print(f"continuing {args.init_from} ({before['card'].get('tokens_seen', 0):,} tokens seen): "
              f"validation loss {before['val']:.3f} on this corpus")
    model.train()
    opt = make_optimizer(model, args.lr, args.router_lr, args.router_layers)

    runs = args.runs
    runs.mkdir(parents=True, exist_ok=True)
    log_path, state_path = runs / "train_log.csv", runs / "state"
    start = 0
    if not args.fresh and state_path.with_suffix(".json").exists():
        if args.fit_minutes:   # a fitted run continues with the number of steps it fixed
            args.steps = json.loads(state_path.with_suffix(".json").read_text())["args"].get("steps", args.steps)
        start = load_state(model, opt, state_path, expect={"corpus_fingerprint": data_facts["corpus_fingerprint"],
                                                           "config": cfg.to_dict()}, args={**vars(args), "batch": B})
        rows = list(csv.DictReader(Path(log_path).read_text().splitlines())) if log_path.exists() else []
        rows = [r for r in rows if int(r["step"]) < start]
        print(f"resuming at step {start}")
    else:
        rows = []
    with open(log_path, "w", newline="") as f:
        w = csv.DictWriter(f, LOG_FIELDS)
        w.writeheader()
        w.writerows(rows)
    log = open(log_path, "a", newline="")
    writer = csv.DictWriter(log, LOG_FIELDS)
    if not args.no_compile:
        compile_attention(model)

    quant_from = int(args.quant_from * args.steps)
    t_start, last_save = time.time(), time.time()
    tokens_per_step = B * args.seq
    state_meta = {"corpus_fingerprint": data_facts["corpus_fingerprint"], "config": cfg.to_dict()}
    bar = tqdm(total=args.steps, initial=start, desc="training", unit="step")
    step, durations = start, []
    while step < args.steps:
        t0 = time.time()
        rng = np.random.default_rng([args.seed, step])
        ids = batch(train, rng, B, args.seq, device)
        lr = lr_at(step, args.steps, args.lr, warmup=WARMUP_CONTINUED if before else WARMUP)
        quant = step >= quant_from
        stats = train_step(model, opt, list(ids.split(micro)), lr, quant)
        row = {"step": step, "tokens": (step + 1) * tokens_per_step, "loss": round(stats["loss"], 4),
               "val_loss": "", "lr": f"{lr:.3g}", "quant": int(quant),
               "max_mean_load": round(stats["max_mean_load"], 3), "dead_experts": stats["dead_experts"],
               "bias_spread": round(stats["bias_spread"], 4), "seconds": round(time.time() - t0, 2)}
        if step % 50 == 0 or step == args.steps - 1:
            model.eval()
            row["val_loss"] = round(evaluate(model, val, args.seq, device, quant=quant), 4)
            model.train()
        writer.writerow(row)
        log.flush()
        bar.set_postfix(loss=row["loss"], load=row["max_mean_load"], q=int(quant))
        bar.update()
        durations.append(time.time() - t0)
        if args.fit_minutes and start == 0 and step == FIT_AFTER:
            # steps 2..FIT_AFTER are warm (compiled); the warm-up of the schedule (50 steps) does not
            # depend on the total, so fixing it here changes no step already taken
            per_step = float(np.median(durations[2:]))
            left = args.fit_minutes * 60 - (time.time() - t_start) - FIT_RESERVE_S
            args.steps = max(step + 1, step + 1 + int(left / per_step))
            quant_from = int(args.quant_from * args.steps)
            bar.total = args.steps
            print(f"\n{per_step:.2f} s a step: {args.steps} steps fit in {args.fit_minutes} minutes "
                  f"({args.steps * tokens_per_step:,} tokens)")
        step += 1
        out_of_time = (time.time() - t_start) / 60 > args.minutes
        if time.time() - last_save > args.save_every * 60 or out_of_time:
            save_state(model, opt, step, {**vars(args), "batch": B}, state_path, state_meta)
            last_save = time.time()
        if out_of_time:
            print(f"time budget of {args.minutes} min reached at step {step}")
            break
    bar.close()
    log.close()
    steps_done = step
    save_state(model, opt, steps_done, {**vars(args), "batch": B}, state_path, state_meta)
    if steps_done < args.steps:
        print(f"stopped at step {steps_done} of {args.steps}: run the same command again to continue; "
              f"the checkpoint is written when the schedule is complete")
        return
    model.eval()
    final_val = evaluate(model, val, args.seq, device, quant=True)
    facts = {
        "steps": steps_done, "tokens_seen": steps_done * tokens_per_step, "batch": B, "micro_batch": micro,
        "seq_len": args.seq, "balancing": "Quantile Balancing after every step from that step's whole batch (Eq. 14)",
        "lr": args.lr, "quant_from_step": quant_from, "seed": args.seed,
        **({"router_lr_multiple": args.router_lr} if args.router_lr != 1.0 else {}),   # the card says so
        **({"router_layers": list(args.router_layers)} if args.router_lr != 1.0 and args.router_layers else {}),
        "hardware": (torch.cuda.get_device_name() if device.type == "cuda"
                     else f"CPU, {torch.get_num_threads()} threads"),
        "train_minutes_this_run": round((time.time() - t_start) / 60, 1),
        # all parts of a resumed run: the seconds of every logged step
        "train_minutes": round(sum(float(r["seconds"]) for r in csv.DictReader(open(log_path))) / 60, 1),
        "untrained_val_loss": round(untrained_val, 4), "final_val_loss": round(final_val, 4),
        "data": data_facts, "tokenizer": "byte-level BPE, 4,096 pieces (assets/tokenizer.json)",
        "corpus_licence": "Python Software Foundation License (CPython standard library docs and code)",
    }
    rows = list(csv.DictReader(Path(log_path).read_text().splitlines()))
    if before:
        facts = continued_facts(facts, before)
        rows = continued_log(before["log"], rows, before["card"])
    args.out.mkdir(parents=True, exist_ok=True)
    info = save_pretrained(model.cpu(), facts, args.out / CHECKPOINT.name, args.out / CARD.name)
    with open(args.out / "train_log.csv", "w", newline="") as f:
        w = csv.DictWriter(f, LOG_FIELDS)
        w.writeheader()
        w.writerows(rows)

    print(f"saved {info['file']} ({info['bytes'] / 1e6:.1f} MB), val loss {untrained_val:.3f} -> {final_val:.3f}")
    if args.calibrate_passes > 0:
        calibrate_shipped(args.calibrate_tokens, args.calibrate_passes, folder=args.out, step=args.calibrate_step)


if __name__ == "__main__":
    main()
