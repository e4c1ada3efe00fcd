"""The held-out sample through the router: for each MoE layer and expert, the tokens of text the model never
trained on that score the expert highest (the Routing explorer's expert panel). Pure functions of the model;
app/routing_cache.py runs them once per process.

assets/heldout_sample.txt is built by `python -m model.corpus` (model.corpus.heldout_sample) from the
validation split: docstrings with numbers, the opening of a reference-manual topic and two functions of
standard-library code, none of whose paragraphs occurs in the training split (tests/test_corpus.py).
Building it at start-up would cost ~5 s of document collection, so the sample ships as a small file.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from app import assets
from app.text import visible
from model.k3 import K3Model

HELDOUT_PATH = assets.ASSETS / assets.HELDOUT
HELDOUT_CHUNK = 128        # tokens per forward of the held-out sample (the live model's cap)


@dataclass(frozen=True)
class HeldOut:
    ids: tuple[int, ...]
    layers: tuple[int, ...]                 # MoE layers, in order
    top_pos: np.ndarray                     # [layers, E, keep] positions with the highest probability
    top_prob: np.ndarray                    # [layers, E, keep]
    top_chose: np.ndarray                   # [layers, E, keep] whether that token chose the expert
    chosen_count: np.ndarray                # [layers, E] held-out tokens that chose the expert


def heldout_summary(model: K3Model, ids: list[int], chunk: int = HELDOUT_CHUNK, keep: int = 8,
                    batch: int = 4, guard=contextlib.nullcontext) -> HeldOut:
    """Route the held-out tokens (base routing, no overrides) and keep, per layer and expert, the
    `keep` tokens with the highest router probability. The text is cut into equal chunks of at most
    `chunk` tokens (a few tail tokens are dropped) so that chunks can share a batch. Each batch's
    forward runs inside `guard()` (a context manager: the caller's lock, say)."""
    n = -(-len(ids) // chunk)
    size = len(ids) // n
    ids = list(ids[: n * size])
    rows = torch.tensor(ids).view(n, size)                                # [n, size]
    layers = [i for i in range(model.cfg.num_layers) if model.cfg.is_moe(i)]
    scores = {l: [] for l in layers}
    chose = {l: [] for l in layers}
    with torch.inference_mode():
        for b in range(0, n, batch):
            with guard():
                out = model(rows[b:b + batch], record=False, max_tokens=chunk)
            for l in layers:
                s = out.trace.scores(l).reshape(-1, out.trace.scores(l).shape[-1])   # [N, E]
                idx = out.trace.experts(l).reshape(s.shape[0], -1)                     # [N, k]
                scores[l].append(s)
                chose[l].append(torch.zeros_like(s, dtype=torch.bool).scatter_(1, idx, True))
            del out
    pos, prob, flag, count = [], [], [], []
    for l in layers:
        s, c = torch.cat(scores[l]), torch.cat(chose[l])                  # [N, E]
        v, p = torch.topk(s, min(keep, s.shape[0]), dim=0)                # [keep, E]
        pos.append(p.T.numpy())
        prob.append(v.T.float().numpy())
        flag.append(c.gather(0, p).T.numpy())
        count.append(c.sum(0).numpy())
    return HeldOut(tuple(ids), tuple(layers), np.stack(pos), np.stack(prob), np.stack(flag), np.stack(count))


def expert_on_heldout(h: HeldOut, layer: int, expert: int, pieces_of, context: int = 3) -> pd.DataFrame:
    i = h.layers.index(layer)
    rows = []
    for p, pr, ch in zip(h.top_pos[i, expert], h.top_prob[i, expert], h.top_chose[i, expert]):
        p = int(p)
        before = "".join(pieces_of(list(h.ids[max(0, p - context):p])))
        after = "".join(pieces_of(list(h.ids[p + 1:p + 1 + context])))
        piece = pieces_of([h.ids[p]])[0]
        rows.append({"token": visible(piece), "in context": f"…{visible(before)} [{visible(piece)}] {visible(after)}…",
                     "router probability": float(pr), "chose it": bool(ch)})
    return pd.DataFrame(rows)
