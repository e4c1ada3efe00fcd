"""Every control's server time: each page opened alone on a fresh server, each of its controls changed
as a person would (one slider step, another option, a toggle, a button), several times in a row.

    python bench/controls.py                          # every page, 5 changes per control
    python bench/controls.py --pages balance,quant --reps 8 --json /tmp/controls.json
    python bench/controls.py --text "Grüße aus Kyoto: 日本語 and 🐱"   # pages opened with an own prompt

What is timed is the server's side of an input, as in bench/capacity.py (deploy/protocol.py speaks the
websocket protocol; no browser): from the BackMsg until the run's last message. One session at a time,
so each figure is the control's own cost on this machine. A slider steps on from where it is (up, or
down at its end), so most steps are values not seen before; `first` is the first change after the
page opened, `median` and `p95` over all changes. The goal (docs/PERFORMANCE.md): every control's
median at most 1.0 s. Exit status 0: all within it; 1: some control over it; 2: an error.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.capacity import KINDS, NEVER, Replica  # noqa: E402
from bench.harness import pct  # noqa: E402
from deploy.protocol import Session, next_state  # noqa: E402

GOAL_S = 1.0
OWN_TEXT = "Your own text"      # the prompt preset that waits for typed text (an empty prompt here)


def controls_on(s: Session) -> list:
    """Every control of the page's main area a person can change (every button included)."""
    return [w for w in s.widgets.values() if not w.sidebar and w.key not in NEVER
            and not getattr(w.proto, "disabled", False) and (w.kind in KINDS or w.kind == "button")]


def step(w, rng):
    """The next state of `w` as a person would set it; the prompt presets cycle over the written
    prompts (choosing "Your own text" without typing leaves every page waiting for a prompt)."""
    st = next_state(w, rng)
    if w.key == "prompt_preset" and st is not None and OWN_TEXT in st.string_array_value.data:
        opts = [o.content for o in w.proto.options if o.content != OWN_TEXT]
        cur = list(w.proto.raw_values)
        st.string_array_value.data[:] = [rng.choice([o for o in opts if o not in cur] or opts)]
    return st


async def measure(base: str, pages: list[str], reps: int, query: dict, rng: random.Random) -> list[dict]:
    rows = []
    s = Session(base, timeout=300)
    await s.connect()
    try:
        await s.open("routing", query)                   # loads the live model; not timed
        paths = pages or [p for p in s.pages]
        for path in paths:
            run = await s.open(path, query)
            print(f"/{path or '(default)'}: opened in {run.seconds:.2f} s ({len(controls_on(s))} controls)",
                  flush=True)
            for key in [w.key for w in controls_on(s)]:
                times, errors = [], []
                for _ in range(reps):
                    w = s.find(key)
                    st = step(w, rng) if w else None
                    if st is None:
                        break
                    run = await s.set_widget(w, st)
                    times.append(run.seconds)
                    if not run.ok:
                        errors.append(run.exceptions[0][:160] if run.exceptions else run.status)
                if not times:
                    continue
                row = {"page": path or "(default)", "control": key, "n": len(times),
                       "first": round(times[0], 3), "median": round(statistics.median(times), 3),
                       "p95": round(pct(times, 95), 3), "max": round(max(times), 3), "errors": errors}
                rows.append(row)
                flag = "  OVER" if row["median"] > GOAL_S else ""
                print(f"  {key:<28} first {row['first']:6.2f}  median {row['median']:6.2f}  "
                      f"p95 {row['p95']:6.2f}  max {row['max']:6.2f}{flag}"
                      + (f"  ERRORS {errors[:1]}" if errors else ""), flush=True)
    finally:
        await s.close()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", default="", help="comma-separated url paths (default: every page)")
    ap.add_argument("--reps", type=int, default=5, help="changes per control")
    ap.add_argument("--text", default="", help="open every page with this own prompt")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--url", default="", help="a server that is already running (default: start one)")
    ap.add_argument("--json", default="", help="write the rows here")
    args = ap.parse_args()
    query = {"preset": "own", "text": args.text} if args.text else {}
    server = None
    if not args.url:
        server = Replica(None)
        server.wait()
    base = args.url or server.url
    print(f"load average before: {os.getloadavg()}")
    t0 = time.perf_counter()
    try:
        rows = asyncio.run(measure(base, [p for p in args.pages.split(",") if p] if args.pages else [],
                                   args.reps, query, random.Random(args.seed)))
    finally:
        if server:
            server.stop()
    print(f"load average after: {os.getloadavg()}; {time.perf_counter() - t0:.0f} s in all")
    over = [r for r in rows if r["median"] > GOAL_S]
    bad = [r for r in rows if r["errors"]]
    print(f"{len(rows)} controls; {len(over)} over {GOAL_S:.1f} s median"
          + "".join(f"\n  {r['page']}/{r['control']}: median {r['median']:.2f} s" for r in over)
          + (f"; {len(bad)} with errors" if bad else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 2 if bad else 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
