"""The shipped tokenizer and the packed MXFP4 checkpoint format."""
import pytest
import torch

from model.checkpoint import CheckpointError, load_pretrained, save_pretrained
from model.config import K3Config
from model.k3 import K3Model
from model.quant import mx_fake_quant
from model.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.load()


@pytest.mark.parametrize("text", [
    "", "The router picks 16 of 896 experts.", "def f(x):\n    return x ** 2\n",
    "naïve café 東京 🙂 \u202e reversed \x00 nul", "<script>alert(1)</script>", "\ud800 lone surrogate",
    "x" * 20000,
])
def test_any_text_encodes_and_round_trips(tok, text):
    ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size for i in ids)
    expected = text.encode("utf-8", "replace").decode("utf-8")
    assert tok.decode(ids) == expected
    assert "".join(tok.pieces(ids)) == expected or "\ufffd" in "".join(tok.pieces(ids))


def test_pieces_are_word_pieces(tok):
    ids = tok.encode(" the function returns the value")
    pieces = tok.pieces(ids)
    assert len(ids) <= 8                       # whole common words, not bytes
    assert " the" in pieces and " function" in pieces
    assert tok.vocab_size == 4096 == K3Config.tiny().vocab_size


def test_packed_checkpoint_round_trip(tmp_path, tok):
    torch.manual_seed(0)
    model = K3Model(K3Config.tiny()).eval()
    for moe in model.moe_layers():
        moe.router.expert_bias.normal_()
    path, card = tmp_path / "m.safetensors", tmp_path / "m.json"
    info = save_pretrained(model, {"steps": 0}, path, card)
    assert info["bytes"] <= 25_000_000
    # 4.25 bits per routed-expert value: 31.6M values in about 16.8 MB, the rest in bf16
    loaded, t = load_pretrained(path, card)
    state, orig = loaded.state_dict(), model.state_dict()
    w = "layers.5.ffn.w_up"
    assert torch.equal(state[w], mx_fake_quant(orig[w].reshape(896, -1), "e2m1", per_row=True).reshape(orig[w].shape))
    assert torch.equal(state["layers.5.ffn.router.expert_bias"], orig["layers.5.ffn.router.expert_bias"])
    assert torch.equal(state["layers.5.attn_norm.weight"], orig["layers.5.attn_norm.weight"].bfloat16().float())
    assert not any(p.requires_grad for p in loaded.parameters())
    # the stored experts are their own MXFP4 quantisation, so load_pretrained serves them as is for
    # quant=True: the same logits as quantising them in the call
    ids = torch.randint(0, 4096, (1, 5))
    with torch.no_grad():
        served = loaded(ids, quant=True).logits
        for moe in loaded.moe_layers():
            moe._quantised = None
        assert torch.equal(loaded(ids, quant=True).logits, served)
    # a flipped byte is caught by the checksum, with the fix in the message
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum.*model.train"):
        load_pretrained(path, card)
    with pytest.raises(CheckpointError, match="missing"):
        load_pretrained(tmp_path / "nope.safetensors", card)
