"""Speed of the live tiny model and of its fast paths against their plain references.

    python bench/bench_model.py [--threads N] [--reps R] [--checkpoint]

Prints medians (and ratios) for:
* one forward of the tiny instance over a 64-token prompt (goal: at most 100 ms on 1 thread), with the
  compiled kernels (model/fast.py) and with the torch reference alone, alternately in the same run;
* chunked vs recurrent KDA kernel at T = 2048 (target: chunked at least 5x faster);
* grouped expert dispatch vs a per-token loop, 64 tokens x 16 of 896 experts (target: at least 10x).
Timings, not tests: the machine is noisy, so read the medians and the ratios.
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from model import fast  # noqa: E402
from model import kda as kda_mod  # noqa: E402
from model.activations import situ_glu  # noqa: E402
from model.checkpoint import load_pretrained  # noqa: E402
from model.config import K3Config  # noqa: E402
from model.k3 import K3Model  # noqa: E402
from model.kda import kda_chunked, kda_recurrent  # noqa: E402
from model.moe import grouped_experts, route  # noqa: E402

HELDOUT = Path(__file__).resolve().parent.parent / "assets" / "heldout_sample.txt"


def median_ms(fn, reps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def per_token_loop(z, idx, w, wg, wu, wd):
    out = torch.zeros_like(z)
    for t in range(z.shape[0]):
        for slot in range(idx.shape[1]):
            e = int(idx[t, slot])
            h = situ_glu(wg[e] @ z[t], wu[e] @ z[t])          # matrices stored [out, in]
            out[t] += w[t, slot] * (wd[e] @ h)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--checkpoint", action="store_true",
                    help="the shipped trained instance on windows of the held-out text, not a seeded random one")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    torch.manual_seed(0)
    cfg = K3Config.tiny()
    # a new prompt for every forward, as a person's next sentence is: repeating one prompt lets the CPU's branch
    # predictor learn its top-k selections (torch.topk then takes ~20 us where fresh data takes ~80)
    if args.checkpoint:
        model, tok = load_pretrained()
        cfg = model.cfg
        text = tok.encode(HELDOUT.read_text(encoding="utf-8"))
        windows = [torch.tensor([text[i:i + 64]]) for i in range(0, len(text) - 64, 32)]
        print(f"the shipped checkpoint, {len(windows)} windows of 64 tokens of {HELDOUT.name}")
    else:
        model = K3Model(cfg).eval()
        windows = [torch.randint(0, cfg.vocab_size, (1, 64)) for _ in range(32)]
        print("a seeded random instance, random 64-token prompts")
    ids = windows[0]
    prompts = itertools.cycle(windows)
    fresh = lambda **kw: model(next(prompts), **kw)   # noqa: E731
    kernels = fast.warm()
    with torch.inference_mode():
        # the compiled kernels (model/fast.py) and the torch reference alternately, so both see the same machine
        with_k, ref = [], []
        for _ in range(3):
            with_k.append(median_ms(fresh, args.reps))
            with fast.off():
                ref.append(median_ms(fresh, args.reps))
        fwd, fwd_ref = statistics.median(with_k), statistics.median(ref)
        fwd256 = median_ms(lambda: model(torch.randint(0, cfg.vocab_size, (1, 256))), max(3, args.reps // 2))
        base = model(ids)
        resume = median_ms(lambda: model.resume(base, 80), args.reps)
    print(f"tiny forward, 64 tokens:  median {fwd:7.1f} ms with the compiled kernels "
          f"({'on' if kernels else 'OFF: K3_FAST=0 or numba missing'}), {fwd_ref:.1f} ms torch only "
          f"(goal <= 100 ms on 1 thread)")
    print(f"tiny forward, 256 tokens: median {fwd256:7.1f} ms ({fwd256 / fwd:.1f}x the 64-token cost)")
    print(f"resume from layer 80 (13 layers), 64 tokens: median {resume:6.1f} ms ({fwd / resume:.1f}x faster)")

    # What the choices buy, measured on the same model (each line changes one thing back); the KDA lines on the
    # torch path, where its chunked form runs
    with torch.inference_mode():
        no_trace = median_ms(lambda: fresh(record=False), args.reps)
        kda_layers = [layer.attn for layer in model.layers if layer.kind == "kda"]
        own = kda_layers[0].chunk_size
        with fast.off():
            for a in kda_layers:
                a.chunk_size = 64                  # one chunk for the whole 64-token prompt
            one_chunk = median_ms(fresh, args.reps)
            for a in kda_layers:
                a.chunk_size = own
            kda_mod.FACTOR_SPAN, span = -1.0, kda_mod.FACTOR_SPAN      # every chunk's decays pairwise, masked
            pairwise = median_ms(fresh, args.reps)
            kda_mod.FACTOR_SPAN = span
        fast.WHOLE_LAYERS = False     # MoE: router then kernels; KDA: torch around the recurrence; MLA: torch
        parts = median_ms(fresh, args.reps)
        fast.WHOLE_LAYERS = True
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model(ids)
        n_ops = sum(1 for e in prof.events() if e.cpu_parent is None and e.name.startswith("aten::"))
    print(f"  without the trace (record=False): {no_trace:6.1f} ms ({fwd - no_trace:+.1f} ms for the trace)")
    print(f"  torch only, KDA chunk 64 (one chunk) instead of {own}: {one_chunk:6.1f} ms ({one_chunk - fwd_ref:+.1f} ms)")
    print(f"  torch only, KDA intra-chunk decays pairwise, not factorised: {pairwise:6.1f} ms "
          f"({pairwise - fwd_ref:+.1f} ms)")
    print(f"  MoE, KDA and MLA layers in parts (torch with the smaller kernels), not one call each: {parts:6.1f} ms "
          f"({parts - fwd:+.1f} ms)")
    print(f"  top-level aten ops per 64-token forward: {n_ops:,} (~{fwd * 1e3 / n_ops:.0f} us each on average)")

    B, T, H, K = 1, 2048, 2, 16
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K), dim=-1)
    v = torch.randn(B, T, H, K)
    g = -5 * torch.sigmoid(torch.randn(B, T, H, K))
    beta = torch.sigmoid(torch.randn(B, T, H))
    with torch.inference_mode():
        rec = median_ms(lambda: kda_recurrent(q, k, v, g, beta), 3, warmup=1)
        chunks = {C: median_ms(lambda: kda_chunked(q, k, v, g, beta, chunk_size=C), args.reps)
                  for C in (16, 32, 64)}
        compiled = median_ms(lambda: fast.kda(q, k, v, g, beta, K ** -0.5), args.reps) if kernels else None
    chk = chunks[next(l.attn for l in model.layers if l.kind == "kda").chunk_size]
    print(f"KDA at T = 2048: recurrent {rec:7.1f} ms, chunked (C = 16, the layer's) {chk:6.1f} ms "
          f"-> {rec / chk:.1f}x (target >= 5x)"
          + (f"; the compiled recurrence (model/fast.py) {compiled:.1f} ms" if compiled is not None else ""))
    print("  other chunk sizes: " + ", ".join(f"C = {C}: {ms:.1f} ms ({rec / ms:.1f}x)" for C, ms in chunks.items())
          + "  (a chunk that decays by more than FACTOR_SPAN forms the [C, C, K] pairwise decays)")

    E, l, f = cfg.n_routed_experts, cfg.latent_dim, cfg.expert_hidden
    z = torch.randn(64, l)
    wg, wu, wd = torch.randn(E, f, l) * 0.2, torch.randn(E, f, l) * 0.2, torch.randn(E, l, f) * 0.3
    idx, w, _ = route(torch.rand(64, E), None, cfg.top_k)
    with torch.inference_mode():
        with fast.off():
            grouped = median_ms(lambda: grouped_experts(z, idx, w, wg, wu, wd, situ_glu), args.reps)
        compiled = median_ms(lambda: grouped_experts(z, idx, w, wg, wu, wd, situ_glu), args.reps)
        loop = median_ms(lambda: per_token_loop(z, idx, w, wg, wu, wd), 3, warmup=1)
        assert torch.allclose(grouped_experts(z, idx, w, wg, wu, wd, situ_glu),
                              per_token_loop(z, idx, w, wg, wu, wd), atol=1e-4)
    print(f"expert dispatch, 64 tokens x 16 of 896 experts: loop {loop:7.1f} ms, grouped {grouped:5.2f} ms "
          f"-> {loop / grouped:.0f}x (target >= 10x); with the compiled kernels {compiled:5.2f} ms")


if __name__ == "__main__":
    main()
