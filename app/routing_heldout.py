"""The held-out sample through the router: for each MoE layer and expert, the tokens of text the model never
trained on that score the expert highest (the Routing explorer's expert panel). Pure functions of the model;
app/routing_cache.py runs them once per process.

assets/heldout_sample.txt is built by `python -m model.corpus` (model.corpus.heldout_sample) from the
validation split: docstrings with numbers, the opening of a reference-manual topic and two functions of
standard-library code, none of whose paragraphs occurs in the training split (tests/test_corpus.py).
Building it at start-up would cost ~5 s of document collection, so the sample ships as a small file.

Routing it takes ~1.8 s, so a server keeps the summary on disk (save_heldout, load_heldout: safetensors under
var/cache/, ~5 MB) under a key of the checkpoint's checksum, the model's source code, the sample's text and the
summary's settings: the next server start reads it in milliseconds, and a change to any of them is a new key.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from app import assets
from app.text import visible
from model.k3 import K3Model

HELDOUT_PATH = assets.ASSETS / assets.HELDOUT
HELDOUT_CHUNK = 128        # tokens per forward of the held-out sample (the live model's cap)
HELDOUT_KEEP = 8           # tokens kept per layer and expert
SUMMARY_FORMAT = "k3-heldout-summary-1"    # what a saved summary holds; a new layout gets a new name


@dataclass(frozen=True)
class HeldOut:
    ids: tuple[int, ...]
    layers: tuple[int, ...]                 # MoE layers, in order
    top_pos: np.ndarray                     # [layers, E, keep] positions with the highest probability
    top_prob: np.ndarray                    # [layers, E, keep]
    top_chose: np.ndarray                   # [layers, E, keep] whether that token chose the expert
    chosen_count: np.ndarray                # [layers, E] held-out tokens that chose the expert


def heldout_summary(model: K3Model, ids: list[int], chunk: int = HELDOUT_CHUNK, keep: int = HELDOUT_KEEP,
                    batch: int = 4, guard=contextlib.nullcontext) -> HeldOut:
    """Route the held-out tokens (base routing, no overrides) and keep, per layer and expert, the
    `keep` tokens with the highest router probability. The text is cut into equal chunks of at most
    `chunk` tokens (a few tail tokens are dropped) so that chunks can share a batch. Each batch's
    forward runs inside `guard()` (a context manager: the caller's lock, say)."""
    ids = summary_ids(ids, chunk)
    n = -(-len(ids) // chunk)
    rows = torch.tensor(ids).view(n, len(ids) // n)                      # [n, size]
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


def summary_ids(ids, chunk: int = HELDOUT_CHUNK) -> list[int]:
    """The tokens heldout_summary routes: cut into the fewest chunks of at most `chunk`, all of one size."""
    n = -(-len(ids) // chunk)
    return [int(i) for i in ids[: n * (len(ids) // n)]]


def heldout_key(checkpoint_sha256: str, code: str, text: str, chunk: int = HELDOUT_CHUNK,
                keep: int = HELDOUT_KEEP) -> str:
    """What a saved summary must match: the checkpoint (its checksum), the model's code (`code`: a digest of its
    source, model_code_digest), the sample and the summary's settings."""
    what = f"{SUMMARY_FORMAT}|{checkpoint_sha256}|{code}|{chunk}|{keep}|".encode() + text.encode("utf-8")
    return hashlib.sha256(what).hexdigest()


def model_code_digest(folder: Path = Path(__file__).resolve().parent.parent / "model") -> str:
    """sha256 of the model package's Python sources, in name order: a change to how the model computes is a new
    key, even with the same checkpoint."""
    h = hashlib.sha256()
    for f in sorted(folder.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def save_heldout(h: HeldOut, path: Path, key: str) -> None:
    """Write the summary to `path` (safetensors) under `key`: to a temporary file first, then renamed, so a
    reader (another replica) sees the whole file or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    c = np.ascontiguousarray           # safetensors writes an array's buffer as it lies: row-major only
    tensors = {"ids": c(h.ids, dtype=np.int32), "layers": c(h.layers, dtype=np.int32),
               "top_pos": c(h.top_pos, dtype=np.int32), "top_prob": c(h.top_prob, dtype=np.float32),
               "top_chose": c(h.top_chose, dtype=np.bool_), "chosen_count": c(h.chosen_count, dtype=np.int32)}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        save_file(tensors, str(tmp), metadata={"format": SUMMARY_FORMAT, "key": key})
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load_heldout(path: Path, key: str, ids, layers, n_experts: int) -> HeldOut | None:
    """The summary saved at `path` under `key`, if it is there, whole, and fits: the same routed token ids (`ids`:
    summary_ids of the sample) and MoE layers, every array of its shape and every position inside the sample; None
    otherwise (compute it again)."""
    try:
        with safe_open(str(path), framework="np") as f:
            meta = f.metadata() or {}
            if meta.get("format") != SUMMARY_FORMAT or meta.get("key") != key:
                return None
            t = {name: f.get_tensor(name) for name in f.keys()}
    except (OSError, SafetensorError, ValueError):
        return None
    try:
        ids, layers = tuple(int(i) for i in ids), tuple(int(i) for i in layers)
        if tuple(t["ids"].tolist()) != ids or tuple(t["layers"].tolist()) != layers:
            return None
        pos, prob, chose, count = t["top_pos"], t["top_prob"], t["top_chose"], t["chosen_count"]
        shape = pos.shape
        if (len(shape) != 3 or shape[:2] != (len(layers), n_experts) or prob.shape != shape
                or chose.shape != shape or count.shape != shape[:2]):
            return None
        if pos.size and (pos.min() < 0 or pos.max() >= len(ids)):
            return None
    except (KeyError, TypeError, ValueError):
        return None
    return HeldOut(ids, layers, pos.astype(np.int64), prob.astype(np.float32), chose.astype(np.bool_),
                   count.astype(np.int64))


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
