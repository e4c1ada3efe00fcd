"""Evidence that the shipped live instance learned: `python -m model.evaluate` writes assets/k3_tiny_eval.json.

Measured on held-out text (the validation split of model/corpus.py), for the trained checkpoint and
for the untrained instance with the same config and seed:
* cross-entropy per token, beside a unigram baseline (token frequencies of the training split): on
  windows spread over the whole held-out split (its mix of docstrings, manual, code and documentation
  pages), on windows spread over the earlier corpus's held-out split (still held out: see
  model/corpus.py; so instances trained on either corpus compare), and on the first 16,384 held-out
  tokens in a row (the figure earlier evaluations gave). All of these read the held-out text as
  written (hard-wrapped prose), the text every earlier instance was measured on, so that instances
  compare; "held_out_windows.as_trained" adds the whole split with its prose unwrapped
  (model/corpus.py `unwrap`), the form an instance trained with unwrapped prose saw;
* expert load (max/mean per MoE layer, experts that receive no token) on a held-out batch of
  512 x 128 tokens drawn like a training batch (windows spread over the held-out split), on one
  contiguous stretch of held-out text, and on a batch of the training split (the traffic the
  balancing biases were set from); the two batches in the form of the text the biases were
  calibrated on (prose unwrapped where the card says so), the stretch as written;
* specialisation: mutual information between a token's character class (word, digit, punctuation,
  whitespace, Python keyword) and the experts it is routed to, averaged over the MoE layers;
* a short greedy continuation of a fixed prompt.
"""
from __future__ import annotations

import json
import keyword
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from model.checkpoint import ASSETS, load_pretrained
from model.config import K3Config
from model.k3 import K3Model
from model.moe import expert_load
from model.tokenizer import Tokenizer

EVAL_PATH = ASSETS / "k3_tiny_eval.json"
CLASSES = ("word", "digit", "punct", "space", "keyword")
SAMPLE_PROMPTS = ("    if ", "Return the ")   # one inside code, one starting a docstring sentence
# the prompts whose five most likely next tokens the Model card shows: one of prose, one of code
NEXT_PROMPTS = {"prose": "If the argument is omitted, the default value of the",
                "code": "    for i in range("}
CHUNK = 128
BATCH_WINDOWS = 512     # a held-out batch of 512 x 128 = 65,536 tokens, one calibration update's worth


def char_class(piece: str) -> str:
    s = piece.strip()
    if not s:
        return "space"
    if s in keyword.kwlist:
        return "keyword"
    if any(c.isdigit() for c in s):
        return "digit"
    if not any(c.isalnum() for c in s):
        return "punct"
    return "word"


def mutual_information(classes: np.ndarray, experts: np.ndarray, n_experts: int) -> float:
    """I(class; expert) in bits over (token, slot) pairs: classes [N], experts [N, k]."""
    k = experts.shape[1]
    c = np.repeat(classes, k)
    e = experts.reshape(-1)
    joint = np.zeros((len(CLASSES), n_experts))
    np.add.at(joint, (c, e), 1.0)
    joint /= joint.sum()
    pc, pe = joint.sum(1, keepdims=True), joint.sum(0, keepdims=True)
    nz = joint > 0
    return float((joint[nz] * np.log2(joint[nz] / (pc @ pe)[nz])).sum())


def unigram_cross_entropy(train: np.ndarray, val: np.ndarray, vocab: int) -> float:
    counts = np.bincount(train, minlength=vocab).astype(np.float64) + 1.0     # add-one smoothing
    logp = np.log(counts / counts.sum())
    return float(-logp[val].mean())


