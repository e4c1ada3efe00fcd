"""The shipped tokenizer and the packed MXFP4 checkpoint format."""
import subprocess
import sys
from pathlib import Path

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


def test_first_format_is_refused_and_upgraded(tmp_path, tok):
    # A file of the first layout (experts [E, in, out], MXFP4 blocks along the output dimension), built
    # here by hand: the loader refuses it with the fix in the message; upgrade_v1 rewrites it with each
    # expert [out, in], blocked along the input dimension, from the decoded old values.
    import json

    from safetensors.torch import save_file

    from model.checkpoint import FORMAT, pack_state, sha256, upgrade_v1
    from model.quant import pack_mxfp4, unpack_mxfp4
    torch.manual_seed(1)
    model = K3Model(K3Config.tiny()).eval()
    packed = pack_state(model)
    old_values = {}
    for name, t in model.state_dict().items():
        if name.endswith((".ffn.w_gate", ".ffn.w_up", ".ffn.w_down")):
            old = t.transpose(1, 2).contiguous()                       # [E, in, out]
            codes, scales = pack_mxfp4(old.float())                    # blocks of its flattening
            packed[name + ".mxfp4_codes"], packed[name + ".mxfp4_scales"] = codes, scales
            old_values[name] = unpack_mxfp4(codes, scales, old.shape)
    path, card = tmp_path / "old.safetensors", tmp_path / "old.json"
    save_file(packed, str(path), metadata={"format": "k3-tiny-mxfp4"})
    card.write_text(json.dumps({"file": path.name, "sha256": sha256(path), "config": model.cfg.to_dict()}))
    with pytest.raises(CheckpointError, match="k3-tiny-mxfp4.*model.train"):
        load_pretrained(path, card)
    info = upgrade_v1(path, card)
    assert "format_upgrade" in info
    loaded, _ = load_pretrained(path, card)
    w = "layers.7.ffn.w_down"
    new = loaded.state_dict()[w]                                        # [E, out, in]
    want = old_values[w].transpose(1, 2)
    assert new.shape == model.state_dict()[w].shape
    # re-quantised in blocks of 32 along each expert's rows: exactly MXFP4 of the decoded old values
    assert torch.equal(new, mx_fake_quant(want.reshape(896, -1), "e2m1", per_row=True).reshape(want.shape))
    assert (new - want).abs().max() > 0                                 # the re-rounding is real
    with pytest.raises(CheckpointError, match="not a first-format"):
        upgrade_v1(path, card)
    from safetensors import safe_open
    with safe_open(str(path), "pt") as f:
        assert f.metadata()["format"] == FORMAT


def test_loading_the_checkpoint_does_not_import_the_compiler():
    """A fresh process that loads the shipped instance does not pull in torch._dynamo (2.3 s of imports on this
    machine, which building the model on the meta device used to cost every server's first page)."""
    code = ("import sys; from model.checkpoint import load_pretrained; load_pretrained(); "
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout


def test_piece_bytes_rebuild_the_text_and_display_pieces_name_split_characters():
    from model.tokenizer import Tokenizer
    tok = Tokenizer.load()
    text = "naïve café: 日本語 🐱, ok"
    ids = tok.encode(text)
    assert b"".join(tok.piece_bytes(i) for i in ids) == text.encode("utf-8")     # the byte alphabet inverted
    shown = tok.display_pieces(ids)
    assert len(shown) == len(ids) and "\ufffd" not in "".join(shown)
    cut = tok.encode("日")[:1]                                                     # a sequence cut inside 日
    assert tok.display_pieces(cut) == [f"⟨{'日'.encode()[0]:02X}⟩"] or tok.display_pieces(cut) == ["日"]
