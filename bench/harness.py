"""What the benchmarks and the tests share: a free loopback port, the headless Chromium and its flags, the
scripts that tell when a page has settled in the browser, the marker words of a load test's sessions, and
percentiles. bench/*.py and tests/ import these from here; nothing here imports tests/.
"""
from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import subprocess
import tempfile
import time

from deploy.launcher import free_port  # one definition: the launcher picks its replicas' ports with it

__all__ = ["CHIPS", "CHROMIUM_FLAGS", "IDLE", "IDLE_JS", "MARKER", "QUIET_MS", "ROUTING_DRAWN_JS", "SETTLED_JS",
           "STILL_JS", "WATCH_RUNS", "chromium_path", "free_port", "pct", "postgres_bin", "private_postgres"]

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"][data-test-connection-state="CONNECTED"]'


def chromium_path() -> str | None:
    for cand in (os.environ.get("K3_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                 shutil.which("chromium-browser")):
        if cand and os.path.exists(cand):
            return cand
    return None


def postgres_bin() -> str | None:
    """The folder of Debian's PostgreSQL server programs (initdb, pg_ctl), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(os.path.realpath(initdb)) if initdb else None


@contextlib.contextmanager
def private_postgres(bin_dir: str):
    """A PostgreSQL cluster of its own in a temporary folder, on a free loopback port, trusted for local
    connections: yields its SQLAlchemy URL; stopped and deleted afterwards. As root the server runs as the
    `postgres` user (it refuses to run as root)."""
    data = tempfile.mkdtemp(prefix="k3-pg-")
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(data, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()

    def run(*cmd, check=True):
        return subprocess.run([*as_user, *cmd], check=check, capture_output=True, text=True, timeout=120)

    run(f"{bin_dir}/initdb", "-D", f"{data}/db", "-A", "trust", "-U", "k3", "-E", "UTF8", "--no-sync")
    run(f"{bin_dir}/pg_ctl", "-D", f"{data}/db", "-l", f"{data}/log", "-w", "-t", "60", "start", "-o",
        f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200")
    try:
        yield f"postgresql+psycopg://k3@127.0.0.1:{port}/postgres"
    finally:
        run(f"{bin_dir}/pg_ctl", "-D", f"{data}/db", "-m", "immediate", "-w", "stop", check=False)
        for _ in range(20):
            try:
                shutil.rmtree(data)
                break
            except OSError:
                time.sleep(0.2)


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
