"""Closed forms of Attention Residuals' bookkeeping (ARCHITECTURE.md section 1), torch-free: layers per
block, links per token, vectors alive per token. model.attnres counts the same things on a live trace
(DepthState); the tests check the two agree."""
from __future__ import annotations


def block_sizes(num_layers: int, block_size: int) -> list[int]:
    """Layers per block, e.g. (93, 12) -> [12]*7 + [9] (the same rule as K3Config.attnres_blocks)."""
    if num_layers < 1 or block_size < 1:
        raise ValueError("num_layers and block_size must be positive")
    return [min(block_size, num_layers - i) for i in range(0, num_layers, block_size)]


def link_count(num_layers: int, block_size: int | None = None, reads_per_layer: int = 1,
               output_read: bool = False) -> int:
    """Links (one candidate source in one read) summed over every read of one token.

    `reads_per_layer` is also the number of modules per layer: each module is preceded by one read
    (1 = the usual one-module-per-layer picture of the AttnRes paper, 2 = K3's attention + FFN).
    """
    L, r = num_layers, reads_per_layer
    if L < 1 or r < 1:
        raise ValueError("num_layers and reads_per_layer must be positive")
    if block_size is None:
        # Full: read j of layer i sees the embedding and the r*i + j earlier module outputs, so
        # sum_i sum_j (1 + r*i + j) = rL + r^2 L(L-1)/2 + L r(r-1)/2; the output read sees 1 + rL.
        # r = 1: L(L+1)/2 (4,371 at L = 93); r = 2 with output: L(2L+1) + (2L+1) (17,578).
        links = r * L + r * r * L * (L - 1) // 2 + L * r * (r - 1) // 2
        return links + (1 + r * L if output_read else 0)
    # Block: every read inside block n (0-based) sees the n + 1 sealed sources (embedding + n blocks
    # of layers) plus the partial sum, n + 2 candidates, except the first read of the block, which
    # runs before that block's seal and sees n + 1. Summed: r * sum_n S_n (n + 2) - N. With r = 1
    # this is the table's sum_n [n + (S_n - 1)(n + 1)] over 1-based n (493); the output read sees
    # N + 1 (embedding + N - 1 sealed + partial): r = 2 with output gives 1,003 at (93, 12).
    sizes = block_sizes(L, block_size)
    N = len(sizes)
    links = r * sum(s * (n + 2) for n, s in enumerate(sizes)) - N
    return links + (N + 1 if output_read else 0)


def vectors_alive(num_layers: int, block_size: int | None = None, modules_per_layer: int = 2) -> int:
    """[d]-vectors per token kept for depth attention at the widest read (the output read).

    Full: the embedding plus every module output, 2L + 1 = 187 at L = 93. Block: the sealed
    embedding, N - 1 sealed blocks of layers and the partial sum, N + 1 = 9 at (93, 12)
    (ARCHITECTURE.md: "embedding + 7 sealed + partial"); independent of the modules per layer.
    """
    if block_size is None:
        return 1 + modules_per_layer * num_layers
    return len(block_sizes(num_layers, block_size)) + 1