@torch.no_grad()
def measure(model: K3Model, tok: Tokenizer, val: np.ndarray, n_tokens: int) -> dict:
    ids = torch.from_numpy(val[: n_tokens + 1].astype(np.int64))
    losses, per_layer_experts = [], {i: [] for i in model.cfg.moe_layers}
    for s in range(0, n_tokens, CHUNK):
        x = ids[s:s + CHUNK + 1]
        if x.numel() < 2:
            break
        out = model(x[:-1].unsqueeze(0))
        losses.append(F.cross_entropy(out.logits[0], x[1:], reduction="sum").item())
        for i in per_layer_experts:
            per_layer_experts[i].append(out.trace.experts(i)[0].numpy())
    n = sum(len(e) for e in per_layer_experts[model.cfg.moe_layers[0]])
    classes = np.array([CLASSES.index(char_class(p)) for p in tok.pieces(ids[:n].tolist())])
    E = model.cfg.n_routed_experts
    ratios, dead, mi = [], [], []
    for i, chunks in per_layer_experts.items():
        ex = np.concatenate(chunks)                                           # [n, k]
        load = expert_load(torch.from_numpy(ex), E).float()
        ratios.append((load.max() / load.mean()).item())
        dead.append(int((load == 0).sum()))
        mi.append(mutual_information(classes, ex, E))
    return {"cross_entropy": sum(losses) / n, "tokens": n,
            "max_mean_load": {"max_over_layers": max(ratios), "median_over_layers": float(np.median(ratios))},
            "dead_experts": {"max_over_layers": max(dead), "total": int(sum(dead))},
            "class_expert_mi_bits": float(np.mean(mi)), "class_expert_mi_bits_per_layer": mi}


def window_starts(n: int, n_windows: int, seed: int = 12345) -> np.ndarray:
    """Starts of `n_windows` windows of CHUNK tokens drawn without overlap from across `n` tokens."""
    rng = np.random.default_rng(seed)
    return rng.choice(n // CHUNK, size=min(n_windows, n // CHUNK), replace=False) * CHUNK


@torch.no_grad()
def cross_entropy_on_windows(model: K3Model, data: np.ndarray, n_windows: int = 128, seed: int = 12345,
                             batch: int = 16) -> dict:
    """Mean next-token cross-entropy (nats) over windows of CHUNK + 1 tokens spread across `data`."""
    starts = window_starts(len(data) - 1, n_windows, seed)
    total, count = 0.0, 0
    for b in range(0, len(starts), batch):
        ids = torch.from_numpy(np.stack([data[s:s + CHUNK + 1].astype(np.int64) for s in starts[b:b + batch]]))
        logits = model(ids[:, :-1], record=False).logits.float()
        total += F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), reduction="sum").item()
        count += ids[:, 1:].numel()
    return {"cross_entropy": total / count, "tokens": count, "windows": len(starts)}


def earlier_split_tokens(tok: Tokenizer) -> int:
    """How many tokens the earlier corpus's held-out split is: it is the first part of today's
    (model/corpus.py keeps its pieces first and in order), tokenised as model.train does."""
    from model.corpus import OLD_KINDS, SEPARATOR, documents, split
    _, val = split(documents(OLD_KINDS))
    return sum(len(tok.encode(d + SEPARATOR)) + 1 for d in val)


@torch.no_grad()
def load_on_windows(model: K3Model, data: np.ndarray, n_windows: int = 128, seed: int = 12345,
                    batch: int = 16) -> dict:
    """max/mean expert load over `n_windows` windows of CHUNK tokens drawn without overlap from
    across `data` (how training batches are drawn), instead of one contiguous stretch of text."""
    starts = window_starts(len(data), n_windows, seed)
    E, k = model.cfg.n_routed_experts, model.cfg.top_k
    loads = {i: torch.zeros(E) for i in model.cfg.moe_layers}
    for b in range(0, len(starts), batch):
        ids = torch.from_numpy(np.stack([data[s:s + CHUNK].astype(np.int64) for s in starts[b:b + batch]]))
        out = model(ids)
        for i in loads:
            loads[i] += expert_load(out.trace.experts(i).reshape(-1, k), E).float()
    ratios = [(v.max() / v.mean()).item() for v in loads.values()]
    return {"tokens": int(len(starts) * CHUNK), "median_over_layers": float(np.median(ratios)),
            "max_over_layers": max(ratios), "dead_experts": int(sum(int((v == 0).sum()) for v in loads.values())),
            "per_layer": [round(r, 4) for r in ratios]}


