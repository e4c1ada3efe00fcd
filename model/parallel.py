"""Expert parallelism for one Stable LatentMoE layer on torch.distributed (ARCHITECTURE.md section 5).

The n routed experts are split into `world` contiguous shards (rank r holds experts
r*n/world .. (r+1)*n/world - 1, the 8 x 112 bands of the routing explorer at world = 8). Every rank
holds the replicated small parts (router, latent projections, norm, shared experts) and a block of
the tokens. One forward on every rank:

    route its own tokens (top-k of s + b)  ->  z = x W_down           (latent width l, on the source)
    dispatch: all_to_all of one l-wide row (+ expert id) per (token, expert) pair to the expert's rank
    each rank runs its local experts on the rows it received (grouped, no loop over experts)
    combine: all_to_all sends the results back; the source weights them by p, sums, then
    y = SharedExperts(x) + W_up RMSNorm(u)                               (the norm needs the whole sum)

So only the latent z crosses devices (l = d/2: half of what a full-width MoE sends per pair).
gloo's all_to_all_single with uneven splits works on torch 2.13's CPU build (checked); it moves
float32/float64 rows and int64 expert ids. Weights and inputs reach the workers through a
safetensors "problem" file (never pickle); each rank reads only its own slice of the expert tensors.

Run it (each rank reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as torchrun sets them):

    # 1. write a problem file: a MoE layer of the shipped checkpoint and seeded inputs
    python -m model.parallel --make-problem /tmp/ep_problem.safetensors --layer 5 --tokens 64
    #    (or --config micro / tiny for a random layer without the checkpoint)
    # 2a. one machine, 4 processes, gloo on the CPU
    torchrun --standalone --nproc-per-node 4 -m model.parallel --problem /tmp/ep_problem.safetensors
    # 2b. two machines, 4 processes each: copy the problem file to the same path on both, then run on
    #     each (node-rank 0 on the machine at MASTER, node-rank 1 on the other); 8 must divide 896
    torchrun --nnodes 2 --nproc-per-node 4 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 \\
        -m model.parallel --problem /tmp/ep_problem.safetensors
    # without torchrun, on one machine: G new processes (the app's "run it for real" button forks them
    # from model.fork_server instead, so they need not import torch each)
    python -m model.parallel --spawn 4 --problem /tmp/ep_problem.safetensors

Rank 0 prints whether the expert-parallel output equals the single-process LatentMoE layer and the
bytes each rank sent; `--out DIR` also writes DIR/result.json and DIR/result.safetensors (output y).
Only the gloo backend on CPU is tested here; `--backend nccl` puts each rank on cuda:LOCAL_RANK.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from model import fork_server
from model.activations import ACTIVATIONS, GLUFFN
from model.config import K3Config
from model.moe import LatentMoE, Router, grouped_experts
from model.norms import RMSNorm, rms_norm

ROOT = Path(__file__).resolve().parent.parent
EXPERT_KEYS = ("w_gate", "w_up", "w_down")
ASSIGN_MODES = ("blocks", "round_robin")


# ---- who holds what ------------------------------------------------------------------------------

def shard_bounds(n_experts: int, world: int, rank: int) -> tuple[int, int]:
    """Experts [lo, hi) of a rank: contiguous equal shards, so world must divide n_experts."""
    if world < 1 or n_experts % world:
        raise ValueError(f"{world} devices do not divide {n_experts} experts evenly")
    per = n_experts // world
    return rank * per, (rank + 1) * per


def token_owner(n_tokens: int, world: int, mode: str = "blocks") -> torch.Tensor:
    """Source rank of every token [T]: 'blocks' gives each rank a contiguous run of positions (sizes
    differ by at most one, the first ranks take the extra); 'round_robin' deals token t to t % world."""
    t = torch.arange(n_tokens)
    if mode == "round_robin":
        return t % world
    if mode != "blocks":
        raise ValueError(f"assignment is one of {ASSIGN_MODES}, not {mode!r}")
    base, extra = divmod(n_tokens, world)
    sizes = torch.tensor([base + (r < extra) for r in range(world)])
    return torch.repeat_interleave(torch.arange(world), sizes)


# ---- the problem file ----------------------------------------------------------------------------

def write_problem(path: str | Path, moe: LatentMoE, x: torch.Tensor) -> Path:
    """One MoE layer (its state dict) and the FFN inputs x [T, d] it should process, as safetensors."""
    if moe.down is None:
        raise ValueError("expert parallelism here needs a latent MoE layer (latent_dim set)")
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in moe.state_dict().items()}
    tensors["x"] = x.detach().cpu().reshape(-1, moe.cfg.d_model).contiguous().clone()
    meta = {"format": "k3-ep-problem", "config": json.dumps(moe.cfg.to_dict())}
    save_file(tensors, str(path), metadata=meta)
    return Path(path)


def _config(f) -> K3Config:
    meta = f.metadata() or {}
    if meta.get("format") != "k3-ep-problem":
        raise ValueError("not an expert-parallel problem file (write one with --make-problem)")
    return K3Config(**json.loads(meta["config"]))


def load_full_layer(path: str | Path) -> tuple[LatentMoE, torch.Tensor]:
    """The whole layer as one LatentMoE (the single-process reference) and the inputs x [T, d]."""
    with safe_open(str(path), "pt") as f:
        cfg = _config(f)
        state = {k: f.get_tensor(k) for k in f.keys() if k != "x"}
        x = f.get_tensor("x")
    with torch.device("meta"):
        moe = LatentMoE(cfg)
    moe.load_state_dict(state, assign=True, strict=True)
    return moe.eval().requires_grad_(False), x


class ExpertShard(nn.Module):
    """What one rank holds: the replicated small parts of the layer and its own experts."""

    def __init__(self, cfg: K3Config, lo: int, hi: int):
        super().__init__()
        d, l, f, E = cfg.d_model, cfg.expert_width, cfg.expert_hidden, cfg.n_routed_experts
        self.cfg, self.lo, self.hi = cfg, lo, hi
        self.router = Router(d, E, cfg.top_k)                     # replicated: every rank routes
        self.down = nn.Linear(d, l, bias=False)
        self.up = nn.Linear(l, d, bias=False)
        self.norm = RMSNorm(l, cfg.norm_eps)
        self.shared = GLUFFN(d, cfg.n_shared_experts * cfg.shared_hidden, cfg.activation)
        self.w_gate = nn.Parameter(torch.empty(hi - lo, f, l))   # [E_local, f, l], each expert [out, in]
        self.w_up = nn.Parameter(torch.empty(hi - lo, f, l))
        self.w_down = nn.Parameter(torch.empty(hi - lo, l, f))


def load_shard(path: str | Path, rank: int, world: int) -> tuple[ExpertShard, torch.Tensor]:
    """Rank `rank`'s part of the layer (reading only its slice of the expert tensors) and x [T, d]."""
    with safe_open(str(path), "pt") as f:
        cfg = _config(f)
        lo, hi = shard_bounds(cfg.n_routed_experts, world, rank)
        state = {k: (f.get_slice(k)[lo:hi] if k in EXPERT_KEYS else f.get_tensor(k))
                 for k in f.keys() if k != "x"}
        x = f.get_tensor("x")
    with torch.device("meta"):
        shard = ExpertShard(cfg, lo, hi)
    shard.load_state_dict(state, assign=True, strict=True)
    return shard.eval().requires_grad_(False), x


