"""Evidence that the shipped live instance learned: `python -m model.evaluate` writes assets/k3_tiny_eval.json.

Measured on held-out text (the validation split of model/corpus.py), for the trained checkpoint and
for the untrained instance with the same config and seed:
* cross-entropy per token, beside a unigram baseline (token frequencies of the training split);
* expert load (max/mean per MoE layer, experts that receive no token) on a held-out batch of
  512 x 128 tokens drawn like a training batch (windows spread over the held-out split), on one
  contiguous stretch of held-out text, and on a batch of the training split (the traffic the
  balancing biases were set from);
* specialisation: mutual information between a token's character class (word, digit, punctuation,
  whitespace, Python keyword) and the experts it is routed to, averaged over the MoE layers;
* a short greedy continuation of a fixed prompt.
"""
from __future__ import annotations

import json
import keyword
import math
import time

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


@torch.no_grad()
def load_on_windows(model: K3Model, data: np.ndarray, n_windows: int = 128, seed: int = 12345,
                    batch: int = 16) -> dict:
    """max/mean expert load over `n_windows` windows of CHUNK tokens drawn without overlap from
    across `data` (how training batches are drawn), instead of one contiguous stretch of text."""
    rng = np.random.default_rng(seed)
    starts = rng.choice(len(data) // CHUNK, size=min(n_windows, len(data) // CHUNK), replace=False) * CHUNK
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
    return {kind: {"prompt": prompt, "top5": top_next(model, tok, prompt)} for kind, prompt in NEXT_PROMPTS.items()}


def main(n_tokens: int = 16384):
    from model.train import token_arrays
    t0 = time.time()
    model, tok = load_pretrained()
    train, val, _ = token_arrays(tok)
    torch.manual_seed(0)
    untrained = K3Model(K3Config.tiny()).eval()
    result = {
        "held_out_tokens": n_tokens,
        "unigram_cross_entropy": unigram_cross_entropy(train, val[:n_tokens + 1][1:], tok.vocab_size),
        "uniform_cross_entropy": math.log(tok.vocab_size),
        "trained": measure(model, tok, val, n_tokens),
        # the balance target: max/mean expert load on a held-out batch drawn the way training batches
        # are (windows spread over the split), as large as one bias update of the calibration; and the
        # same on a batch of the training split, the traffic the biases were balanced for
        "load_heldout_batch": load_on_windows(model, val, n_windows=BATCH_WINDOWS),
        "load_training_batch": load_on_windows(model, train, n_windows=BATCH_WINDOWS, seed=999),
        "untrained": measure(untrained, tok, val, n_tokens),
        "greedy_samples": [{"prompt": p, "text": greedy(model, tok, p)} for p in SAMPLE_PROMPTS],
        "next_tokens": next_tokens(model, tok),
        "seconds": None,
    }
    result["seconds"] = round(time.time() - t0, 1)
    EVAL_PATH.write_text(json.dumps(result, indent=1))
    tr, un = result["trained"], result["untrained"]
    print(f"cross-entropy: trained {tr['cross_entropy']:.3f}, untrained {un['cross_entropy']:.3f}, "
          f"unigram {result['unigram_cross_entropy']:.3f}, uniform {result['uniform_cross_entropy']:.3f}")
    print(f"max/mean load {tr['max_mean_load']}, dead {tr['dead_experts']}")
    print(f"max/mean load on a held-out batch {result['load_heldout_batch']}, "
          f"on a training batch {result['load_training_batch']}")
    print(f"class-expert MI: trained {tr['class_expert_mi_bits']:.3f} bits, untrained {un['class_expert_mi_bits']:.3f}")
    for g in result["greedy_samples"]:
        print(f"greedy from {g['prompt']!r}: {g['text']!r}")


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only-next", action="store_true",
                    help="only (re)compute the next-token table of an existing evaluation file")
    if ap.parse_args().only_next:
        ev = json.loads(EVAL_PATH.read_text())
        ev["next_tokens"] = next_tokens(*load_pretrained())
        EVAL_PATH.write_text(json.dumps(ev, indent=1))
        print(json.dumps(ev["next_tokens"], indent=1))
    else:
        main()
