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