# ---- the expert-parallel forward -----------------------------------------------------------------

@dataclass
class Traffic:
    """What one rank sent and received in one forward (pairs = (token, expert) rows)."""
    rank: int
    tokens: int                                          # tokens this rank is the source of
    pairs_to: list[int] = field(default_factory=list)    # [world] rows dispatched to each rank
    pairs_from: list[int] = field(default_factory=list)  # [world] rows received from each rank
    bytes_dispatch: int = 0    # to other ranks: latent rows + expert ids + the count exchange
    bytes_combine: int = 0     # to other ranks: the expert results sent back
    bytes_local: int = 0       # rows a rank "sends" to itself (a memory copy, no network)


def ep_forward(shard: ExpertShard, x: torch.Tensor, world: int, group=None
               ) -> tuple[torch.Tensor, Traffic]:
    """y [N, d] for this rank's tokens x [N, d]; every rank must call it (collectives inside)."""
    cfg, rank = shard.cfg, dist.get_rank(group)
    E, k = cfg.n_routed_experts, cfg.top_k
    per = E // world
    N = x.shape[0]
    rdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    r = shard.router(x)                                                             # the same router
    idx, p = r.indices, r.weights                                                   # [N, k] each
    z = shard.down(x)                                                               # [N, l]
    l = z.shape[1]

    # dispatch: one row per (token, expert) pair, grouped by destination rank
    flat = idx.reshape(-1)                                                          # [P]
    dest = torch.div(flat, per, rounding_mode="floor")                              # [P]
    order = torch.argsort(dest, stable=True)                                        # [P]
    token = torch.div(order, k, rounding_mode="floor")                              # [P]
    send_rows = z.index_select(0, token).contiguous()                               # [P, l]
    send_ids = flat[order].contiguous()                                             # [P]
    send_counts = torch.bincount(dest, minlength=world).to(torch.int64)             # [world]
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts, group=group)
    s_split, r_split = send_counts.tolist(), recv_counts.tolist()
    R = sum(r_split)
    recv_rows = z.new_empty(R, l)
    recv_ids = send_ids.new_empty(R)
    dist.all_to_all_single(recv_rows, send_rows, r_split, s_split, group=group)
    dist.all_to_all_single(recv_ids, send_ids, r_split, s_split, group=group)

    # the local experts, on the rows this rank received (weight 1: p is applied at the source)
    if R:
        local = (recv_ids - shard.lo).unsqueeze(1)                                  # [R, 1]
        out = grouped_experts(recv_rows, local, torch.ones(R, 1, dtype=rdt), shard.w_gate,
                              shard.w_up, shard.w_down, ACTIVATIONS[cfg.activation])  # [R, l]
    else:
        out = z.new_zeros(0, l)

    # combine: results go back the way they came, then the source weights and sums them
    back = z.new_empty(flat.numel(), l)
    dist.all_to_all_single(back, out.contiguous(), s_split, r_split, group=group)
    back = back * p.reshape(-1)[order].unsqueeze(1).to(back.dtype)
    u = z.new_zeros(N, l).index_add_(0, token, back)                                # [N, l]
    if cfg.router_scale != 1.0:
        u = u * cfg.router_scale
    y = shard.shared(x) + shard.up(shard.norm(u))                                   # [N, d]

    row = l * z.element_size()
    remote_out = sum(c for r, c in enumerate(s_split) if r != rank)
    remote_back = sum(c for r, c in enumerate(r_split) if r != rank)
    traffic = Traffic(rank, N, s_split, r_split,
                      bytes_dispatch=remote_out * (row + send_ids.element_size())
                      + (world - 1) * send_counts.element_size(),
                      bytes_combine=remote_back * row,
                      bytes_local=(s_split[rank] + r_split[rank]) * row)
    return y, traffic