@torch.no_grad()
def greedy(model: K3Model, tok: Tokenizer, prompt: str, n: int = 40) -> str:
    ids = tok.encode(prompt)
    out = model(torch.tensor([ids]))
    cache, gen = out.cache, []
    for _ in range(n):
        nxt = int(out.logits[0, -1].argmax())
        gen.append(nxt)
        out = model(torch.tensor([[nxt]]), cache=cache)
        cache = out.cache
    return tok.decode(gen)


@torch.no_grad()
def top_next(model: K3Model, tok: Tokenizer, prompt: str, n: int = 5) -> list[dict]:
    """The n most likely next tokens after `prompt`: piece and probability, most likely first."""
    logits = model(torch.tensor([tok.encode(prompt)]), record=False).logits[0, -1].float()
    p = torch.softmax(logits, -1)
    top = torch.topk(p, n)
    return [{"piece": tok.decode([int(i)]), "prob": round(float(v), 4)} for v, i in zip(top.values, top.indices)]


def next_tokens(model: K3Model, tok: Tokenizer) -> dict:
    """For the prose and the code prompt: the five most likely next tokens and a greedy continuation."""
    return {kind: {"prompt": prompt, "top5": top_next(model, tok, prompt), "greedy": greedy(model, tok, prompt, 24)}
            for kind, prompt in NEXT_PROMPTS.items()}


def held_out_cross_entropies(model: K3Model, val: np.ndarray, earlier: int) -> dict:
    return {"whole_split": cross_entropy_on_windows(model, val),
            "earlier_split": cross_entropy_on_windows(model, val[:earlier])}


