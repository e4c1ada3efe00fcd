"""What a routing change costs on the Routing explorer: a full forward of the live model against
model.resume from layer 46 and from layer 80, for a 64-token prompt, plus the page's own data and
figure work after a run. Prints each median and the ratios.

Usage: python bench/bench_routing.py [REPEATS]
"""
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from app import routing as rt  # noqa: E402
from app.charts.routing import changed_spec, fingerprint_spec, grid_spec  # noqa: E402
from app.routing_heldout import HELDOUT_PATH  # noqa: E402
from model.checkpoint import load_pretrained  # noqa: E402
from model.k3 import RoutingOverride  # noqa: E402


def median_ms(fn, repeats: int) -> float:
    fn()                                                       # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    torch.set_grad_enabled(False)
    model, tok = load_pretrained()
    ids = tok.encode(HELDOUT_PATH.read_text(encoding="utf-8"))[:64]
    x = torch.tensor([ids])
    ov = RoutingOverride(top_k=8, knocked_out=(5,))
    with torch.inference_mode():
        base = model(x)
        rows = [("full forward (93 layers)", median_ms(lambda: model(x, routing=ov), repeats))]
        for start in (46, 80):
            rows.append((f"resume from layer {start} ({93 - start} layers)",
                         median_ms(lambda: model.resume(base, start, routing=ov), repeats)))
        new = model.resume(base, 46, routing=ov)

    def page_work():
        grid = rt.layer_grid(new, 46, 63, ov.knocked_out)
        grid_spec(grid, "probability", 5)
        fingerprint_spec(*rt.fingerprint(new, 63))
        changed_spec(rt.changed_choices(base, new, 63, 46))
    rows.append(("page data + figures after a run", median_ms(page_work, repeats)))

    full = rows[0][1]
    print(f"{len(ids)}-token prompt, median of {repeats} runs, torch threads {torch.get_num_threads()}")
    for name, ms in rows:
        print(f"  {name:<36} {ms:8.1f} ms   {full / ms:5.1f}x faster than a full forward" if ms != full
              else f"  {name:<36} {ms:8.1f} ms")


if __name__ == "__main__":
    main()
