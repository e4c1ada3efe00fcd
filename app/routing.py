"""The routing of a traced forward, as the Routing explorer shows it: which of the 896 experts a token picks in each
layer, the re-routing a person asks for, and per-layer frames of the trace. Pure functions (no Streamlit, no
live model): the page's words are in app/routing_text.py, its calls into the live model in app/routing_cache.py.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch

from app.text import visible
from model.config import K3Config
from model.k3 import K3Output, RoutingOverride

# The grid: 32 rows of 28 experts, so each band of 4 rows is 112 experts, one of the 8 shards of the second
# article's 8-GPU illustration (896 = 8 x 112 = 8 x 4 x 28; docs/REFERENCES.md claim 10). It is not K3's
# deployment: the K3 report names no expert-parallel size (app.parallel.shard_note says so on the page).
GRID_COLS = 28
N_SHARDS = 8
MAX_TOP_K = 64             # the top-k slider's range is 1..MAX_TOP_K (and "dense" = every expert)
MAX_LISTED = 64            # most experts a person can knock out or force through the URL
N_EXPERTS = K3Config.full().n_routed_experts   # the experts of a layer, in K3 and in the live instance alike
SCOPES = {"from": "this layer and every later one", "only": "this layer only"}
COLOURINGS = {"probability": "router probability of the token", "load": "load over the prompt"}


# ---- the grid ------------------------------------------------------------------------------------

def shard_of(expert: int, n_experts: int = N_EXPERTS, n_shards: int = N_SHARDS) -> int:
    return expert // (n_experts // n_shards)


def shard_labels(n_experts: int = N_EXPERTS, n_shards: int = N_SHARDS) -> list[str]:
    size = n_experts // n_shards
    return [f"shard {s}: experts {s * size}–{(s + 1) * size - 1}" for s in range(n_shards)]


def expert_from_selection(event, n_experts: int = N_EXPERTS, param: str = "pick") -> int | None:
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



# ---- token chips (the other pages' token pickers use them too) -----------------------------------

