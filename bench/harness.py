"""What the benchmarks and the tests share: a free loopback port, the headless Chromium and its flags, the
scripts that tell when a page has settled in the browser, the marker words of a load test's sessions, and
percentiles. bench/*.py and tests/ import these from here; nothing here imports tests/.
"""
from __future__ import annotations

import os
import re
import shutil

from deploy.launcher import free_port  # one definition: the launcher picks its replicas' ports with it

__all__ = ["CHIPS", "CHROMIUM_FLAGS", "IDLE", "IDLE_JS", "MARKER", "QUIET_MS", "ROUTING_DRAWN_JS", "SETTLED_JS",
           "STILL_JS", "WATCH_RUNS", "chromium_path", "free_port", "pct"]

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"][data-test-connection-state="CONNECTED"]'


def chromium_path() -> str | None:
    for cand in (os.environ.get("K3_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                 shutil.which("chromium-browser")):
        if cand and os.path.exists(cand):
            return cand
    return None


def pct(values, q: float) -> float:
    """Percentile by linear interpolation between closest ranks (q in 0..100)."""
    v = sorted(values)
    if not v:
        return float("nan")
    pos = (len(v) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


# A session of a load test writes its own marker word ("zebra07") into its prompt, so a page that shows
# another session's marker shows another session's view.
MARKER = re.compile(r"zebra\d\d")
# The Routing explorer's token chips (st.pills, key routing_token; the test id differs across versions)
CHIPS = '.st-key-routing_token button, [data-testid="stPills"] button'

# Installed in every document before the page's own scripts. window.__k3ran turns true whenever the
# app starts a script run (seen as an attribute change, and polled every 20 ms as a backstop);
# window.__k3runEnd is when (epoch ms) the app last turned idle, i.e. the server finished a run;
# window.__k3quiet is the time (epoch ms) of the last change anywhere in the DOM. The app's "not
# running" flag alone is not enough: on a warm server the run ends while the browser is still
# drawing its elements (seconds for big plotly charts on 2 cores), so a page counts as settled when
# a run has happened, the app is idle and connected, and the DOM has been quiet for QUIET_MS.
QUIET_MS = 400
WATCH_RUNS = """
(() => {
  if (window.__k3watch) return;
  window.__k3watch = true; window.__k3ran = false; window.__k3quiet = Date.now();
  window.__k3state = null; window.__k3runEnd = 0;
  const note = () => {
    const app = document.querySelector('[data-testid="stApp"]');
    const v = app ? app.getAttribute('data-test-script-state') : null;
    if (v === 'running') window.__k3ran = true;
    if (v === 'notRunning' && window.__k3state !== 'notRunning') window.__k3runEnd = Date.now();
    window.__k3state = v;
  };
  setInterval(note, 20);
  new MutationObserver(records => {
    window.__k3quiet = Date.now();
    for (const r of records) if (r.attributeName === 'data-test-script-state' && r.oldValue === 'running') window.__k3ran = true;
    note();
  }).observe(document, {subtree: true, childList: true, characterData: true, attributes: true, attributeOldValue: true});
})()
"""
IDLE_JS = "document.querySelector('" + IDLE.replace("'", "\\'") + "') !== null && document.querySelector('h1') !== null"
SETTLED_JS = f"() => window.__k3ran === true && {IDLE_JS} && Date.now() - window.__k3quiet > {QUIET_MS}"
STILL_JS = f"() => window.__k3ran === false && {IDLE_JS}"
ROUTING_DRAWN_JS = """(k) => document.querySelectorAll('.st-key-routing_token button, [data-testid="stPills"] button')
  .length > 0 && document.querySelector('.st-key-routing_grid canvas') !== null
  && document.body.innerText.includes(k + ' of 896')"""
