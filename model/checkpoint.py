"""The shipped live instance: safetensors with routed experts packed as real MXFP4 (ARCHITECTURE.md 7).

Layout of assets/k3_tiny.safetensors:
* every routed-expert tensor (w_gate, w_up, w_down of each MoE layer, [E, out, in]: each expert's matrix
  as nn.Linear stores it) as two uint8 tensors, `<name>.mxfp4_codes` (E2M1 codes, two per byte) and
  `<name>.mxfp4_scales` (one E8M0 byte per block of 32 along each expert's rows, i.e. along the input
  dimension as OCP MX and K3's checkpoint block it; a tiny row of 16 or 8 is half or a quarter of a
  block): 4.25 bits per value;
* the balancing biases (buffers set by Quantile Balancing) in fp32, under the names they had before
  the router became its own module (FILE_NAMES; the file layout never changed);
* everything else in bf16, as K3 keeps attention, router, latent projections and shared experts in
  higher precision than its experts.
The file's SHA-256 is stored beside it (assets/k3_tiny.json, with the training facts) and checked on
load. Never pickle: safetensors only.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from model.config import K3Config
from model.k3 import K3Model
from model.quant import pack_mxfp4, unpack_mxfp4
from model.tokenizer import TOKENIZER_PATH, Tokenizer

ASSETS = Path(__file__).resolve().parent.parent / "assets"
CHECKPOINT = ASSETS / "k3_tiny.safetensors"
CARD = ASSETS / "k3_tiny.json"
EXPERT_TENSORS = (".ffn.w_gate", ".ffn.w_up", ".ffn.w_down")
# the file's format tag; files written before the experts were stored [E, out, in] (blocks along the
# output dimension) say "k3-tiny-mxfp4" and are refused, since their codes would load into the wrong places
FORMAT = "k3-tiny-mxfp4-v2"
RETRAIN = "re-run `python -m model.train` (or restore the file from git)"
# model state-dict name suffix -> the name suffix the file stores it under. The balancing bias moved
# from `ffn.expert_bias` to the Router module (`ffn.router.expert_bias`); the shipped file keeps the
# old name, so its bytes and checksum stay what they were.
FILE_NAMES = {".ffn.router.expert_bias": ".ffn.expert_bias"}


class CheckpointError(RuntimeError):
    """The shipped instance cannot load; the message names files as `assets/NAME` (a page shows it)."""


def shown(path: Path | str) -> str:
    """A file's name for a message a page may show: `assets/NAME` for the assets folder, else the bare name
    (never the server's install path)."""
    path = Path(path)
    return f"assets/{path.name}" if path.resolve().parent == ASSETS.resolve() else path.name


def is_expert_tensor(name: str) -> bool:
    return name.endswith(EXPERT_TENSORS)


def file_name(name: str) -> str:
    """The name a model tensor is stored under in the checkpoint file."""
    for new, old in FILE_NAMES.items():
        if name.endswith(new):
            return name[: -len(new)] + old
    return name


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pack_state(model: K3Model) -> dict[str, torch.Tensor]:
    out = {}
    for name, t in model.state_dict().items():
        t, name = t.detach().cpu(), file_name(name)
        if is_expert_tensor(name):
            # the model quantises each expert's flattening in blocks of 32; when an expert holds a
            # whole number of blocks that equals blocking the flattening of the whole tensor
            if t[0].numel() % 32:
                raise ValueError(f"{name}: {t[0].numel()} values per expert is not a multiple of 32")
            codes, scales = pack_mxfp4(t.float())
            out[name + ".mxfp4_codes"], out[name + ".mxfp4_scales"] = codes, scales
        elif name.endswith("expert_bias"):
            out[name] = t.float().contiguous()
        else:
            out[name] = t.to(torch.bfloat16).contiguous()
    return out


def unpack_state(packed: dict[str, torch.Tensor], model: K3Model) -> dict[str, torch.Tensor]:
    state = {}
    for name, ref in model.state_dict().items():
        stored = file_name(name)
        if is_expert_tensor(name):
            codes, scales = packed[stored + ".mxfp4_codes"], packed[stored + ".mxfp4_scales"]
            state[name] = unpack_mxfp4(codes, scales, ref.shape, dtype=ref.dtype)
        else:
            state[name] = packed[stored].to(ref.dtype)
    return state


def save_pretrained(model: K3Model, facts: dict, path: Path = CHECKPOINT, card: Path = CARD) -> dict:
    """Write the packed checkpoint and its card (config, checksum, training facts)."""
    packed = pack_state(model)
    save_file(packed, str(path), metadata={"format": FORMAT, "expert_layout": "[E, out, in]",
                                           "config": json.dumps(model.cfg.to_dict())})
    info = {"file": path.name, "sha256": sha256(path), "bytes": path.stat().st_size,
            "config": model.cfg.to_dict(), **facts}
    card.write_text(json.dumps(info, indent=1))
    return info


def read_card(card: Path = CARD) -> dict:
    if not card.exists():
        raise CheckpointError(f"{shown(card)} is missing: {RETRAIN}")
    try:
        return json.loads(card.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{shown(card)} could not be read ({type(e).__name__}: damaged or incomplete): "
                              f"{RETRAIN}") from e


# what a card keeps of each training phase of a continued instance (model.train --init-from)
PHASE_KEYS = ("steps", "tokens_seen", "batch", "micro_batch", "seq_len", "balancing", "lr", "quant_from_step",
              "seed", "hardware", "train_minutes", "untrained_val_loss", "final_val_loss", "format_upgrade",
              "router_lr_multiple", "router_layers")


def card_phases(card: dict) -> list[dict]:
    """The phases a card's instance was trained in, first to last: the list a continued run writes under
    "phases", the pair an older card kept under "continued_from" and "continuation", or the card itself
    (one run)."""
    if card.get("phases"):
        return list(card["phases"])
    if card.get("continued_from") and card.get("continuation"):
        return [card["continued_from"], card["continuation"]]
    return [{k: card[k] for k in PHASE_KEYS if k in card} | {
        "corpus_fingerprint": card.get("data", {}).get("corpus_fingerprint"),
        "unwrapped_prose": card.get("data", {}).get("unwrapped_prose", False)}]


def load_pretrained(path: Path = CHECKPOINT, card: Path = CARD,
                    tokenizer_path: Path = TOKENIZER_PATH) -> tuple[K3Model, Tokenizer]:
    """(model, tokenizer) of the shipped live instance, in eval mode, weights verified by checksum."""
    t0 = time.perf_counter()
    if not path.exists():
        raise CheckpointError(f"{shown(path)} is missing: {RETRAIN}")
    info = read_card(card)
    digest = sha256(path)
    if digest != info.get("sha256"):
        raise CheckpointError(f"{shown(path)} does not match the checksum in {card.name} (file corrupt or "
                              f"replaced): {RETRAIN}")
    try:
        cfg = K3Config(**info["config"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{shown(card)} holds no usable config ({type(e).__name__}): {RETRAIN}") from e
    # Built on the CPU, the experts without their random init (not on "meta": see model.k3.model_with_weights)
    model = K3Model(cfg, init=False)
    try:
        with safe_open(str(path), "pt") as f:
            fmt = (f.metadata() or {}).get("format")
        if fmt != FORMAT:
            raise CheckpointError(f"{shown(path)} is in the format {fmt!r}, not {FORMAT!r} (an older layout of the "
                                  f"experts): {RETRAIN}")
        packed = load_file(str(path))
        model.load_state_dict(unpack_state(packed, model), assign=True, strict=True)
    except CheckpointError:
        raise
    except (KeyError, RuntimeError, ValueError, OSError) as e:
        raise CheckpointError(f"{shown(path)} could not be read ({type(e).__name__}): {RETRAIN}") from e
    model.eval().requires_grad_(False)
    for moe in model.moe_layers():
        # the expert tensors were just decoded from MXFP4 codes in the blocks the model quantises in
        # (pack_state checks that), so they are their own MXFP4 quantisation: nothing to compute
        moe.precompute_quant(on_grid=True)
    tok = Tokenizer.load(tokenizer_path)
    if tok.vocab_size != cfg.vocab_size:
        raise CheckpointError(f"{tokenizer_path.name} has {tok.vocab_size} pieces but the checkpoint "
                              f"expects {cfg.vocab_size}: {RETRAIN}")
    model.load_seconds = time.perf_counter() - t0
    return model, tok


def upgrade_v1(path: Path = CHECKPOINT, card: Path = CARD) -> dict:
    """Rewrite a checkpoint of the first format ("k3-tiny-mxfp4": experts stored [E, in, out], MXFP4
    blocks along their output dimension) in this one: each expert's decoded matrix is transposed to
    [out, in] and quantised again in blocks along its input dimension. The weights were trained on the
    old blocks, so the re-rounding costs some accuracy (the card records it). The loader itself never
    reads the old format; this is the one way across, run once: `python -m model.checkpoint --upgrade`."""
    with safe_open(str(path), "pt") as f:
        meta = f.metadata() or {}
    if meta.get("format") != "k3-tiny-mxfp4":
        raise CheckpointError(f"{path} is not a first-format checkpoint (format {meta.get('format')!r})")
    info = read_card(card)
    cfg = K3Config(**info["config"])
    packed = load_file(str(path))
    model = K3Model(cfg)
    state = {}
    for name, ref in model.state_dict().items():
        stored = file_name(name)
        if is_expert_tensor(name):
            E, out_dim, in_dim = ref.shape
            old = unpack_mxfp4(packed[stored + ".mxfp4_codes"], packed[stored + ".mxfp4_scales"],
                               (E, in_dim, out_dim), dtype=torch.float32)        # [E, in, out]
            state[name] = old.transpose(1, 2).contiguous()                        # [E, out, in]
        else:
            state[name] = packed[stored].to(ref.dtype)
    model.load_state_dict(state, strict=True)
    for moe in model.moe_layers():
        for p in (moe.w_gate, moe.w_up, moe.w_down):
            with torch.no_grad():
                p.copy_(type(moe).quantised_experts(p))                           # the new blocks
    facts = {k: v for k, v in info.items() if k not in ("file", "sha256", "bytes", "config")}
    facts["format_upgrade"] = {"from": "k3-tiny-mxfp4 (experts [E, in, out], blocks along the output dim)",
                               "to": f"{FORMAT} (experts [E, out, in], blocks along the input dim)",
                               "what": "the trained weights decoded, transposed and re-quantised to MXFP4 "
                                       "in the new blocks; no training"}
    return save_pretrained(model, facts, path, card)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="The shipped checkpoint's format.")
    ap.add_argument("--upgrade", action="store_true", help="rewrite a first-format checkpoint (upgrade_v1)")
    if ap.parse_args().upgrade:
        print(upgrade_v1())
