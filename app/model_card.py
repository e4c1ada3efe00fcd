"""Data of the Model card page: the shipped instance's card, training log and evaluation, read from
assets/ (written by `python -m model.train` and `python -m model.evaluate`). Pure; no Streamlit."""
from __future__ import annotations

import functools
import re

import pandas as pd

from app import assets
from model.accounting import count_params
from model.checkpoint import card_phases
from model.config import K3Config, provenance

NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five"}
ASSETS = assets.ASSETS
CONFIG_FIELDS = (
    "num_layers", "d_model", "vocab_size", "kda_heads", "kda_head_dim", "mla_heads", "q_lora_rank",
    "kv_lora_rank", "qk_nope_dim", "qk_rope_dim", "v_head_dim", "dense_hidden", "n_routed_experts",
    "top_k", "n_shared_experts", "expert_hidden", "shared_hidden", "latent_dim", "attnres",
    "attnres_block_size", "activation", "expert_weight_format", "expert_act_format",
)


PROBLEMS: dict[str, str] = {}       # asset name -> why it could not be read (the page says so)


def load_json(name: str) -> dict | None:
    """A JSON file of assets/, None when it is missing or damaged (then PROBLEMS[name] says why)."""
    try:
        value = assets.read_json(name)
    except assets.AssetError as e:
        PROBLEMS[name] = str(e)
        return None
    PROBLEMS.pop(name, None)
    return value if isinstance(value, dict) else None


def train_log() -> pd.DataFrame | None:
    path = ASSETS / "train_log.csv"
    if not path.exists():
        return None
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as e:              # pandas' parser errors are ValueErrors
        PROBLEMS[path.name] = f"{assets.shown(path)} could not be read ({type(e).__name__})"
        return None
    PROBLEMS.pop(path.name, None)
    need = {"step", "loss"}
    return df if len(df) and need <= set(df.columns) else None


def config_table() -> pd.DataFrame:
    """The live instance's config beside K3's, with where each K3 value comes from."""
    tiny, full = K3Config.tiny(), K3Config.full()
    rows = []
    for f in CONFIG_FIELDS:
        kind, src = provenance(full, f)
        if f == "expert_act_format":      # the report says MXFP8; the element type comes from the serving kernels
            src = "K3 report: MXFP8; E4M3 elements: K3's serving kernels"
        t, v = getattr(tiny, f), getattr(full, f)
        rows.append({"field": f, "live instance": str(t), "Kimi K3": str(v),
                     "same": "✓" if t == v else "shrunk", "K3 value is": kind, "source": src})
    rows.append({"field": "layer types", "live instance": f"{tiny.n_kda} KDA + {tiny.n_mla} MLA",
                 "Kimi K3": f"{full.n_kda} KDA + {full.n_mla} MLA", "same": "✓",
                 "K3 value is": "published", "source": provenance(full, "layer_types")[1]})
    pt, pf = count_params(tiny), count_params(full)
    rows.append({"field": "parameters (total / active)", "live instance": f"{pt.total:,} / {pt.active:,}",
                 "Kimi K3": f"{pf.total / 1e9:,.1f}B / {pf.active / 1e9:,.2f}B", "same": "shrunk",
                 "K3 value is": "computed", "source": "model/accounting.py (equals numel of the live model)"})
    return pd.DataFrame(rows)


def report_eq(text: str) -> str:
    """A card's own words with the QB equation cited as every page cites the report, K3 report Eq. 14, sec 2.3.3
    (model.train writes the bare equation number)."""
    return re.sub(r"(?:the report's |K3 report )?Eq\. 14(?!, sec)", "K3 report Eq. 14, sec 2.3.3", str(text))


# ---- what the live instance keeps of K3 and what it shrinks (model/config.py) -------------------------

