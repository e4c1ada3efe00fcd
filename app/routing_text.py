"""What the Routing explorer says about its data: help texts and captions written from the computed values, and
the records of words each region draws (values in, text out; no Streamlit, no live model)."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from app.routing import MAX_LISTED, N_EXPERTS
from app.text import fmt_params

# The dense switch, in words: with k = 896 the layer adds every expert's output, each weighted by its raw router
# score over the sum of all 896 scores (K3 report Eq. 13, sec 2.3.3, with T = every expert); the experts were
# trained to be used 16 at a time, so this is no dense model, of any size.
DENSE_HELP = (f"every expert at once (top-k = {N_EXPERTS}, knocked-out experts excepted): the layer adds the outputs "
              "of all of them, each weighted by its router score over the sum of their scores (K3 report Eq. 13, "
              "sec 2.3.3, with every expert chosen)")


# ---- the sparsity cards ---------------------------------------------------------------------------

@dataclass(frozen=True)
class SparsityCards:
    """The three cards under the re-routing panel (value, help, caption each) and the caption of the three shares."""
    experts: tuple[str, str, str]
    weights: tuple[str, str, str]
    active: tuple[str, str, str]
    shares: str


def sparsity_cards(sp: dict) -> SparsityCards:
    """The words of the sparsity cards from app.routing_sparsity.sparsity's numbers."""
    E = sp["experts"]
    share = sp["full_active"] / sp["full_total"]
    experts = (f"{sp['k']} of {E}", "routed experts a token visits in one layer",
               f"{sp['routed_share']:.1%} of the routed experts: sparsity {sp['sparsity']:.1f}x")
    weights = (f"{sp['expert_share_live']:.1%}",
               "per MoE layer, by weight: the weights of the k routed and 2 shared experts a token uses over "
               "those of all 896 routed and 2 shared experts. A shared expert works on the full-width token "
               f"({sp['full_width']:,} in K3), a routed one in the latent space ({sp['latent_width']:,}), so a "
               f"shared expert holds {sp['shared_per_routed_full']:g}x a routed expert's weights (the live "
               "instance keeps the same ratio).",
               f"per layer, live instance; {sp['expert_share_full']:.1%} at K3 scale")
    active = (fmt_params(sp["full_active"]),
              f"K3's accounting with k = {sp['k']} in the {sp['layers']} layers this change applies to "
              "and 16 elsewhere.",
              f"{share:.1%} of {fmt_params(sp['full_total'])} (published at "
              f"top-16: 104.2B of 2.78T, K3 report Table 1). Live instance: {fmt_params(sp['live_active'])} of "
              f"{fmt_params(sp['live_total'])} ({sp['live_active'] / sp['live_total']:.1%}); k = {sp['k']} in "
              f"{sp['layers']} re-routed layer{'' if sp['layers'] == 1 else 's'}.")
    shares = (f"Three shares, three questions: {sp['routed_share']:.1%} of the routed experts of one "
              f"layer ({sp['k']} of {E}); {sp['expert_share_full']:.1%} of one K3 layer's expert weights "
              f"(routed and shared together); {share:.1%} of all K3's "
              "parameters (attention, shared experts and the head always run; the embedding is a lookup).")
    return SparsityCards(experts, weights, active, shares)


# ---- what the re-routing changed ------------------------------------------------------------------

def unchanged_note(applies_nowhere: bool) -> tuple[str, str]:
    """(note on the empty 'changed choices' chart, its caption) when nothing is re-routed at the viewed layer;
    `applies_nowhere`: the settings differ from the model's own routing but touch no layer from here on."""
    if applies_nowhere:
        return ("Your change applies to no layer here",
                "Your change applies to no layer: layer 0 is dense and has no router. Pick a layer from 1 "
                "to 92, or apply the change to this layer and every later one.")
    return ("Nothing is re-routed yet",
            "Nothing is re-routed yet: change top-k, turn the bias off, knock out or force an expert, "
            "or go dense, and this shows how many of the token's experts change in each later layer.")


def rerouted_layers(diff: pd.DataFrame) -> int:
    """How many layers route the token differently: a layer that dropped any of its experts or added any."""
    return int(((diff["dropped"] > 0) | (diff["added"] > 0)).sum())


