"""The Expert parallelism page's real run without the page: one MoE layer of the shipped checkpoint over
G local processes (model.parallel.launch_local), ranks forked from the process server against ranks
started as new Python processes.

    python bench/parallel_launch.py                       # G = 1, 2, 4, 8; 5 runs each way
    python bench/parallel_launch.py --worlds 8 --reps 10 --config tiny --json /tmp/launch.json

Timed: launch_local's wall time, from starting the ranks to rank 0's result read back (what the page's
button waits for besides writing the problem file and its own single-process check). The server's own
start (importing torch once) is timed apart; the app pays it in its warm-up, not on a click.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from model import fork_server  # noqa: E402
from model.parallel import launch_local, make_problem  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="1,2,4,8", help="comma-separated process counts")
    ap.add_argument("--reps", type=int, default=5, help="runs per process count and way")
    ap.add_argument("--layer", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--config", choices=("micro", "tiny"), help="a random layer instead of the checkpoint's")
    ap.add_argument("--json", default="", help="write the rows here")
    a = ap.parse_args()
    print(f"load average before: {os.getloadavg()}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        problem = make_problem(Path(tmp) / "problem.safetensors", a.layer, a.tokens, a.config)
        t0 = time.perf_counter()
        if fork_server.server() is None:
            print(f"the process server did not start: {fork_server.failed()}")
            return 2
        print(f"process server started in {time.perf_counter() - t0:.2f} s")
        for world in [int(g) for g in a.worlds.split(",")]:
            for fork in (True, False):
                times = []
                for _ in range(a.reps):
                    run = launch_local(problem, world, fork=fork)
                    assert run.forked == fork and run.result["max_abs_diff"] <= 1e-5, run.result
                    times.append(run.seconds_total)
                row = {"world": world, "way": "forked" if fork else "spawned", "n": len(times),
                       "median": round(statistics.median(times), 3), "min": round(min(times), 3),
                       "max": round(max(times), 3)}
                rows.append(row)
                print(f"G = {world}  {row['way']:<8} median {row['median']:6.2f} s  min {row['min']:6.2f}  "
                      f"max {row['max']:6.2f}", flush=True)
    print(f"load average after: {os.getloadavg()}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
