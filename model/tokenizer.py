"""The project's subword tokenizer: byte-level BPE (Hugging Face `tokenizers`), 4,096 pieces, trained
by `python -m model.tokenizer` on the corpus of model/corpus.py. Byte-level means any Unicode string
encodes (unknown characters fall back to their UTF-8 bytes); pieces are word pieces a person can read.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

ASSETS = Path(__file__).resolve().parent.parent / "assets"
TOKENIZER_PATH = ASSETS / "tokenizer.json"
VOCAB_SIZE = 4096
EOS = "<|endoftext|>"


class Tokenizer:
    def __init__(self, hf: HFTokenizer):
        self._tk = hf
        self.vocab_size = hf.get_vocab_size()
        self.eos_id = hf.token_to_id(EOS)
        # display text of every piece, decoded once: byte-level pieces like "Ġthe" read as " the"
        self._pieces = [hf.decode([i], skip_special_tokens=False) for i in range(self.vocab_size)]

    @classmethod
    def load(cls, path: Path | str = TOKENIZER_PATH) -> "Tokenizer":
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run `python -m model.tokenizer` to train it")
        return cls(HFTokenizer.from_file(str(path)))

    def digest(self) -> str:
        """Short hash of the tokenizer's definition (vocabulary, merges, settings)."""
        return hashlib.sha256(self._tk.to_str().encode("utf-8")).hexdigest()[:12]

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}")
        # lone surrogates cannot be UTF-8 encoded; replace them rather than fail
        text = text.encode("utf-8", "replace").decode("utf-8")
        return self._tk.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tk.decode(list(ids), skip_special_tokens=False)

    def pieces(self, ids: list[int]) -> list[str]:
        """Display text per token (a piece that is part of a multi-byte character shows as '�')."""
        return [self._pieces[i] for i in ids]

    def piece_bytes(self, i: int) -> bytes:
        """The UTF-8 bytes a token stands for (byte-level BPE writes each byte as one printable character)."""
        return bytes(_BYTE_OF[ch] for ch in self._tk.id_to_token(i)) if i != self.eos_id else EOS.encode()

    def display_pieces(self, ids: list[int]) -> list[str]:
        """Display text per token of a sequence, every piece told apart: a token that holds only part of a
        character's UTF-8 bytes shows the character and which of its bytes it holds ("日[1/3]" is the first
        of 日's three bytes), where pieces() would show '�' for all of them; bytes that form no character (a
        sequence cut inside one) show as hex ("⟨E6⟩⟨97⟩")."""
        spans = [self.piece_bytes(i) for i in ids]
        data = b"".join(spans)
        chars = _utf8_chars(data)                                     # (start, end, text) per character
        out, start, c = [], 0, 0
        for b in spans:
            end, parts = start + len(b), []
            while c < len(chars) and chars[c][1] <= start:
                c += 1
            k = c
            while k < len(chars) and chars[k][0] < end:
                cs, ce, text = chars[k]
                if text is None:
                    parts.append(f"⟨{data[cs]:02X}⟩")
                elif start <= cs and ce <= end:
                    parts.append(text)
                else:
                    a, z, n = max(cs, start) - cs + 1, min(ce, end) - cs, ce - cs
                    parts.append(f"{text}[{a}/{n}]" if a == z else f"{text}[{a}-{z}/{n}]")
                k += 1
            out.append("".join(parts))
            start = end
        return out


_LEADS = ((0x80, 0x00), (0xE0, 0xC0), (0xF0, 0xE0), (0xF8, 0xF0))   # a character's first byte: 1, 2, 3, 4 bytes


def _utf8_chars(data: bytes) -> list[tuple[int, int, str | None]]:
    """(start, end, character) for each character of UTF-8 `data`; an invalid or cut sequence is one entry per
    byte with None for its character."""
    out, i = [], 0
    while i < len(data):
        lead = data[i]
        n = next((n for n, (mask, head) in enumerate(_LEADS, 1) if lead & mask == head), 0)
        try:
            out.append((i, i + n, data[i:i + n].decode("utf-8")) if n and i + n <= len(data) else None)
        except UnicodeDecodeError:
            out.append(None)
        if out[-1] is None:
            out[-1] = (i, i + 1, None)
            i += 1
        else:
            i += n
    return out


def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE's one-character stand-in for each byte (the GPT-2 scheme the `tokenizers` ByteLevel
    pre-tokenizer uses): printable Latin-1 bytes stand for themselves, the other bytes take the characters from
    U+0100 on, in byte order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in kept:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


_BYTE_OF = _byte_level_alphabet()


def train(docs: list[str], vocab_size: int = VOCAB_SIZE) -> HFTokenizer:
    tk = HFTokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tk.train_from_iterator(docs, trainer=trainer)
    return tk


if __name__ == "__main__":
    from model.corpus import documents, split
    train_docs, _ = split(documents())
    tk = train(train_docs)
    ASSETS.mkdir(exist_ok=True)
    tk.save(str(TOKENIZER_PATH))
    t = Tokenizer(tk)
    sample = "The router picks 16 of 896 experts for each token: def f(x): return x ** 2"
    ids = t.encode(sample)
    print(f"saved {TOKENIZER_PATH} ({t.vocab_size} pieces); {len(sample)} chars -> {len(ids)} tokens:")
    print(" | ".join(t.pieces(ids)))
