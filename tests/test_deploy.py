"""Serving through nginx (deploy/): 2 replicas behind the generated config, on loopback.

A light version of `python bench/capacity.py --proxy` (many protocol-level students through the
proxy, one replica killed mid-run). Here: `python -m deploy --replicas 2` is started once for the
module (skipped with a reason when nginx is not installed, a failure when K3_REQUIRE_BROWSER is set,
as in CI), then

- the shipped deploy/k3-explorer.conf is the generator's output, and nginx accepts it;
- health through the proxy; sticky routing: a browser's cookie keeps it on one replica, and new
  browsers spread over both;
- a hostile query string through the proxy gets the app's notices and no traceback, the same notices
  as directly on a replica, and a long link is not refused by nginx;
- two browser sessions, one on each replica, each with its own prompt through the link, see only their
  own prompt, and each is a student of one class (both replicas write to one PostgreSQL database, the
  session's own cluster; SQLite when no PostgreSQL is installed and CI does not require it) who answers the
  lesson's first question; the replica of one is killed (SIGKILL), and that browser reconnects through nginx
  to the survivor and gets its view back from its link (prompt, top-k, the lesson's step and the class seat),
  with no traceback and no answer lost, and answers again from the survivor;
- SIGTERM stops the launcher, nginx and every replica, and removes the temp dir.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from app import classes
from bench.harness import free_port
from tests.conftest import ROOT, settle

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
TIMEOUT = 300_000                       # ms: cold replicas on a busy 2-core machine
CHIPS = '.st-key-routing_token button, [data-testid="stPills"] button'
PROMPT_BOX = "Text the live model reads"
# Seen from now on: the connection lost (any state but CONNECTED), and script runs started after that.
WATCH_RECONNECT = """(() => {
  window.__k3lost = false; window.__k3runs = 0;
  new MutationObserver(records => {
    for (const r of records) {
      const v = r.target.getAttribute(r.attributeName);
      if (r.attributeName === 'data-test-connection-state' && (v !== 'CONNECTED' || r.oldValue !== 'CONNECTED'))
        window.__k3lost = true;
      if (r.attributeName === 'data-test-script-state' && window.__k3lost && (v === 'running' || r.oldValue === 'running'))
        window.__k3runs++;
    }
  }).observe(document, {subtree: true, attributes: true, attributeOldValue: true,
                        attributeFilter: ['data-test-connection-state', 'data-test-script-state']});
})()"""
CONN = "document.querySelector('[data-testid=\"stApp\"]').getAttribute('data-test-connection-state')"


def need_nginx():
    if NGINX is None:
        if os.environ.get("K3_REQUIRE_BROWSER"):
            pytest.fail("K3_REQUIRE_BROWSER is set but nginx is not installed (apt-get install -y nginx)")
        pytest.skip("nginx not installed (Debian: apt-get install -y nginx); proxy tests skipped")


def get(url: str, cookie: str | None = None, timeout: float = 30):
    req = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:                                  # a zombie (exited, not yet reaped) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Launched:
    def __init__(self, database_url: str):
        self.database_url = database_url
        self.port = free_port()
        self.status_path = Path(tempfile.mkdtemp(prefix="k3-deploy-test-")) / "status.json"
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", prefix="k3-deploy-", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "deploy", "--replicas", "2", "--port", str(self.port), "--health-interval", "1",
             "--status-file", str(self.status_path), "--database-url", database_url], cwd=ROOT, stdout=self.log,
            stderr=subprocess.STDOUT)
        self.status = None

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def wait(self, timeout=300):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"python -m deploy exited with {self.proc.returncode}:\n{self.output()[-4000:]}")
            if self.status_path.exists():
                self.status = json.loads(self.status_path.read_text())
                return self.status
            time.sleep(0.5)
        pytest.fail(f"python -m deploy not serving after {timeout} s:\n{self.output()[-4000:]}")

    def stop(self, timeout=60) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for pid in self.pids():           # never leave one of ours behind, whatever the test found
            if alive(pid) and self.ours(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        return self.proc.returncode

    def ours(self, pid: int) -> bool:
        """The pid is still the process the launcher started (a replica on its port, or its nginx)."""
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return False
        marks = [self.status["workdir"]] + [r["addr"].rsplit(":", 1)[1] for r in self.status["replicas"]]
        return any(m in cmd for m in marks)

    def pids(self) -> list[int]:
        if not self.status:
            return []
        return [r["pid"] for r in self.status["replicas"] if r["pid"]] + [self.status["nginx_pid"]]


@pytest.fixture(scope="module")
def deployment(request, tmp_path_factory):
    need_nginx()
    try:
        url = request.getfixturevalue("postgres_url")
    except pytest.skip.Exception:
        url = f"sqlite:///{tmp_path_factory.mktemp('classes')}/classes.sqlite"
    d = Launched(url)
    try:
        d.wait()
        yield d
    finally:
        d.stop()
        d.log.close()
        os.unlink(d.log.name)
        shutil.rmtree(d.status_path.parent, ignore_errors=True)


def answer(pg, text: str) -> None:
    """Answer the lesson step's question in the sidebar and check it (which sends it to the class)."""
    side = pg.locator('[data-testid="stSidebar"]')
    box = side.get_by_role("textbox", name="Your answer")
    box.fill(text)
    box.press("Enter")
    settle(pg)
    side.get_by_role("button", name="Check").click()
    settle(pg)
    assert "Sent to your class" in side.inner_text()


