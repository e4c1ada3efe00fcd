"""Data behind the Routing explorer: which of the 896 experts a token picks in each layer, and what
changes when the routing is overridden. Pure functions of a forward's trace (no Streamlit), plus thin
cached wrappers at the end for the page.

assets/heldout_sample.txt is built by `python -m model.corpus` (model.corpus.heldout_sample) from the
validation split: docstrings with numbers, the opening of a reference-manual topic and two functions of
standard-library code, none of whose paragraphs occurs in the training split (tests/test_corpus.py).
Building it at start-up would cost ~5 s of document collection, so the sample ships as a small file.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import streamlit as st
import torch

from app import assets
from app.text import md_escape, visible
from model.accounting import count_params, glu
from model.config import K3Config
from model.k3 import K3Model, K3Output, RoutingOverride, RunOptions

_LOG = logging.getLogger(__name__)
HELDOUT_PATH = assets.ASSETS / assets.HELDOUT

# The grid: 32 rows of 28 experts, so each band of 4 rows is 112 experts, one of the 8 shards of the second
# article's 8-GPU illustration (896 = 8 x 112 = 8 x 4 x 28; docs/REFERENCES.md claim 10). It is not K3's
# deployment: the K3 report names no expert-parallel size (app.parallel.shard_note says so on the page).
GRID_COLS = 28
N_SHARDS = 8
MAX_TOP_K = 64             # the top-k slider's range is 1..MAX_TOP_K (and "dense" = every expert)
MAX_LISTED = 64            # most experts a person can knock out or force through the URL
# The dense switch, in words: with k = 896 the layer adds every expert's output, each weighted by its raw router
# score over the sum of all 896 scores (K3 report Eq. 13, sec 2.3.3, with T = every expert); the experts were
# trained to be used 16 at a time, so this is no dense model, of any size.
_E = K3Config.full().n_routed_experts      # the experts of a layer, in K3 and in the live instance alike
DENSE_HELP = (f"every expert at once (top-k = {_E}, knocked-out experts excepted): the layer adds the outputs of all "
              "of them, each weighted by its router score over the sum of their scores (K3 report Eq. 13, sec 2.3.3, "
              "with every expert chosen)")
HELDOUT_CHUNK = 128        # tokens per forward of the held-out sample (the live model's cap)
SCOPES = {"from": "this layer and every later one", "only": "this layer only"}
COLOURINGS = {"probability": "router probability of the token", "load": "load over the prompt"}


# ---- the grid ------------------------------------------------------------------------------------

def shard_of(expert: int, n_experts: int = _E, n_shards: int = N_SHARDS) -> int:
    return expert // (n_experts // n_shards)


def shard_labels(n_experts: int = _E, n_shards: int = N_SHARDS) -> list[str]:
    size = n_experts // n_shards
    return [f"shard {s}: experts {s * size}–{(s + 1) * size - 1}" for s in range(n_shards)]


def expert_from_selection(event, n_experts: int = _E, param: str = "pick") -> int | None:
    """The expert a click on the grid chose, or None. `event` is what st.vega_lite_chart(on_select=...)
    returns (or its session-state value): {"selection": {"pick": [{"expert": N}, ...]}}, the last point
    being the latest click. Shared experts, ids out of range and anything malformed give None."""
    try:
        points = event["selection"][param]
    except (KeyError, TypeError, AttributeError):
        points = getattr(getattr(event, "selection", None), param, None)
    if not points or not isinstance(points, (list, tuple)):
        return None
    point = points[-1]
    if not isinstance(point, Mapping):
        return None
    value = point.get("expert")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not float(value).is_integer() or not 0 <= value < n_experts:
        return None
    return int(value)


# ---- re-routing settings ------------------------------------------------------------------------

@dataclass(frozen=True)
class Rerouting:
    """What the person changed about the routing, and where it applies (SCOPES)."""
    top_k: int = 16
    use_bias: bool = True
    dense: bool = False                     # every expert that is not knocked out
    knocked_out: tuple[int, ...] = ()
    forced: tuple[int, ...] = ()
    scope: str = "from"

    def k(self, n_experts: int) -> int:
        return n_experts - len(self.knocked_out) if self.dense else self.top_k

    def override(self, cfg: K3Config) -> RoutingOverride | None:
        """None when nothing differs from the model's own routing."""
        k = self.k(cfg.n_routed_experts)
        if k == cfg.top_k and self.use_bias and not self.knocked_out and not self.forced:
            return None
        return RoutingOverride(top_k=k, use_bias=self.use_bias, knocked_out=self.knocked_out,
                               forced=self.forced)

    def layers(self, layer: int, cfg: K3Config) -> list[int]:
        """The MoE layers the override applies to when the person looks at `layer`."""
        moe = cfg.moe_layers
        if self.scope == "only":
            return [layer] if layer in moe else []
        return [m for m in moe if m >= layer]

    def plan(self, layer: int, cfg: K3Config):
        """(first layer to re-run, routing argument for model.resume), or None when nothing changes."""
        ov, layers = self.override(cfg), self.layers(layer, cfg)
        if ov is None or not layers:
            return None
        return layers[0], (ov if self.scope == "from" else {layers[0]: ov})

    def describe(self, cfg: K3Config) -> list[str]:
        """The settings in words, one line each (what presenter mode shows in place of the controls)."""
        E = cfg.n_routed_experts
        ids = lambda xs: ", ".join(map(str, xs)) if xs else "none"          # noqa: E731
        lines = [f"Experts per token: every one of {E} (dense)" if self.dense
                 else f"Experts per token: {self.top_k} of {E}" + (" (the model's own)" if self.top_k == cfg.top_k else ""),
                 f"Balancing bias: {'on' if self.use_bias else 'off'}",
                 f"Knocked out: {ids(self.knocked_out)}",
                 f"Forced: {ids(self.forced)}"]
        if self.override(cfg) is not None:
            lines.append(f"Applies at: {SCOPES.get(self.scope, SCOPES['from'])}")
        return lines

    def applies_at(self, view_layer: int, layer: int, cfg: K3Config) -> RoutingOverride | None:
        """The override MoE layer `layer` runs with while the person looks at `view_layer`."""
        return self.override(cfg) if layer in self.layers(view_layer, cfg) else None