def _all_gather_rows(y_local: torch.Tensor, owner: torch.Tensor, world: int, group=None) -> torch.Tensor:
    """The full [T, d] output on every rank (rows padded to the largest block, gathered, placed)."""
    sizes = torch.bincount(owner, minlength=world)
    width = int(sizes.max())
    padded = y_local.new_zeros(width, y_local.shape[1])
    padded[: y_local.shape[0]] = y_local
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded, group=group)
    y = y_local.new_empty(owner.numel(), y_local.shape[1])
    for r in range(world):
        y[owner == r] = parts[r][: int(sizes[r])]
    return y


# ---- one worker (a torchrun rank or a process spawned by launch_local) ---------------------------

def _say(rank: int, msg: str) -> None:
    print(f"[rank {rank}] {msg}", flush=True)


def worker(problem: str, out_dir: str | None, assign: str = "blocks", backend: str = "gloo",
           timeout_s: float = 120.0, check: bool = True) -> dict | None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    _say(rank, "connecting")
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s))
    try:
        _say(rank, "loading its shard")
        shard, x = load_shard(problem, rank, world)
        shard, x = shard.to(device), x.to(device)
        owner = token_owner(x.shape[0], world, assign).to(device)
        x_local = x[owner == rank]
        with torch.inference_mode():
            _say(rank, "dispatch, experts, combine")
            dist.barrier()
            t0 = time.perf_counter()
            y_local, traffic = ep_forward(shard, x_local, world)
            dist.barrier()
            wall = time.perf_counter() - t0
            y = _all_gather_rows(y_local, owner, world)
            stats = torch.tensor([traffic.tokens, traffic.bytes_dispatch, traffic.bytes_combine,
                                  traffic.bytes_local, round(wall * 1e9)] + traffic.pairs_to,
                                 dtype=torch.int64, device=device)
            gathered = [torch.empty_like(stats) for _ in range(world)]
            dist.all_gather(gathered, stats)
        if rank != 0:
            _say(rank, "done")
            return None
        ranks = []
        for r, s in enumerate(gathered):
            s = s.tolist()
            ranks.append({"rank": r, "experts": list(shard_bounds(shard.cfg.n_routed_experts, world, r)),
                          "tokens": s[0], "bytes_dispatch": s[1], "bytes_combine": s[2],
                          "bytes_local": s[3], "seconds": s[4] / 1e9, "pairs_to": s[5:]})
        result = {"world": world, "backend": backend, "assign": assign, "tokens": int(x.shape[0]),
                  "dtype": str(x.dtype).replace("torch.", ""), "ranks": ranks,
                  "seconds": max(r["seconds"] for r in ranks)}
        if check:
            _say(rank, "checking against the single-process layer")
            moe, x_all = load_full_layer(problem)
            with torch.inference_mode():
                ref, _ = moe(x_all.unsqueeze(0))
            result["max_abs_diff"] = float((y.cpu() - ref[0]).abs().max())
        if out_dir:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            save_file({"y": y.cpu().contiguous()}, str(Path(out_dir) / "result.safetensors"))
            (Path(out_dir) / "result.json").write_text(json.dumps(result, indent=1))
        _say(rank, f"done: {json.dumps(_summary(result))}")
        return result
    finally:
        dist.destroy_process_group()