# Ratios of widths: (name, numerator field, denominator field). Which of them the live instance keeps is
# computed from the two configs, never assumed.
WIDTH_RATIOS = (
    ("latent / model width d", "latent_dim", "d_model"),
    ("shared expert hidden / routed expert hidden", "shared_hidden", "expert_hidden"),
    ("MLA key: nope / rope dimensions", "qk_nope_dim", "qk_rope_dim"),
    ("routed expert hidden / latent", "expert_hidden", "latent_dim"),
    ("dense layer-0 hidden / d", "dense_hidden", "d_model"),
    ("KDA width (heads × head dim) / d", "kda_proj", "d_model"),
    ("MLA query rank / d", "q_lora_rank", "d_model"),
)
# The counts the live instance keeps, as (words, the fields that must be equal in both configs).
KEPT_COUNTS = (
    ("{num_layers} layers ({n_kda} KDA + {n_mla} gated MLA, in the same order; layer 0 dense)",
     ("num_layers", "layer_types", "first_dense_layers")),
    ("{n_routed_experts} routed experts, top-{top_k}, {n_shared_experts} shared", ("n_routed_experts", "top_k",
                                                                                  "n_shared_experts")),
    ("AttnRes blocks of {attnres_block_size} layers", ("attnres", "attnres_block_size")),
    ("SiTU-GLU's caps {situ_beta_gate:g} and {situ_beta_up:g}", ("activation", "situ_beta_gate", "situ_beta_up")),
    ("MXFP4 expert weights (blocks of 32 values) and MXFP8 expert activations",
     ("expert_weight_format", "expert_act_format")),
)
# Widths (and the head counts and vocabulary) the live instance shrinks.
SHRUNK = (("d", "d_model"), ("routed expert hidden", "expert_hidden"), ("latent", "latent_dim"),
          ("dense hidden", "dense_hidden"), ("KDA head dim", "kda_head_dim"), ("MLA kv rank", "kv_lora_rank"))


def width_ratios(live: K3Config | None = None, k3: K3Config | None = None) -> list[dict]:
    live, k3 = live or K3Config.tiny(), k3 or K3Config.full()
    out = []
    for name, a, b in WIDTH_RATIOS:
        rk, rl = getattr(k3, a) / getattr(k3, b), getattr(live, a) / getattr(live, b)
        out.append({"ratio": name, "K3": rk, "live": rl, "kept": abs(rk - rl) < 1e-12})
    return out


def kept_and_shrunk(live: K3Config | None = None, k3: K3Config | None = None) -> dict[str, str]:
    """What the live instance keeps of K3 and what it shrinks, in words, every number read off the two
    configs: 'kept', 'shrunk' (full sentences) and 'short' (a phrase for a header)."""
    live, k3 = live or K3Config.tiny(), k3 or K3Config.full()
    values = {f: getattr(k3, f) for f in ("num_layers", "n_kda", "n_mla", "n_routed_experts", "top_k",
                                          "n_shared_experts", "attnres_block_size", "situ_beta_gate",
                                          "situ_beta_up")}
    kept = [words.format(**values) for words, fields in KEPT_COUNTS
            if all(getattr(live, f) == getattr(k3, f) for f in fields)]
    ratios = width_ratios(live, k3)
    same = [f"{r['ratio']} ({r['K3']:g})" for r in ratios if r["kept"]]
    other = [r for r in ratios if not r["kept"]]
    widths = [f"{name} {getattr(k3, f):,} → {getattr(live, f):,}" for name, f in SHRUNK
              if getattr(live, f) != getattr(k3, f)]
    heads = (f"the head counts ({k3.kda_heads} → {live.kda_heads} KDA heads, {k3.mla_heads} → {live.mla_heads} MLA "
             "heads)")
    vocab = f"the vocabulary ({k3.vocab_size:,} → {live.vocab_size:,} pieces, the project's own tokenizer)"
    return {
        "kept": ("Kept from K3: " + "; ".join(kept) + "; and " + NUMBER_WORDS.get(len(same), str(len(same)))
                 + " ratios of widths: " + ", ".join(same) + "."),
        "shrunk": ("Shrunk: every width (" + ", ".join(widths) + "), " + heads + " and " + vocab + ". The other "
                   "ratios of widths are not K3's: " + "; ".join(f"{r['ratio']} {r['K3']:.2f} in K3, {r['live']:.2f} "
                                                                 "here" for r in other) + "."),
        "short": (f"its widths, its head counts ({k3.kda_heads} → {live.kda_heads}) and its vocabulary "
                  f"({k3.vocab_size:,} → {live.vocab_size:,}) shrunk"),
    }


def smoothed(df: pd.DataFrame, column: str, window: int = 25) -> pd.Series:
    return df[column].rolling(window, min_periods=1).mean()


_K3 = K3Config.full()