def normalise(settings: Rerouting, cfg: K3Config) -> tuple[Rerouting, list[str]]:
    """Make a Rerouting valid for the model (RoutingOverride.resolve would raise), saying what moved."""
    E, notes = cfg.n_routed_experts, []
    ko = tuple(sorted({int(e) for e in settings.knocked_out if 0 <= int(e) < E}))
    forced = tuple(dict.fromkeys(int(e) for e in settings.forced if 0 <= int(e) < E))
    clash = [e for e in forced if e in ko]
    if clash:
        notes.append(f"Expert{'s' if len(clash) > 1 else ''} {', '.join(map(str, clash))} cannot be both "
                     "knocked out and forced: knocked out wins.")
        forced = tuple(e for e in forced if e not in ko)
    top_k = min(max(int(settings.top_k), 1), MAX_TOP_K)
    s = replace(settings, top_k=top_k, knocked_out=ko, forced=forced,
                scope=settings.scope if settings.scope in SCOPES else "from")
    k = s.k(E)
    if len(forced) > k:
        notes.append(f"Only {k} experts are chosen per token, so only the first {k} forced experts are kept.")
        s = replace(s, forced=forced[:k])
    return s, notes


def chosen_at(out: K3Output, layer: int, token: int) -> list[int]:
    return [int(e) for e in out.trace.experts(layer)[0, token]]


# ---- per-layer data ------------------------------------------------------------------------------