def _summary(result: dict) -> dict:
    keys = ("world", "tokens", "seconds", "max_abs_diff")
    return {k: result[k] for k in keys if k in result} | {
        "bytes_sent": [r["bytes_dispatch"] + r["bytes_combine"] for r in result["ranks"]]}


# ---- launching G local processes (the app's button, the tests) -----------------------------------

class LaunchError(RuntimeError):
    pass


@dataclass
class LocalRun:
    result: dict                 # rank 0's result.json
    y: torch.Tensor              # [T, d] the expert-parallel output, gathered
    seconds_total: float         # wall time from starting the processes to their exit
    logs: list[str]              # each rank's output
    forked: bool = False         # the ranks were forked from the process server (model.fork_server)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SpawnedRanks:
    """Each rank a new `python -m model.parallel` process; the interface launch_local polls."""

    def __init__(self, ranks: list[dict]):
        self.procs: list[subprocess.Popen] = []
        # the torch path, as the forked ranks (model/fork_server.py): numba's start would outweigh one layer's work
        base = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "K3_FAST": "0",
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        for r, spec in enumerate(ranks):
            try:
                with open(spec["log"], "w") as log:
                    self.procs.append(subprocess.Popen(
                        [sys.executable, "-m", "model.parallel", *spec["argv"]], cwd=ROOT,
                        env={**base, **spec["env"]}, stdout=log, stderr=subprocess.STDOUT))
            except OSError as e:
                self.stop()
                raise LaunchError(f"could not start process {r}: {e}") from e

    def codes(self) -> list[int | None]:
        return [p.poll() for p in self.procs]

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# launch_local reports progress every PROGRESS_S once a run has taken PROGRESS_AFTER_S: a page redrawing
# its status takes CPU time the ranks need on a small machine (a forked run of 0.45 s took 0.83 s in the
# app with a report every 0.2 s from the start), and a run that ends sooner needs no progress
PROGRESS_S = 0.2
PROGRESS_AFTER_S = 1.0


