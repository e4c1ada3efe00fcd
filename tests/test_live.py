"""Prompt validation and the shared live model (no Streamlit runtime needed for these)."""
import pytest

import torch

from app import live
from app.live import MAX_CHARS, MAX_TOKENS, PRESETS, prepare_prompt
from model.k3 import RoutingOverride, RunOptions
from model.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.load()


@pytest.mark.parametrize("bad", ["", "   \n\t ", None])
def test_empty_prompts_get_a_message(tok, bad):
    out = prepare_prompt(bad, tok)
    assert isinstance(out, str) and "empty" in out


def test_huge_and_odd_prompts_are_capped_with_notices(tok):
    out = prepare_prompt("word " * 50_000, tok)
    assert len(out.ids) == MAX_TOKENS and len(out.notices) == 2
    assert str(MAX_CHARS) in out.notices[0].replace(",", "")
    odd = prepare_prompt("مرحبا 🙂 <script>alert(1)</script> \u202e", tok)
    assert len(odd.ids) == len(odd.pieces) and "<script>" in odd.text
    for text in PRESETS.values():
        p = prepare_prompt(text, tok)
        assert not p.notices and len(p.ids) <= 64


def test_forward_and_resume_are_cached_per_prompt_and_options():
    lv = live.live()
    ids = lv.tokenizer.encode(PRESETS["Code"])
    ov = RoutingOverride(top_k=3, knocked_out=(1, 2))
    base = live.forward(ids)
    assert live.forward(tuple(ids)) is base                                # one entry, whatever the form
    once = live.forward(ids, routing={40: ov}, quant=True)
    assert live.forward(ids, options=RunOptions({40: ov}, quant=True)) is once
    assert once is not base and once.options == RunOptions({40: ov}, quant=True)
    new = live.resume(ids, 40, RunOptions({40: ov}))
    assert live.resume(list(ids), 40, RunOptions(((40, ov),))) is new
    with torch.inference_mode():
        full = lv.model(torch.tensor([ids]), routing={40: ov})
    assert torch.equal(new.logits, full.logits)                            # resume = the full forward
    assert torch.equal(new.trace.experts(39), base.trace.experts(39))
    assert not set(new.trace.experts(40)[0].reshape(-1).tolist()) & {1, 2}


def test_no_full_collection_of_the_long_lived_heap_after_a_run():
    """Streamlit's default collects all generations after every script run; with torch and the model loaded
    that scan is ~0.2 s during which no session is answered. The app turns it off and, once the model is
    loaded, freezes the long-lived objects so the collector's own full passes skip them."""
    import gc
    from pathlib import Path

    import tomllib
    conf = tomllib.loads((Path(__file__).resolve().parents[1] / ".streamlit" / "config.toml").read_text())
    assert conf["runner"]["postScriptGC"] is False
    lv = live.live()
    assert gc.get_freeze_count() > 100_000                     # torch alone brings ~300,000 objects
    assert live.forward(lv.tokenizer.encode(PRESETS["Code"])).logits.shape[-1] == lv.model.cfg.vocab_size
    gc.collect()
    tracked = {id(o) for o in gc.get_objects()}                # what a full pass still scans: not the model
    assert id(lv.model) not in tracked and id(lv.model.layers[40].ffn.router) not in tracked
    assert id(torch.nn.functional) not in tracked              # nor the libraries