def load_classes(load: np.ndarray) -> list[str]:
    """'idle' for experts no token chose; otherwise thirds of the busiest expert's load."""
    top = int(np.max(load)) if len(load) else 0
    out = []
    for n in np.asarray(load):
        if n <= 0:
            out.append("idle")
        elif n > 2 * top / 3:
            out.append("high")
        elif n > top / 3:
            out.append("mid")
        else:
            out.append("low")
    return out


def load_ranges(grid: pd.DataFrame) -> str:
    """The token counts each load class of the grid spans, e.g. "none 0, low 1–2, mid 3–4, high 5–9 tokens"."""
    parts = []
    for cls, name in (("idle", "none"), ("low", "low"), ("mid", "mid"), ("high", "high")):
        loads = grid.loc[grid["load_class"] == cls, "load"]
        if len(loads):
            lo, hi = int(loads.min()), int(loads.max())
            parts.append(f"{name} {lo}" if lo == hi else f"{name} {lo}–{hi}")
    return ", ".join(parts) + " tokens"


def layer_grid(out: K3Output, layer: int, token: int, knocked: tuple[int, ...] = (),
               forced: tuple[int, ...] = ()) -> pd.DataFrame:
    """One row per routed expert at `layer` for the chosen token: its place in the grid, the router's
    probability, the balancing bias the call used, the biased score that decides the choice, its
    rank by that score, whether it was chosen (slot, weight) and how many prompt tokens chose it."""
    tr = out.trace
    prob = tr.scores(layer)[0, token].double().numpy()                   # [E]
    bias = tr.bias(layer).double().numpy()                                # [E]
    E = prob.shape[0]
    biased = prob + bias
    order = np.argsort(-biased, kind="stable")
    rank = np.empty(E, dtype=int)
    rank[order] = np.arange(1, E + 1)
    idx = tr.experts(layer)[0, token].numpy()                             # [k]
    w = tr.weights(layer)[0, token].double().numpy()                      # [k]
    slot = np.full(E, -1)
    slot[idx] = np.arange(len(idx))
    weight = np.full(E, np.nan)
    weight[idx] = w
    load = np.bincount(tr.experts(layer)[0].reshape(-1).numpy(), minlength=E)
    experts = np.arange(E)
    status = np.where(slot >= 0, "chosen", "not chosen").astype(object)
    status[list(knocked)] = "knocked out"
    for e in forced:
        status[e] = "forced"
    return pd.DataFrame({
        "expert": experts, "row": experts // GRID_COLS, "col": experts % GRID_COLS,
        "shard": experts // (E // N_SHARDS), "prob": prob, "bias": bias, "biased": biased,
        "rank": rank, "chosen": slot >= 0, "slot": slot, "weight": weight, "load": load,
        "load_class": load_classes(load), "status": status,
    })


