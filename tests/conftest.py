"""Shared fixtures: a live Streamlit server on a free loopback port and a headless Chromium."""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench.harness import CHROMIUM_FLAGS, IDLE, chromium_path, free_port  # noqa: E402


def pytest_configure(config):
    # The app's idle-time prefetch (app/live.py) and the server's warm-up (app/warm.py) off in tests and
    # in the servers they start, so that CPU and timings stay each test's own; tests/test_live.py and
    # tests/test_warm.py turn them on where they are the subject.
    os.environ.setdefault("K3_PREFETCH", "0")
    os.environ.setdefault("K3_WARM", "0")
    # classes and answers of the tests' servers and AppTests in a database of the test run's own
    os.environ.setdefault("K3_DATABASE_URL", f"sqlite:///{tempfile.mkdtemp(prefix='k3-classes-')}/classes.sqlite")


@contextlib.contextmanager
def launch_server():
    """Run `streamlit run serve.py` (the README's start; K3_WARM=0 here, so it loads nothing before answering) on a
    free loopback port; yields its base URL once healthy."""
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "serve.py", "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            if proc.poll() is not None:
                break
            try:
                if urllib.request.urlopen(base + "_stcore/health", timeout=1).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.3)
        else:
            pytest.fail("streamlit server did not become healthy in 90 s")
        if proc.poll() is not None:
            log.seek(0)
            pytest.fail(f"streamlit server exited early:\n{log.read()[-3000:]}")
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        os.unlink(log.name)


@pytest.fixture(scope="session")
def server():
    """One app server for the whole test session; always stopped afterwards."""
    with launch_server() as base:
        yield base


def missing(what: str, required_by: str, install: str) -> None:
    """A tool the tests need is not installed: a failure where the environment requires it (CI), else a skip."""
    if os.environ.get(required_by):
        pytest.fail(f"{required_by} is set but {what} was not found ({install})")
    pytest.skip(f"{what} not found ({install}); its tests skipped")


@pytest.fixture(scope="session")
def browser():
    exe = chromium_path()
    if exe is None:
        missing("chromium", "K3_REQUIRE_BROWSER", "apt-get install -y chromium")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        br = p.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield br
        finally:
            br.close()


@pytest.fixture(scope="session")
def postgres_url():
    """A private PostgreSQL cluster for the session (Debian's postgresql), as the proxy tests run their own nginx."""
    from bench.harness import postgres_bin, private_postgres
    bin_dir = postgres_bin()
    if bin_dir is None:
        missing("a PostgreSQL server", "K3_REQUIRE_POSTGRES", "apt-get install -y postgresql")
    with private_postgres(bin_dir) as url:
        yield url


@pytest.fixture(scope="session")
def shot_dir():
    d = Path(os.environ.get("K3_SHOTS") or tempfile.mkdtemp(prefix="k3-shots-"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def open_app_page(path: str, params: dict | None = None, allow_errors: bool = True):
    """AppTest of one page: the app runs once (its first page drops link parameters it does not use),
    then the link parameters are set and the page is opened. Fails on any exception (and on st.error
    unless allow_errors)."""
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=600).run()
    for k, v in (params or {}).items():
        at.query_params[k] = v
    at.switch_page(path).run()
    assert not at.exception, [e.value for e in at.exception]
    if not allow_errors:
        assert not at.error, [e.value for e in at.error]
    return at


def outside_code(text: str) -> str:
    """Markdown text without its code spans: markup a notice quotes as typed sits in a code span, where it is
    shown as text; anywhere else it must have been escaped."""
    return re.sub(r"(`+)(?:(?!\1).)*?\1", "", text, flags=re.S)


def settle(page, timeout=240_000):
    """Wait until the app is idle twice, half a second apart (a rerun can start just after the first),
    and until no element is still a loading skeleton (charts, code boxes and page links load their
    code lazily and show a stSkeleton placeholder until then)."""
    page.wait_for_selector(IDLE, timeout=timeout)
    time.sleep(0.5)
    page.wait_for_selector(IDLE, timeout=timeout)
    page.wait_for_function("!document.querySelector('[data-testid=\"stSkeleton\"]')", timeout=timeout)


@pytest.fixture()
def page(browser):
    """A fresh browser context per test (a new Streamlit session), collecting JavaScript errors."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 2400})
    pg = ctx.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.js_errors = errors
    yield pg
    ctx.close()


def markdown_table(text: str):
    """A table written by app.text.md_table read back as a data frame, or None when `text` is no table: cells
    unescaped; a column of numbers (thousands commas allowed, "–" for a missing value) as numbers, a column
    of yes/no as flags."""
    import re

    import pandas as pd
    lines = text.splitlines()
    if len(lines) < 2 or not lines[0].startswith("|") or not set(lines[1]) <= set("|-: "):
        return None
    def cells(line):
        return [re.sub(r"\\(.)", r"\1", c.strip()).replace("\u00a0", "") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
    df = pd.DataFrame([cells(line) for line in lines[2:]], columns=cells(lines[0]))
    for c in df.columns:
        values = df[c].tolist()
        if values and set(values) <= {"yes", "no"}:
            df[c] = [v == "yes" for v in values]
            continue
        try:
            numbers = [None if v == "–" else float(v.replace(",", "")) for v in values]
        except ValueError:
            continue
        whole = all(n is not None and n.is_integer() and "." not in v and "e" not in v for n, v in zip(numbers, values))
        df[c] = [int(n) for n in numbers] if whole else [float("nan") if n is None else n for n in numbers]
    return df


def markdown_tables(at) -> list:
    """Every table an AppTest page drew with ui.table (one Markdown element each), in page order."""
    return [t for t in (markdown_table(m.value) for m in at.markdown) if t is not None]


def vega_datasets(el) -> dict:
    """A Vega-Lite chart element of an AppTest: its named datasets as data frames."""
    import pyarrow as pa
    return {ds.name: pa.ipc.open_stream(ds.data.data).read_all().to_pandas() for ds in el.proto.datasets}