def start_ranks(ranks: list[dict], timeout_s: float, fork: bool):
    """The ranks forked from the process server when `fork` and it runs (or can start), else spawned."""
    server = fork_server.server() if fork else None
    if server is not None:
        try:
            return fork_server.ForkedRanks(server, ranks, timeout_s)
        except fork_server.ServerError:
            pass                                     # gone since: start them the plain way
    return SpawnedRanks(ranks)


def launch_local(problem: str | Path, world: int, assign: str = "blocks", timeout_s: float = 300.0,
                 progress=None, check: bool = True, fork: bool = False) -> LocalRun:
    """Run `world` ranks of this module on 127.0.0.1 (gloo), wait, and return rank 0's result.

    Each rank is a separate process: with `fork`, forked from the process server (model.fork_server,
    torch already imported: 8 ranks in ~0.5 s here), falling back to a new Python process each (~1-2 s,
    mostly `import torch`) when the server cannot start. `progress(elapsed_s, finished, stages)` is called
    about 5 times a second once they have run for a second (stages: each rank's latest message). Raises
    LaunchError with the reason (and the failing rank's output) when a process cannot start, fails, or runs
    past `timeout_s`; every process it started is stopped.
    """
    if not 1 <= world <= 64:
        raise LaunchError(f"{world} processes is outside 1..64")
    if assign not in ASSIGN_MODES:
        raise LaunchError(f"assignment is one of {ASSIGN_MODES}")
    out_dir = Path(tempfile.mkdtemp(prefix="k3-ep-"))
    port = free_port()
    argv = ["--problem", str(problem), "--assign", assign] + ([] if check else ["--no-check"])
    ranks = [{"argv": argv + (["--out", str(out_dir)] if r == 0 else []),
              "env": {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
                      "RANK": str(r), "LOCAL_RANK": str(r)},
              "log": str(out_dir / f"rank{r}.log")} for r in range(world)]
    logs = [Path(spec["log"]) for spec in ranks]
    t0 = time.perf_counter()
    group, reported = None, PROGRESS_AFTER_S - PROGRESS_S
    try:
        group = start_ranks(ranks, timeout_s + 10, fork)   # the server's own deadline: a backstop to ours
        while True:
            try:
                codes = group.codes()
            except fork_server.ServerError as e:
                raise LaunchError(f"the process server failed during the run: {e}") from e
            elapsed = time.perf_counter() - t0
            if progress is not None and elapsed - reported >= PROGRESS_S:
                progress(elapsed, sum(c is not None for c in codes), [_last_line(g) for g in logs])
                reported = elapsed
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                r, c = bad[0]
                raise LaunchError(f"process {r} exited with code {c}:\n{_tail(logs[r])}")
            if all(c == 0 for c in codes):
                break
            if elapsed > timeout_s:
                raise LaunchError(f"the {world} processes did not finish within {timeout_s:.0f} s "
                                  f"(stages: {[_last_line(g) for g in logs]})")
            time.sleep(0.01 if elapsed < 1 else PROGRESS_S)   # a forked run ends in well under a second
        total = time.perf_counter() - t0
        result = json.loads((out_dir / "result.json").read_text())
        with safe_open(str(out_dir / "result.safetensors"), "pt") as f:
            y = f.get_tensor("y")
        return LocalRun(result, y, total, [_tail(g, 4000) for g in logs],
                        isinstance(group, fork_server.ForkedRanks))
    finally:
        if group is not None:
            group.stop()
        shutil.rmtree(out_dir, ignore_errors=True)


