"""Attention Residuals over depth, Full and Block (ARCHITECTURE.md section 1; AttnRes arXiv 2603.15031).

There is no `h + f(h)`: before every module (and once before the LM head) the module's input is a
softmax-weighted mix of earlier residual sources, with one learned query vector per read. `Full`
keeps every module output as its own source; `Block` (K3's choice, blocks of 12 layers) keeps one
running sum per block of layers, so at most N + 1 vectors per token are alive instead of 2L + 1.

This file holds the read (`AttnResQuery`), the bookkeeping of the source list (`DepthState`, which
also counts links and records the depth weights the app plots) and the closed forms the app shows
beside the instrumented counts (`link_count`, `vectors_alive`, `block_sizes`, from model/depth_counts.py).
"""
from __future__ import annotations

import torch
from torch import nn

from model import fast
from model.depth_counts import block_sizes, link_count, vectors_alive  # noqa: F401 - the closed forms
from model.norms import rms_norm

MODULE_NAMES = ("attn", "ffn")   # the two modules of every layer, in call order


# ---- the read -------------------------------------------------------------------------------------

class AttnResQuery(nn.Module):
    """One depth-attention read: softmax over sources of RMSNorm_nogain(V_s) . w, mixing raw V_s.

    The effective query is w = gain * proj (section 1): `gain` is the key-norm gain (init 1) folded
    into the query, `proj` the projection (init 0), so a fresh read weights every source uniformly.
    """

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.gain = nn.Parameter(torch.ones(dim))
        self.proj = nn.Parameter(torch.zeros(dim))

    def forward(self, sources: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        V = torch.stack(sources, dim=-2)                          # [B, T, S, d], raw values
        if fast.usable(V, self.gain, self.proj):                 # inference: the compiled read (model/fast.py)
            return fast.attnres(V, self.gain, self.proj, self.eps)
        keys = rms_norm(V, self.eps)                              # [B, T, S, d], fp32 (fp64 if given)
        w = (self.gain * self.proj).to(keys.dtype)                # [d]
        a = torch.softmax(keys @ w, dim=-1)                       # [B, T, S], over depth, per token
        h = (a.to(V.dtype).unsqueeze(-2) @ V).squeeze(-2)         # [B, T, d], convex mix of raw V
        return h, a


# ---- the bookkeeping ------------------------------------------------------------------------------

class DepthState:
    """The residual stream of section 1 for one forward: sources, link count and recorded reads.

    Per-layer recipe (0-based layer i; `q_attn`, `q_ffn`, `q_out` are AttnResQuery modules):

        state = DepthState(embedding, mode, block_size)     # mode "block" | "full" | None (plain)
        for i in range(L):
            state.begin_layer(i)
            h, _ = state.read(q_attn[i]);  state.add(attn_i(RMSNorm(h)))
            h, _ = state.read(q_ffn[i]);   state.add(ffn_i(RMSNorm(h)))
        y, _ = state.read(q_out, "out");   logits = head(RMSNorm(y))

    This reproduces section 1 exactly: `begin_layer(i)` only marks the seal due when
    i % block_size == 0, and the seal (`blocks.append(partial); partial = None`) is carried out by
    the layer's first `add`, i.e. after the pre-attention read and before the attention output starts
    the new partial. So layer 0's pre-attention read sees the embedding alone (one link, h is the
    embedding itself) and layer 0 seals the embedding as the first source. Reads never change the
    sources; the same recipe with one `add` per layer gives the one-module-per-layer picture.

    Source labels: "emb"; in block mode "block k" for the k-th sealed block of layers (k >= 1, layers
    (k-1)*S_b .. k*S_b - 1) and "partial" last; in full mode "L{i}.attn" / "L{i}.ffn". Read labels
    default to "L{i}.attn" / "L{i}.ffn" for the module the read feeds. Mode None is the plain Pre-Norm
    residual (read returns the running sum, weights None, no links), for models without AttnRes.
    """

    def __init__(self, embedding: torch.Tensor, mode: str | None = "block", block_size: int = 12,
                 record: bool = True):
        if mode not in ("block", "full", None):
            raise ValueError("mode is 'block', 'full' or None")
        if mode == "block" and block_size < 1:
            raise ValueError("block_size must be positive")
        self.mode, self.block_size, self.record = mode, block_size, record
        self.blocks: list[torch.Tensor] = []        # sealed sources, oldest first (full: every source)
        self.labels: list[str] = []                 # one per entry of self.blocks
        self.partial: torch.Tensor | None = embedding   # block / plain: running sum of the open block
        if mode == "full":
            self.blocks, self.labels, self.partial = [embedding], ["emb"], None
        self.links = 0                              # candidates summed over every read so far
        self.reads: list[tuple[str, torch.Tensor, list[str]]] = []   # (label, [B, T, S], source labels)
        self.layer = -1
        self._module = 0                            # modules added so far in the current layer
        self._seal_due = False

    def copy(self) -> "DepthState":
        """A snapshot to resume from: new lists, the same (immutable in inference) tensors."""
        other = object.__new__(DepthState)
        other.__dict__.update(self.__dict__)
        other.blocks, other.labels, other.reads = list(self.blocks), list(self.labels), list(self.reads)
        return other

    def begin_layer(self, i: int) -> None:
        self.layer, self._module = i, 0
        self._seal_due = self.mode == "block" and i % self.block_size == 0

    def sources(self) -> tuple[list[torch.Tensor], list[str]]:
        """The current source list with labels: sealed first, partial last (block mode)."""
        if self.partial is None or self.mode != "block":
            return list(self.blocks), list(self.labels)
        return self.blocks + [self.partial], self.labels + ["emb" if not self.labels else "partial"]

    def read(self, query: AttnResQuery | None, label: str | None = None
             ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.mode is None:
            return self.partial, None
        srcs, names = self.sources()
        if len(srcs) == 1:
            # Section 1: "h = partial if blocks is empty"; a softmax over one source is exactly 1.
            h = srcs[0]
            a = torch.ones(*h.shape[:-1], 1, dtype=torch.float32, device=h.device)   # [B, T, 1]
        else:
            h, a = query(srcs)
        self.links += len(srcs)
        if self.record:
            if label is None:
                name = MODULE_NAMES[self._module] if self._module < len(MODULE_NAMES) else f"m{self._module}"
                label = f"L{self.layer}.{name}"
            self.reads.append((label, a, names))
        return h, a

    def add(self, output: torch.Tensor) -> None:
        """Add one module output: to the partial sum (block, plain) or as a new source (full)."""
        if self.mode == "full":
            name = MODULE_NAMES[self._module] if self._module < len(MODULE_NAMES) else f"m{self._module}"
            self.blocks.append(output)
            self.labels.append(f"L{self.layer}.{name}")
        elif self._seal_due:
            # Section 1: `if i % S_b == 0: blocks.append(partial); partial = None`, then the
            # attention output starts the new partial. Done here so it follows the pre-attention read.
            self.labels.append("emb" if not self.blocks else f"block {len(self.blocks)}")
            self.blocks.append(self.partial)
            self.partial = output
            self._seal_due = False
        else:
            self.partial = self.partial + output
        self._module += 1