@functools.lru_cache(maxsize=8)
def balanced_floor(tokens: int, n_experts: int = _K3.n_routed_experts, top_k: int = _K3.top_k,
                   layers: int = len(_K3.moe_layers),
                   trials: int = 20, seed: int = 0) -> dict[str, float]:
    """max/mean expert load that even a perfectly balanced router shows on `tokens` tokens: each token
    picks top_k distinct experts uniformly at random, so an expert's load is Binomial(tokens, k/E).
    Monte Carlo with a fixed seed; returns the median layer's and the worst layer's value (medians
    over trials), the same statistics model.evaluate reports for the trained model."""
    import numpy as np
    rng = np.random.default_rng(seed)
    p = top_k / n_experts
    loads = rng.binomial(tokens, p, size=(trials, layers, n_experts))
    ratio = loads.max(-1) / (tokens * p)                                       # [trials, layers]
    return {"median_layer": float(np.median(np.median(ratio, 1))), "worst_layer": float(np.median(ratio.max(1)))}


def next_token_table(next_tokens: dict) -> pd.DataFrame:
    """One row per prompt of model.evaluate's next-token evidence: the prompt and its five most likely
    next tokens with their probabilities, spaces and newlines made visible (␣, ↵): a table cell would
    swallow them, and "↵" alone could not tell a bare newline from a newline and an indent."""
    from app.text import text_line, token_text
    rows = []
    for kind, entry in next_tokens.items():
        prompt = text_line(entry["prompt"], 60)
        lead = len(prompt) - len(prompt.lstrip(" "))
        row = {"prompt": f"{kind}: {'␣' * lead}{prompt[lead:]}"}
        for rank, t in enumerate(entry["top5"], 1):
            row[f"#{rank}"] = f"{token_text(t['piece'])}  {t['prob']:.0%}"
        rows.append(row)
    return pd.DataFrame(rows)


KIND_NAMES = {"docstring": "docstrings of the standard library", "manual": "reference-manual topics (pydoc_data)",
              "code": "standard-library source code",
              "guide": "pages of the Python documentation (tutorial, HOWTOs, FAQ, library reference; Debian's python3.11-doc)"}


def corpus_parts(data: dict) -> str | None:
    """The training text's kinds with their share of its characters, from the card's `kinds`
    (written by model.train since the documentation pages joined the corpus); None for older cards."""
    kinds = data.get("kinds")
    if not kinds:
        return None
    total = sum(kinds.values())
    names = KIND_NAMES | ({"guide": KIND_NAMES["guide"].replace("python3.11-doc", data["guide_package"])}
                          if data.get("guide_package") else {})       # the package's version, where recorded
    return "; ".join(f"{names.get(k, k)} ({c / total:.0%})" for k, c in kinds.items())


def next_token_reading(next_tokens: dict) -> str:
    """What the next-token table shows, read off it: after prose, are the guesses mostly layout
    (spaces, line breaks, punctuation) or words? After code, names and numbers or layout?"""
    from model.evaluate import char_class
    def layout(entry):
        return sum(char_class(t["piece"]) in ("space", "punct") for t in entry["top5"])
    out = []
    for kind, entry in next_tokens.items():
        n = layout(entry)
        if n >= 3:
            out.append(f"after {kind} it mostly predicts layout ({n} of its 5 guesses are spaces, line breaks or "
                       "punctuation)")
        else:
            out.append(f"after {kind} {5 - n} of its 5 guesses are words, names or numbers")
    return "; ".join(out)