def answers_of(store, info) -> dict[str, str]:
    return {a.nickname: a.answer for a in store.class_answers(info.id) if a.step == 1}


def replica_of(ctx, base: str) -> str:
    """Which replica nginx sends this browser context to (its cookie jar is the context's)."""
    r = ctx.request.get(base + "_stcore/health")
    assert r.status == 200 and r.text() == "ok"
    return r.headers["x-k3-replica"]


# ---- the configuration ------------------------------------------------------------------------------

def test_shipped_config_is_the_generated_one_and_nginx_accepts_it(tmp_path):
    from deploy import nginx
    shipped = (ROOT / "deploy" / "k3-explorer.conf").read_text()
    assert shipped == nginx.site("127.0.0.1:8080", servers=["127.0.0.1:8501", "127.0.0.1:8502"]), (
        "deploy/k3-explorer.conf is stale: python -m deploy --print-config --replicas 2 > deploy/k3-explorer.conf")
    for needed in ("proxy_set_header Upgrade $http_upgrade", "proxy_read_timeout 1h", "least_conn;",
                   "max_fails=", "proxy_next_upstream error timeout", "proxy_pass http://$k3_upstream;"):
        assert needed in shipped, needed
    need_nginx()
    (tmp_path / "tmp").mkdir()
    (tmp_path / "site.conf").write_text(shipped)
    (tmp_path / "nginx.conf").write_text(nginx.main(str(tmp_path), str(tmp_path / "site.conf")))
    r = subprocess.run([NGINX, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"),
                        "-e", str(tmp_path / "error.log")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_upstream_lists_every_replica_and_never_takes_all_down():
    from deploy import nginx
    text = nginx.upstream(["a:1", "b:2", "c:3"], down={"b:2"})
    assert re.search(r"server b:2 [^;]* down;", text) and "server a:1 max_fails=2 fail_timeout=10s;" in text
    assert " down;" not in nginx.upstream(["a:1", "b:2"], down={"a:1", "b:2"})
    assert "ip_hash;" in nginx.upstream(["a:1"], sticky="ip") and "backup" not in nginx.upstream(["a:1"], sticky="ip")
    with pytest.raises(ValueError):
        nginx.upstream([])


def test_each_cookie_names_one_replica_and_its_backups():
    """A browser pinned to b goes to b first, the others after it; only the names written here route anywhere."""
    from deploy import nginx
    text = nginx.upstream(["a:1", "b:2", "c:3"], down={"b:2"})
    block = re.search(r"upstream k3_replicas_r1 \{(.*?)\}", text, re.S).group(1)
    servers = re.findall(r"server (\S+) [^;]*;", block)
    assert servers == ["b:2", "a:1", "c:3"]
    assert re.search(r"server b:2 [^;]* down;", block) and block.count("backup") == 2
    cookie_map = re.search(r"map \$cookie_k3_replica \$k3_upstream \{(.*?)\}", text, re.S).group(1).split(";")
    assert [line.split() for line in cookie_map if line.strip()] == [
        ["default", "k3_replicas"], ["r0", "k3_replicas_r0"], ["r1", "k3_replicas_r1"], ["r2", "k3_replicas_r2"]]
    assert '"~(^|, )a:1$" r0;' in text and '"~(^|, )c:3$" r2;' in text


# ---- through the proxy ------------------------------------------------------------------------------

def test_health_and_sticky_routing_through_the_proxy(deployment):
    base = deployment.status["url"]
    replicas = {r["addr"] for r in deployment.status["replicas"]}
    status, headers, body = get(base + "_stcore/health")
    assert (status, body) == (200, b"ok")
    assert headers["X-K3-Replica"] in replicas
    cookie = re.search(r"k3_replica=(r[0-9]+)", " ".join(headers.get_all("Set-Cookie") or []))
    assert cookie, headers
    answers = [get(base + "_stcore/health", cookie=f"k3_replica={cookie.group(1)}")[1] for _ in range(6)]
    assert {a["X-K3-Replica"] for a in answers} == {headers["X-K3-Replica"]}, "a cookie must keep a browser on one replica"
    assert not any("k3_replica=" in " ".join(a.get_all("Set-Cookie") or []) for a in answers)   # pinned already
    seen_new = [get(base + "_stcore/health")[1]["X-K3-Replica"] for _ in range(24)]
    assert set(seen_new) == replicas, f"new browsers should spread over both replicas, got {set(seen_new)}"
    assert abs(seen_new.count(min(replicas)) - 12) <= 2, "with nothing open, new browsers alternate"
    forged = get(base + "_stcore/health", cookie="k3_replica=127.0.0.1:22")[1]
    assert forged["X-K3-Replica"] in replicas and "k3_replica=r" in " ".join(forged.get_all("Set-Cookie") or [])


@pytest.mark.browser
def test_hostile_query_string_through_the_proxy(deployment, browser):
    base = deployment.status["url"]
    direct = deployment.status["replicas"][0]["url"]
    query = ("layer=99999&k=abc&token=-3&expert=1e309&bogus=%3Cscript%3Ealert(1)%3C%2Fscript%3E"
             "&preset=own&text=" + urllib.parse.quote("zebra<b>x</b> %00 \u202eevil\u202c 👩‍👩‍👧"))
    notices = {}
    for where, root in (("proxy", base), ("direct", direct)):
        ctx = browser.new_context(viewport={"width": 1400, "height": 2400})
        try:
            pg = ctx.new_page()
            errors = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.goto(root + "routing?" + query, timeout=TIMEOUT)
            pg.wait_for_selector(".st-key-routing_grid canvas", timeout=TIMEOUT)   # the expert grid drawn
            settle(pg)
            assert pg.locator('[data-testid="stException"]').count() == 0, f"traceback ({where})"
            assert "Traceback" not in pg.inner_text("body")
            notices[where] = sorted(pg.locator('[data-testid="stAlert"]').all_inner_texts())
            assert not errors, errors
        finally:
            ctx.close()
    text = "\n".join(notices["proxy"])
    assert "outside 0–92" in text and "not a whole number" in text and "bogus" in text, notices["proxy"]
    assert notices["proxy"] == notices["direct"], notices
    # a long link (12 KB) is the app's to judge, not refused by nginx (its default limit is 8 KB)
    status, _, body = get(base + "routing?text=" + "a" * 12_000)
    assert status == 200 and b"<html" in body.lower()


def spelled(pg) -> str:
    return "".join(pg.locator(CHIPS).all_inner_texts()).replace("␣", " ").replace("↵", "\n")


@pytest.mark.browser
def test_sessions_see_their_own_prompt_and_survive_a_replica_dying(deployment, browser):
    base = deployment.status["url"]
    by_addr = {r["addr"]: r for r in deployment.status["replicas"]}
    contexts, placed = [], {}
    try:
        for _ in range(20):               # new browsers until one sits on each replica (cookie hash)
            ctx = browser.new_context(viewport={"width": 1400, "height": 2400})
            contexts.append(ctx)
            addr = replica_of(ctx, base)
            placed.setdefault(addr, ctx)
            if len(placed) == 2:
                break
        assert len(placed) == 2, f"20 browsers all landed on {set(placed)}"
        (addr_a, ctx_a), (addr_b, ctx_b) = sorted(placed.items())
        markers = {"a": "marker-one", "b": "marker-two"}
        store = classes.Store(deployment.database_url)
        info, _ = store.start("sparse-experts", 8)
        seats = {name: store.join(info.code, f"student {name}")[2] for name in markers}
        pages = {}
        errors = []
        for name, ctx in (("a", ctx_a), ("b", ctx_b)):
            pg = ctx.new_page()
            pg.on("pageerror", lambda e, n=name: errors.append((n, str(e))))
            pg.goto(f"{base}routing?preset=own&text={markers[name]}%20reads%20its%20own%20prompt&lesson=sparse-experts"
                    f"&lesson_step=1&class={info.code}&seat={seats[name]}", timeout=TIMEOUT)
            pages[name] = pg
        for name, pg in pages.items():
            pg.wait_for_selector(".st-key-routing_grid canvas", timeout=TIMEOUT)   # the expert grid drawn
            settle(pg)
            own, other = markers[name], markers["b" if name == "a" else "a"]
            box = pg.get_by_label(PROMPT_BOX).input_value()
            assert own in box and other not in box, f"session {name}: prompt box {box!r}"
            chips = spelled(pg)
            assert own in chips and other not in chips, f"session {name}: chips spell {chips!r}"
            assert pg.locator('[data-testid="stException"]').count() == 0
            answer(pg, "16" if name == "a" else "15")
        assert answers_of(store, info) == {"student a": "16", "student b": "15"}     # one database, two replicas

        # session a moves top-k (so its link holds more than the prompt), then its replica dies
        pa = pages["a"]
        slider = pa.get_by_role("slider", name="Experts per token (top-k)")
        slider.focus()
        slider.press("ArrowLeft")
        pa.wait_for_function("() => new URL(location.href).searchParams.get('k') === '15'", timeout=TIMEOUT)
        settle(pa)
        link_before = pa.url
        pa.evaluate(WATCH_RECONNECT)
        os.kill(by_addr[addr_a]["pid"], signal.SIGKILL)
        pa.wait_for_function("() => window.__k3lost", timeout=60_000)
        pa.wait_for_function(f"() => {CONN} === 'CONNECTED' && window.__k3runs > 0", timeout=TIMEOUT)
        pa.wait_for_selector(".st-key-routing_grid canvas", timeout=TIMEOUT)   # the expert grid drawn
        settle(pa)
        assert replica_of(ctx_a, base) == addr_b, "session a should now be on the surviving replica"
        assert pa.locator('[data-testid="stException"]').count() == 0, "traceback after the reconnect"
        assert "Traceback" not in pa.inner_text("body")
        assert markers["a"] in pa.get_by_label(PROMPT_BOX).input_value()
        assert markers["b"] not in spelled(pa)
        assert "15 of 896" in pa.inner_text("body"), "top-k from the link is not back"
        q_before = urllib.parse.parse_qs(urllib.parse.urlsplit(link_before).query)
        q_after = urllib.parse.parse_qs(urllib.parse.urlsplit(pa.url).query)
        assert q_after == q_before, (link_before, pa.url)
        side = pa.locator('[data-testid="stSidebar"]').inner_text()
        assert f"Class {info.code} as student a" in side and "Step 1 of 8" in side
        assert answers_of(store, info) == {"student a": "16", "student b": "15"}     # nothing lost
        answer(pa, "17")                                                              # from the survivor
        assert answers_of(store, info) == {"student a": "17", "student b": "15"}

        # the survivor still serves session b, which sees only its own prompt, and both can interact
        pb = pages["b"]
        for name, pg in (("a", pa), ("b", pb)):
            slider = pg.get_by_role("slider", name="Experts per token (top-k)")
            k_now = int(urllib.parse.parse_qs(urllib.parse.urlsplit(pg.url).query).get("k", ["16"])[0])
            slider.focus()
            slider.press("ArrowLeft")
            pg.wait_for_function(f"() => new URL(location.href).searchParams.get('k') === '{k_now - 1}'",
                                 timeout=TIMEOUT)
            settle(pg)
            assert f"{k_now - 1} of 896" in pg.inner_text("body")
            assert pg.locator('[data-testid="stException"]').count() == 0
        assert markers["b"] in pb.get_by_label(PROMPT_BOX).input_value()
        assert markers["a"] not in spelled(pb)
        assert not errors, errors
    finally:
        for ctx in contexts:
            ctx.close()
        store.engine.dispose()

    # the launcher noticed, and took the dead replica out of rotation
    deadline = time.time() + 30
    while "taken out of rotation" not in deployment.output() and time.time() < deadline:
        time.sleep(0.5)
    assert "taken out of rotation" in deployment.output(), deployment.output()[-3000:]
    assert f"{addr_a} max_fails=2 fail_timeout=10s down;" in Path(
        deployment.status["workdir"], "k3-upstreams.conf").read_text()


def test_sigterm_stops_everything(deployment):
    """Last in this module: the launcher stops nginx and the replicas, and removes its temp dir."""
    pids = deployment.pids()
    workdir = Path(deployment.status["workdir"])
    assert workdir.exists()
    rc = deployment.stop()
    assert rc == 0, deployment.output()[-3000:]
    deadline = time.time() + 10
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.2)
    assert not [p for p in pids if alive(p)], f"left running: {[p for p in pids if alive(p)]}"
    assert not workdir.exists()
    assert "stopped" in deployment.output()