def changed_caption(diff: pd.DataFrame, from_layer: int, scope: str) -> str:
    """What the 'changed choices' chart shows, in words: a layer routes the token differently when it
    dropped any of the token's experts or added any (going dense adds ~880 and drops none)."""
    moved = rerouted_layers(diff)
    dropped, added = int(diff["dropped"].sum()), int(diff["added"].sum())
    text = (f"Per layer from {from_layer} on: how many of the experts this token used before the change are no "
            f"longer chosen (dropped, {dropped} in all) and how many new ones are (added, {added} in all). "
            f"{moved} of {len(diff)} layers route it differently")
    if scope == "only":
        return text + " — the layers after the changed one too, because their input changed."
    return text + "."


# ---- the layer's grid and the expert panel ----------------------------------------------------------

def load_ranges(grid: pd.DataFrame) -> str:
    """The token counts each load class of the grid spans, e.g. "none 0, low 1–2, mid 3–4, high 5–9 tokens"."""
    parts = []
    for cls, name in (("idle", "none"), ("low", "low"), ("mid", "mid"), ("high", "high")):
        loads = grid.loc[grid["load_class"] == cls, "load"]
        if len(loads):
            lo, hi = int(loads.min()), int(loads.max())
            parts.append(f"{name} {lo}" if lo == hi else f"{name} {lo}–{hi}")
    return ", ".join(parts) + " tokens"


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


@dataclass(frozen=True)
class GridText:
    """The words around the layer's grid: its caption, its alt text and the list of the token's experts."""
    n_chosen: int
    caption: str
    alt: str
    chosen: str


def grid_text(grid: pd.DataFrame, layer: int, colour_by: str, shard_note: str) -> GridText:
    """`grid`: app.routing.layer_grid's rows; `shard_note`: what the shard bands are (app.parallel.shard_note)."""
    n_chosen = int(grid["chosen"].sum())
    chosen = sorted(int(e) for e in grid.loc[grid["chosen"], "expert"])
    caption = (f"Each square is one routed expert, 28 per row; each band of 4 rows holds 112 experts (shard 0 "
               f"holds experts 0–111, shard 1 112–223, …). {shard_note}. The {n_chosen} outlined, glowing squares "
               "are the experts this token uses here"
               + (f" (colour: the router's probability for this token{brighter_note(grid)})."
                  if colour_by == "probability" else
                  f" (colour: how many tokens of the whole prompt chose each expert: {load_ranges(grid)}).")
               + " Crossed: knocked out; ringed: the expert in the panel below. Point at a square for its "
                 "numbers; click one to open it in the panel.")
    alt = f"Grid of {len(grid)} experts at layer {layer}, {n_chosen} chosen for the selected token."
    listed = (f"This token's {n_chosen} experts here: " + ", ".join(map(str, chosen[:MAX_LISTED]))
              + (f" and {n_chosen - MAX_LISTED} more." if n_chosen > MAX_LISTED else "."))
    return GridText(n_chosen, caption, alt, listed)


def expert_line(grid: pd.DataFrame, expert: int, n_tokens: int) -> str:
    """What the expert panel says of one expert of the grid for the token: its shard, whether the token chose it
    (slot and weight) or why not (knocked out, its rank), and how many of the prompt's tokens chose it."""
    row = grid.iloc[expert]
    if row["chosen"]:
        line = (f"This token chose it (slot {row['slot'] + 1} of {int(grid['chosen'].sum())}) with output weight "
                f"{row['weight']:.4f}; router probability {row['prob']:.4f}.")
    else:
        line = ("This token did not choose it" + (": it is knocked out" if row["status"] == "knocked out" else "")
                + f"; it ranks {row['rank']} of {len(grid)} by biased score.")
    return f"Shard {row['shard']}. {line} {row['load']} of the prompt's {n_tokens} tokens chose it here."


def heldout_heading(held, layer: int, expert: int) -> str:
    """The heading of the held-out table (`held`: app.routing_heldout.HeldOut)."""
    i = held.layers.index(layer)
    return (f"**Held-out text that scores it highest** (chosen by {held.chosen_count[i, expert]} of "
            f"{len(held.ids)} tokens here)")