def main(n_tokens: int = 16384, checkpoint=None, card=None, out=EVAL_PATH, quick: bool = False, previous=None):
    from model.checkpoint import CARD, read_card
    from model.train import token_arrays
    t0 = time.time()
    model, tok = load_pretrained(**{k: Path(v) for k, v in (("path", checkpoint), ("card", card)) if v})
    facts = read_card(Path(card) if card else CARD)
    # as written: the text earlier instances were trained and measured on (comparable figures)
    train, val, _ = token_arrays(tok, unwrap_prose=False)
    train_u, val_u, _ = token_arrays(tok, unwrap_prose=True)
    earlier = earlier_split_tokens(tok)
    torch.manual_seed(0)
    untrained = K3Model(K3Config.tiny()).eval()
    result = {
        "checkpoint": str(checkpoint or "assets/k3_tiny.safetensors"),
        "tokens_seen": facts.get("tokens_seen"), "train_tokens": facts.get("data", {}).get("train_tokens"),
        "held_out_tokens": n_tokens,
        "unigram_cross_entropy": unigram_cross_entropy(train, val[:n_tokens + 1][1:], tok.vocab_size),
        "uniform_cross_entropy": math.log(tok.vocab_size),
        # cross-entropy on 128 windows of 128 tokens spread over the held-out split (the training mix),
        # and over the earlier corpus's held-out split, the first `earlier` tokens of today's
        "held_out_windows": {"earlier_split_tokens": earlier,
                             "trained": held_out_cross_entropies(model, val, earlier),
                             "untrained": held_out_cross_entropies(untrained, val, earlier),
                             "unigram": {"whole_split": unigram_cross_entropy(train, val, tok.vocab_size),
                                         "earlier_split": unigram_cross_entropy(train, val[:earlier], tok.vocab_size)},
                             # the whole split with its prose unwrapped, as an instance trained on
                             # unwrapped prose saw it (unigram counts from the unwrapped training split)
                             "as_trained": {"unwrapped_prose": bool(facts.get("data", {}).get("unwrapped_prose")),
                                            "trained": cross_entropy_on_windows(model, val_u),
                                            "unigram": unigram_cross_entropy(train_u, val_u, tok.vocab_size)}},
        "trained": measure(model, tok, val, n_tokens),
        "next_tokens": next_tokens(model, tok),
        "greedy_samples": [{"prompt": p, "text": greedy(model, tok, p)} for p in SAMPLE_PROMPTS],
        "seconds": None,
    }
    if not quick:
        # the balance target: max/mean expert load on a held-out batch drawn the way training batches
        # are (windows spread over the split), as large as one bias update of the calibration; and the
        # same on a batch of the training split, the traffic the biases were balanced for; both
        # in the form of the text the biases were calibrated on
        unwrapped = bool(facts.get("data", {}).get("unwrapped_prose"))
        load_train, load_val = (train_u, val_u) if unwrapped else (train, val)
        result["load_heldout_batch"] = load_on_windows(model, load_val, n_windows=BATCH_WINDOWS) | {
            "unwrapped_prose": unwrapped}
        result["load_training_batch"] = load_on_windows(model, load_train, n_windows=BATCH_WINDOWS, seed=999) | {
            "unwrapped_prose": unwrapped}
        result["untrained"] = measure(untrained, tok, val, n_tokens)
    if previous:
        # the instance this one replaces, measured by this code on the same windows (an evaluation file
        # written with --checkpoint/--card of that instance), so that the two compare on one page
        prev = json.loads(Path(previous).read_text())
        result["previous_instance"] = {k: prev.get(k) for k in ("checkpoint", "tokens_seen", "train_tokens")} | {
            "held_out_windows": prev["held_out_windows"]["trained"],
            "first_tokens_cross_entropy": prev["trained"]["cross_entropy"]}
    result["seconds"] = round(time.time() - t0, 1)
    Path(out).write_text(json.dumps(result, indent=1))
    tr, hw = result["trained"], result["held_out_windows"]
    print(f"cross-entropy on held-out windows (whole split / earlier split): trained "
          f"{hw['trained']['whole_split']['cross_entropy']:.3f} / {hw['trained']['earlier_split']['cross_entropy']:.3f}, "
          f"untrained {hw['untrained']['whole_split']['cross_entropy']:.3f} / "
          f"{hw['untrained']['earlier_split']['cross_entropy']:.3f}, unigram {hw['unigram']['whole_split']:.3f} / "
          f"{hw['unigram']['earlier_split']:.3f}")
    at = hw["as_trained"]
    print(f"whole split with prose unwrapped: trained {at['trained']['cross_entropy']:.3f}, "
          f"unigram {at['unigram']:.3f}")
    print(f"on the first {n_tokens:,} held-out tokens: trained {tr['cross_entropy']:.3f}, "
          f"unigram {result['unigram_cross_entropy']:.3f}, uniform {result['uniform_cross_entropy']:.3f}")
    print(f"class-expert MI: trained {tr['class_expert_mi_bits']:.3f} bits; max/mean load {tr['max_mean_load']}")
    if not quick:
        print(f"max/mean load on a held-out batch {result['load_heldout_batch']}, "
              f"on a training batch {result['load_training_batch']}")
    for kind, n in result["next_tokens"].items():
        print(f"next after {n['prompt']!r}: " + ", ".join(f"{t['piece']!r} {t['prob']:.2f}" for t in n["top5"]))
    for g in result["greedy_samples"]:
        print(f"greedy from {g['prompt']!r}: {g['text']!r}")


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only-next", action="store_true",
                    help="only (re)compute the next-token table of an existing evaluation file")
    ap.add_argument("--checkpoint", type=Path, default=None, help="another checkpoint (default: the shipped one)")
    ap.add_argument("--card", type=Path, default=None, help="its card (default: the shipped one)")
    ap.add_argument("--out", type=Path, default=EVAL_PATH)
    ap.add_argument("--previous", type=Path, default=None,
                    help="an evaluation file of the instance this one replaces, to record beside it")
    ap.add_argument("--quick", action="store_true",
                    help="cross-entropies, next tokens and samples only (no load batches, no untrained MI)")
    a = ap.parse_args()
    if a.only_next:
        ev = json.loads(a.out.read_text())
        ev["next_tokens"] = next_tokens(*load_pretrained())
        a.out.write_text(json.dumps(ev, indent=1))
        print(json.dumps(ev["next_tokens"], indent=1))
    else:
        main(checkpoint=a.checkpoint, card=a.card, out=a.out, quick=a.quick, previous=a.previous)