def held_out_summary(ev: dict) -> str | None:
    """The cross-entropies of model.evaluate's held-out windows as one paragraph: over the whole held-out
    split (the training mix) and over the earlier corpus's split, for this instance, the untrained one,
    the unigram baseline and, when recorded, the instance this one replaced. None for older files."""
    hw = ev.get("held_out_windows")
    if not hw:
        return None
    tr, un, uni = hw["trained"], hw["untrained"], hw["unigram"]
    n = tr["whole_split"]["tokens"]
    text = (f"On {tr['whole_split']['windows']} windows ({n:,} tokens) spread over the whole held-out split, "
            f"which has the training mix: **{tr['whole_split']['cross_entropy']:.2f}** nats per token (untrained "
            f"{un['whole_split']['cross_entropy']:.2f}, unigram {uni['whole_split']:.2f}). Over the held-out split "
            f"of the earlier corpus (without the documentation pages; still held out): "
            f"**{tr['earlier_split']['cross_entropy']:.2f}** (untrained {un['earlier_split']['cross_entropy']:.2f}, "
            f"unigram {uni['earlier_split']:.2f}).")
    at = hw.get("as_trained")
    if at and at.get("unwrapped_prose"):
        text += (f" Its last training phase read the prose unwrapped; on the whole held-out split in that form: "
                 f"**{at['trained']['cross_entropy']:.2f}** (unigram {at['unigram']:.2f}). The figures before and "
                 "after read the text as written, as every earlier instance was measured.")
    prev = ev.get("previous_instance")
    if prev:
        ph = prev["held_out_windows"]
        seen = f", {prev['tokens_seen']:,} tokens seen" if prev.get("tokens_seen") else ""
        text += (f" The instance this one replaced ({prev.get('train_tokens') or 0:,}-token corpus{seen}), measured "
                 f"the same way: {ph['whole_split']['cross_entropy']:.2f} and {ph['earlier_split']['cross_entropy']:.2f}; "
                 f"on the first {ev['held_out_tokens']:,} held-out tokens {prev['first_tokens_cross_entropy']:.2f} "
                 f"against {ev['trained']['cross_entropy']:.2f} now.")
    return text + " Computed by `python -m model.evaluate`."


def training_phases(card: dict) -> str | None:
    """How a continued instance was trained, phase by phase (model.train --init-from writes the list
    "phases" into the card; an older card kept two, "continued_from" and "continuation"): None for an
    instance trained in one run."""
    phases = card_phases(card)
    if len(phases) < 2:
        return None

    def form(phase):
        return ("its prose unwrapped (hard-wrapped paragraphs joined into one line each)"
                if phase.get("unwrapped_prose") else "its prose as written, hard-wrapped")

    def settings(phase):
        q = phase.get("quant_from_step") or 0
        layers = phase.get("router_layers")
        router = (f", the routers' learning rate {phase['router_lr_multiple']:g} times that"
                  + (f" in MoE layers {layers[0]}-{layers[1]}" if layers else "")
                  if phase.get("router_lr_multiple", 1) != 1 else "")
        return (f"peak learning rate {phase['lr']}{router}, seed {phase['seed']}, {phase['train_minutes']} minutes, "
                + ("quantisation-aware throughout" if q == 0 else f"quantisation-aware from step {q:,}"))

    first = phases[0]
    text = (f"{NUMBER_WORDS.get(len(phases), len(phases))} phases. First {first['steps']:,} steps "
            f"({settings(first)}) on the corpus with {form(first)}: validation loss "
            f"{first['untrained_val_loss']:.2f} → {first['final_val_loss']:.2f}.")
    for before, phase in zip(phases, phases[1:]):
        loss = f"{phase['start_val_loss']:.2f} → {phase['final_val_loss']:.2f}"
        text += f" Then `--init-from` continued those weights for {phase['steps']:,} steps ({settings(phase)}) "
        if phase.get("unwrapped_prose") != before.get("unwrapped_prose"):
            text += (f"on the same pieces with {form(phase)}, so that prose continues with words rather than a "
                     f"line break: validation loss on that text {loss}.")
        else:
            same = phase.get("corpus_fingerprint") == before.get("corpus_fingerprint")
            text += ("on the same text" if same else
                     "on the same pieces in the same form, rebuilt from the Debian documentation package "
                     "installed then (a few of its pages differ, so the corpus fingerprint does)")
            text += f": validation loss {loss}"
            multiple = phase.get("router_lr_multiple", 1)
            text += (", so that the routers learn faster than the experts they choose and sort tokens by kind "
                     "more sharply (the class-expert information below)." if multiple > 1 else
                     ", so that the routing the phase before learned changes slowly while the experts and "
                     "the rest of the model adapt to it." if multiple < 1 else ".")
    return text[:-1]


def unwrapped_from_step(card: dict) -> int | None:
    """The training step from which a continued instance read its prose unwrapped (None if it never did):
    the steps of the phases before the first unwrapped one."""
    steps = 0
    for phase in card_phases(card):
        if phase.get("unwrapped_prose"):
            return steps
        steps += phase["steps"]
    return None
