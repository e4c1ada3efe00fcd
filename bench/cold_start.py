"""Cold start: from `streamlit run serve.py` (the README's start) to the first fully rendered Overview in headless
Chromium.

Prints each run and the median. Usage: python bench/cold_start.py [RUNS]
The browser is launched before the clock starts; the clock covers the server's start, Python imports,
the first script run and the browser's rendering of every chart on the page.
"""
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.harness import CHROMIUM_FLAGS, IDLE, chromium_path, free_port  # noqa: E402


def one_run(browser) -> tuple[float, float]:
    port = free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "serve.py",
                             "--server.headless", "true", "--server.address", "127.0.0.1",
                             "--server.port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.05)
        healthy = time.perf_counter() - t0
        page = browser.new_page(viewport={"width": 1400, "height": 2400})
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector(IDLE, timeout=120_000)
        # every chart of the Overview drawn: the layer stack's SVG squares and the three canvas charts
        page.wait_for_function("() => document.querySelectorAll('.vega-embed svg g.mark-symbol path').length >= 186"
                               " && document.querySelectorAll('.vega-embed canvas').length >= 3", timeout=120_000)
        rendered = time.perf_counter() - t0
        page.close()
        return healthy, rendered
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_FLAGS)
        results = [one_run(browser) for _ in range(runs)]
        browser.close()
    for i, (h, r) in enumerate(results):
        print(f"run {i + 1}: server healthy {h:.2f} s, Overview rendered {r:.2f} s")
    print(f"median over {runs}: server healthy {statistics.median(h for h, _ in results):.2f} s, "
          f"Overview rendered {statistics.median(r for _, r in results):.2f} s")


if __name__ == "__main__":
    main()