def layer_pairs(out: K3Output, layer: int, pieces) -> pd.DataFrame:
    """One row per (token, routed expert) pair of one MoE layer: where the expert sits in the grid and the
    pair's output weight (the linked token/expert view)."""
    experts = out.trace.experts(layer)[0].numpy()                         # [T, k]
    weights = out.trace.weights(layer)[0].double().numpy()                # [T, k]
    T, k = experts.shape
    token = np.repeat(np.arange(T), k)
    e = experts.reshape(-1).astype(int)
    return pd.DataFrame({"token": token, "piece": [visible(pieces[t]) for t in token], "expert": e,
                         "row": e // GRID_COLS, "col": e % GRID_COLS, "weight": weights.reshape(-1)})


def expert_loads(pairs: pd.DataFrame, n_experts: int) -> pd.DataFrame:
    """Per expert: its place in the grid, its shard and how many of the pairs chose it."""
    e = np.arange(n_experts)
    return pd.DataFrame({"expert": e, "row": e // GRID_COLS, "col": e % GRID_COLS,
                         "load": np.bincount(pairs["expert"], minlength=n_experts), "shard": e // (n_experts // N_SHARDS)})


def changed_choices(base: K3Output, new: K3Output, token: int, from_layer: int) -> pd.DataFrame:
    """Per MoE layer >= from_layer: how many of the token's original experts are no longer chosen
    (dropped), how many new ones are (added), and the sizes of both sets."""
    rows = []
    for layer in sorted(l for l in base.trace.routes if l >= from_layer):
        before = set(chosen_at(base, layer, token))
        after = set(chosen_at(new, layer, token))
        rows.append({"layer": layer, "dropped": len(before - after), "added": len(after - before),
                     "k_before": len(before), "k_after": len(after)})
    return pd.DataFrame(rows, columns=["layer", "dropped", "added", "k_before", "k_after"])


def changed_caption(diff: pd.DataFrame, from_layer: int, scope: str) -> str:
    """What the 'changed choices' chart shows, in words: a layer routes the token differently when it
    dropped any of the token's experts or added any (going dense adds ~880 and drops none)."""
    moved = int(((diff["dropped"] > 0) | (diff["added"] > 0)).sum())
    dropped, added = int(diff["dropped"].sum()), int(diff["added"].sum())
    text = (f"Per layer from {from_layer} on: how many of the experts this token used before the change are no "
            f"longer chosen (dropped, {dropped} in all) and how many new ones are (added, {added} in all). "
            f"{moved} of {len(diff)} layers route it differently")
    if scope == "only":
        return text + " — the layers after the changed one too, because their input changed."
    return text + "."


def top_predictions(out: K3Output, token: int, pieces_of, n: int = 5) -> pd.DataFrame:
    """The n most likely next tokens after position `token`, with probabilities."""
    p = torch.softmax(out.logits[0, token].double(), dim=-1)
    vals, ids = torch.topk(p, n)
    ids = [int(i) for i in ids]
    return pd.DataFrame({"rank": range(1, n + 1), "id": ids, "piece": pieces_of(ids),
                         "prob": vals.numpy()})


def fingerprint(out: K3Output, token: int) -> tuple[list[int], np.ndarray, np.ndarray]:
    """(MoE layers, router probability [layers, E], chosen mask [layers, E]) of one token."""
    layers = sorted(out.trace.routes)
    probs = np.stack([out.trace.scores(l)[0, token].float().numpy() for l in layers])   # [L, E]
    mask = np.zeros_like(probs, dtype=bool)
    for i, l in enumerate(layers):
        mask[i, out.trace.experts(l)[0, token].numpy()] = True
    return layers, probs, mask


def expert_on_prompt(out: K3Output, layer: int, expert: int, pieces: list[str], n: int = 8) -> pd.DataFrame:
    """The prompt's tokens with the highest router probability for `expert` at `layer`, by position (positions
    count from 0, as the link, the chips' charts and every page number them, like layers and experts)."""
    prob = out.trace.scores(layer)[0, :, expert].double().numpy()        # [T]
    chosen = (out.trace.experts(layer)[0] == expert).any(-1).numpy()       # [T]
    order = np.argsort(-prob, kind="stable")[:n]
    return pd.DataFrame({"position": order, "token": [visible(pieces[i]) for i in order],
                         "router probability": prob[order], "chose it": chosen[order]})


# how ui.table writes the expert panel's two tables: probabilities to 3 decimals, a mark for a chosen expert
TABLE_FORMATS = {"router probability": ".3f", "chose it": lambda chose: "✓" if chose else "–"}


# ---- the held-out sample --------------------------------------------------------------------------

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


# ---- sparsity -------------------------------------------------------------------------------------

def active_params(cfg: K3Config, ks: Mapping[int, int]) -> tuple[int, int]:
    """(total, active per token) when MoE layer l routes each token to ks[l] experts (others: top_k).
    The accounting of model/accounting.py with the idle experts of each layer recounted."""
    p = count_params(cfg)
    per_expert = glu(cfg.expert_width, cfg.expert_hidden)
    extra = sum((k - cfg.top_k) * per_expert for l, k in ks.items() if cfg.is_moe(l))
    return p.total, p.active + extra


def sparsity(settings: Rerouting, layer: int, live_cfg: K3Config) -> dict:
    """Numbers for the sparsity cards, for the live instance and at K3 scale, with the current k
    applied where the settings apply it."""
    E = live_cfg.n_routed_experts
    k = settings.k(E)
    layers = settings.layers(layer, live_cfg) if settings.override(live_cfg) else []
    ks = {l: k for l in layers}
    full = K3Config.full()
    live_total, live_active = active_params(live_cfg, ks)
    full_total, full_active = active_params(full, ks)
    moe = live_cfg.n_routed_experts * glu(live_cfg.expert_width, live_cfg.expert_hidden)
    shared = glu(live_cfg.d_model, live_cfg.n_shared_experts * live_cfg.shared_hidden)
    moe_full = full.n_routed_experts * glu(full.expert_width, full.expert_hidden)
    shared_full = glu(full.d_model, full.n_shared_experts * full.shared_hidden)
    return {
        "k": k, "experts": E, "routed_share": k / E, "sparsity": E / k, "layers": len(layers),
        # one MoE layer at this k: routed + shared expert weights a token uses / all expert weights
        "expert_share_live": (k * moe / E + shared) / (moe + shared),
        "expert_share_full": (k * moe_full / full.n_routed_experts + shared_full) / (moe_full + shared_full),
        # a shared expert works on the full-width token, a routed one in the latent space: its weights, in routed experts
        "shared_per_routed_full": shared_full / full.n_shared_experts / (moe_full / full.n_routed_experts),
        "full_width": full.d_model, "latent_width": full.expert_width,
        "live_total": live_total, "live_active": live_active,
        "full_total": full_total, "full_active": full_active,
    }


# ---- safe display of token pieces ------------------------------------------------------------------

def brighter_note(grid: pd.DataFrame) -> str:
    """Why an unchosen square can be brighter than a chosen one: the colour is the router's probability, the
    choice ranks probability plus the balancing bias (K3 report Eq. 13). "" when none is."""
    chosen = grid["chosen"].astype(bool)
    if not chosen.any():
        return ""
    n = int(((~chosen) & (grid["prob"] > grid.loc[chosen, "prob"].min())).sum())
    if n == 0:
        return ""
    return (f", before the balancing bias: the choice ranks probability plus bias (K3 report Eq. 13), so {n} unchosen "
            f"expert{'s are' if n != 1 else ' is'} brighter than the dimmest chosen one, held back by a lower bias")


def chip_label(piece: str, limit: int = 24) -> str:
    """Label of a token chip: visible whitespace, then escaped, since chip labels render Markdown."""
    return md_escape(visible(piece), limit)


def chip_labels(pieces, limit: int = 24) -> list[str]:
    """Chip labels for a whole prompt, each one distinct: st.pills keeps its value as the chip's label,
    so two equal labels ("the" twice) would make a rerun select the other chip. A repeat says which
    occurrence it is, visibly ("the (2)"): no hidden character comes along when a label is copied."""
    seen: dict[str, int] = {}
    taken: set[str] = set()
    labels = []
    for piece in pieces:
        label = chip_label(piece, limit)
        n = seen.get(label, 0) + 1
        while n > 1 and f"{label} ({n})" in taken:
            n += 1
        seen[label] = n
        labels.append(label if n == 1 else f"{label} ({n})")
        taken.add(labels[-1])
    return labels


def chart_label(piece: str, limit: int = 24) -> str:
    """Label for a Vega-Lite chart (drawn as text on a canvas: no markup to escape), shortened."""
    text = visible(piece)
    return text if len(text) <= limit else text[:limit] + "…"


def neighbours(settings: Rerouting, expert: int | None = None) -> list[Rerouting]:
    """The settings one nudge away, likeliest first: top-k one up and one down, the balancing bias
    flipped, the expert in the panel knocked out (what app.live.prefetch computes ahead while the server
    is idle)."""
    if settings.dense:
        return []
    out = [replace(settings, top_k=k) for k in (settings.top_k + 1, settings.top_k - 1) if 1 <= k <= MAX_TOP_K]
    out.append(replace(settings, use_bias=not settings.use_bias))
    if expert is not None and expert not in settings.knocked_out + settings.forced:
        out.append(replace(settings, knocked_out=tuple(sorted((*settings.knocked_out, int(expert))))))
    return out


# ---- cached wrappers for the page (the only Streamlit here) ---------------------------------------

def rerouted(ids, layer: int, settings: Rerouting) -> K3Output | None:
    """The live model re-run with the settings from the first layer they touch (app.live.resume:
    model.resume reuses every earlier layer of the cached base forward); None when they change nothing."""
    from app import live
    plan = settings.plan(layer, live.live().model.cfg)
    if plan is None:
        return None
    start, routing = plan
    return live.resume(ids, start, RunOptions(routing))


def prefetch_neighbours(ids, layer: int, settings: Rerouting, expert: int | None = None, then=None,
                        first=(), last=()) -> None:
    """Ask app.live to compute, while the server is idle, the re-runs of the settings one nudge away; with
    `then`, each is followed by then(nudged settings, run) (the page building what it would show); `first` and
    `last`: functions of the base forward to call when idle too, before and after them (app.live.prefetch)."""
    from app import live
    cfg = live.live().model.cfg
    runs = []
    for n in neighbours(settings, expert):
        nudged = normalise(n, cfg)[0]
        plan = nudged.plan(layer, cfg)
        if plan is not None:
            follow = (lambda run, nudged=nudged: then(nudged, run)) if then is not None else None
            runs.append((plan[0], RunOptions(plan[1])) + ((follow,) if follow else ()))
    live.prefetch(ids, runs, first=first, last=last)


_SOON = {"started": False}
_SOON_LOCK = threading.Lock()


def heldout_soon() -> bool:
    """Queue heldout() as a background job a page will wait for (app/jobs.py, AWAITED), once per process, so
    that the held-out sample is routed while the page draws rather than after it (the Routing explorer's first
    visit on a fresh server paid ~2.6 s for it at the end). Whoever asks heldout() meanwhile waits for this
    computation (the cache computes a value once). False when it was queued before."""
    with _SOON_LOCK:
        if _SOON["started"]:
            return False
        _SOON["started"] = True
    from app import jobs
    jobs.submit(jobs.Kind.AWAITED, "the held-out sample's routing", _heldout_quietly)
    return True


def _heldout_quietly() -> None:
    try:
        heldout()
    except Exception as e:                  # noqa: BLE001 - the page calls heldout() itself and says why
        _LOG.warning("routing the held-out sample in the background failed: %s", e)


@st.cache_resource(show_spinner=False)
def heldout() -> HeldOut:
    from app.live import awaited, computing_politely, live
    lv = live()
    ids = lv.tokenizer.encode(assets.read_text(assets.HELDOUT))
    # once per process: ~1,000 tokens through 93 layers, ~2.7 s on this machine's one thread per computation
    # (~4 s beside a page being drawn), in two forwards that each let a computation that is under way or waiting
    # go first (the server's warm-up runs this unasked, beside the visitors' pages: two intra-op threads here
    # made both slower)
    with awaited():                     # the idle-time prefetch waits: the page that asks for this waits for it
        held = heldout_summary(lv.model, ids, batch=4, guard=computing_politely)
    _SOON["ready"] = True
    return held


def heldout_ready() -> bool:
    """Whether heldout() has been computed in this process (a page then needs no spinner for it)."""
    return _SOON.get("ready", False)


@functools.lru_cache(maxsize=512)
def heldout_table(layer: int, expert: int) -> str:
    """The expert panel's held-out table (expert_on_heldout) as the Markdown ui.table draws, written once per
    process for each (layer, expert) it is asked for (~1 KB each)."""
    from app import ui
    from app.live import live
    return ui.table_markdown(expert_on_heldout(heldout(), layer, expert, live().tokenizer.pieces), TABLE_FORMATS)