def _tail(log: Path, n: int = 2000) -> str:
    try:
        return log.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def _last_line(log: Path) -> str:
    lines = [s for s in _tail(log, 400).splitlines() if s.strip()]
    return lines[-1] if lines else "starting Python"


# ---- command line --------------------------------------------------------------------------------

def make_problem(path: str | Path, layer: int = 5, tokens: int = 64, config: str | None = None,
                 seed: int = 0) -> Path:
    """A problem file from the shipped checkpoint's MoE layer (or a seeded random micro/tiny layer)
    with seeded inputs shaped like a real FFN input (unit RMS times the layer's ffn_norm gain)."""
    g = torch.Generator().manual_seed(seed)
    if config is None:
        from model.checkpoint import load_pretrained
        model, _ = load_pretrained()
        if not model.cfg.is_moe(layer) or not 0 <= layer < model.cfg.num_layers:
            raise ValueError(f"layer {layer} is not a MoE layer (1..{model.cfg.num_layers - 1})")
        moe, gain = model.layers[layer].ffn, model.layers[layer].ffn_norm.weight
    else:
        cfg = {"micro": K3Config.micro, "tiny": K3Config.tiny}[config]()
        torch.manual_seed(seed)
        moe, gain = LatentMoE(cfg).eval(), torch.ones(cfg.d_model)
        with torch.no_grad():
            moe.router.weight.normal_(0, 0.5, generator=g)
    x = rms_norm(torch.randn(tokens, moe.cfg.d_model, generator=g)) * gain.detach()
    return write_problem(path, moe, x)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m model.parallel", description=__doc__.split("\n\n")[0])
    ap.add_argument("--problem", help="problem file (safetensors) to run expert-parallel")
    ap.add_argument("--make-problem", metavar="FILE", help="write a problem file and exit")
    ap.add_argument("--layer", type=int, default=5, help="MoE layer of the checkpoint (with --make-problem)")
    ap.add_argument("--tokens", type=int, default=64, help="tokens in the problem (with --make-problem)")
    ap.add_argument("--config", choices=("micro", "tiny"), help="random layer instead of the checkpoint")
    ap.add_argument("--spawn", type=int, metavar="G", help="start G local processes (no torchrun)")
    ap.add_argument("--assign", choices=ASSIGN_MODES, default="blocks", help="tokens to source ranks")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--out", help="rank 0 writes result.json and result.safetensors here")
    ap.add_argument("--no-check", action="store_true", help="skip rank 0's single-process check")
    a = ap.parse_args(argv)
    if a.make_problem:
        path = make_problem(a.make_problem, a.layer, a.tokens, a.config)
        print(f"wrote {path}")
        return 0
    if not a.problem:
        ap.error("give --problem FILE (write one with --make-problem FILE)")
    if a.spawn:
        run = launch_local(a.problem, a.spawn, a.assign, check=not a.no_check)
        print(json.dumps(_summary(run.result) | {"seconds_with_startup": round(run.seconds_total, 2)}))
        return 0
    if "RANK" not in os.environ:
        ap.error("RANK/WORLD_SIZE are not set: run under torchrun, or use --spawn G")
    worker(a.problem, a.out, a.assign, a.backend, check=not a.no_check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
