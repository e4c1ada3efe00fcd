"""Prompt validation and the shared live model (no Streamlit runtime needed for these)."""
import pytest

from app.live import MAX_CHARS, MAX_TOKENS, PRESETS, prepare_prompt, routing_key, _routing_from_key
from model.k3 import RoutingOverride
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


def test_routing_keys_round_trip():
    ov = RoutingOverride(top_k=4, knocked_out=(1, 2))
    for r in (None, ov, {5: ov, 2: RoutingOverride(use_bias=False)}):
        key = routing_key(r)
        hash(key)
        assert _routing_from_key(key) == r
